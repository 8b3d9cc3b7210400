package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// encoding/json takes {"a":1,"a":2} as {"a":2}; a log pipeline refuses
// it. The decoder says so, at any depth.
func TestDecodeLogLineRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		line, err string
	}{
		{`{"level":"info","msg":"request","caller":"api/server.go:1","status":503}`, ""},
		{`{"level":"info","caller":"api/server.go:1","caller":"tests"}`, `duplicate key "caller"`},
		{`{"a":{"b":1,"c":{"d":[1,{"e":1,"e":2}]}}}`, `duplicate key "a.c.d.1.e"`},
		{`{"a":{"b":1},"b":{"b":1}}`, ""},
		{`{"a":[{"b":1},{"b":2}]}`, ""},
		{`{"a":{"b":1,"b":1}}`, `duplicate key "a.b"`},
		{`["not","an","object"]`, "not a JSON object"},
		{`{"a":1}{"b":2}`, "more after the object"},
		{`{"a":1`, "EOF"},
	} {
		m, err := DecodeLogLine([]byte(tc.line))
		if tc.err == "" {
			require.NoError(t, err, tc.line)
			require.NotEmpty(t, m)
			continue
		}
		require.ErrorContains(t, err, tc.err, tc.line)
	}
}

func TestLogLinesSkipsWhatIsNotJSON(t *testing.T) {
	t.Parallel()
	lines, other, err := LogLines("{\"msg\":\"a\"}\npanic: boom\n\n{\"msg\":\"b\",\"n\":1}\n")
	require.NoError(t, err)
	require.Len(t, lines, 2)
	require.Equal(t, "b", lines[1]["msg"])
	require.Equal(t, []string{"panic: boom"}, other)
	_, _, err = LogLines("{\"msg\":\"a\"}\n{\"msg\":\"b\",\"msg\":\"c\"}\n")
	require.ErrorContains(t, err, `line 2: duplicate key "msg"`)
}
