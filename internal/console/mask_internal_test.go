package console

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/logging"
)

// The allow-list applies by place: top-level routing fields and a batch
// member's taskId are shown; the same names deeper down (a variable
// called "status") are masked like everything else; a code's seal and
// digest are hidden; error texts keep their words but lose recipients.
func TestMaskDocument(t *testing.T) {
	var doc any
	require.NoError(t, json.Unmarshal([]byte(`{
		"v": 1, "taskId": "t1", "batchId": "t1", "channel": "wecom", "template": "notice", "tenant": "shopA", "priority": 2, "attempt": 1,
		"recipient": "", "recipients": [{"taskId": "t1-a", "recipient": "zhang.wei"}, {"taskId": "t1-b", "recipient": "li.na.long"}],
		"mentions": ["wang.fang", "@all"], "callbackUrl": "https://hooks.example.com/cb?token=secret",
		"variables": {"status": "alice@example.com", "taskId": "13800138000", "n": 13800138000},
		"sealedCode": "sealed", "codeDigest": "digest", "unknownField": "bob@example.com",
		"lastError": "user zhang.wei not found, mail to carol@example.com bounced, see https://x.example.com/y, call +86 138 0013 8000"
	}`), &doc))
	out, _ := maskDocument(doc)
	got, err := json.Marshal(out)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(got, &m))

	for k, want := range map[string]any{"v": 1.0, "taskId": "t1", "batchId": "t1", "channel": "wecom", "template": "notice", "tenant": "shopA",
		"priority": 2.0, "attempt": 1.0, "recipient": "", "sealedCode": hidden, "codeDigest": hidden, "unknownField": logging.Mask("bob@example.com"),
		"callbackUrl": logging.Mask("https://hooks.example.com/cb?token=secret")} {
		require.Equal(t, want, m[k], k)
	}
	mask := logging.Mask
	require.Equal(t, []any{map[string]any{"taskId": "t1-a", "recipient": mask("zhang.wei")}, map[string]any{"taskId": "t1-b", "recipient": mask("li.na.long")}}, m["recipients"])
	require.Equal(t, []any{mask("wang.fang"), mask("@all")}, m["mentions"])
	require.Equal(t, map[string]any{"status": mask("alice@example.com"), "taskId": mask("13800138000"), "n": mask("13800138000")}, m["variables"])
	require.Equal(t, "user "+mask("zhang.wei")+" not found, mail to "+mask("carol@example.com")+" bounced, see "+mask("https://x.example.com/y")+
		", call "+mask("+86 138 0013 8000"), m["lastError"])
}
