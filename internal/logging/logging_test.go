package logging

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// No log line carries a URL's password, whatever field it comes in.
func TestRedactingMasksURLPasswords(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(Redacting(core)).With(zap.String("broker", "amqp://guest:pw-with-fields@h:5672/"))
	u, err := url.Parse("http://admin:pw-in-stringer@h:15672")
	require.NoError(t, err)
	log.Warn("connect to http://guest:pw-in-message@h failed",
		zap.Error(fmt.Errorf("dial: %w", errors.New(`Get "http://guest:pw-in-error@h/api": refused`))),
		zap.String("url", "https://u:pw-in-string@hooks.example/cb"),
		zap.Stringer("mgmt", u),
		zap.String("recipient", "a***e@example.com"),
		zap.Int("n", 3))
	entries := logs.All()
	require.Len(t, entries, 1)
	e := entries[0]
	text := e.Message + fmt.Sprint(e.ContextMap())
	for _, pw := range []string{"pw-with-fields", "pw-in-message", "pw-in-error", "pw-in-string", "pw-in-stringer"} {
		require.NotContains(t, text, pw)
	}
	require.Contains(t, text, "guest:xxxxx@h")
	require.Equal(t, "a***e@example.com", e.ContextMap()["recipient"], "a masked recipient is left alone")
	require.EqualValues(t, 3, e.ContextMap()["n"])
}

// Whatever a path no test took does, no line has a key twice: a key the
// encoder, a With or an earlier field gave is renamed key_2, key_3.
func TestUniqueRenamesARepeatedKey(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log, err := NewTo(&buf, "info", "json")
	require.NoError(t, err)
	log = log.With(zap.String("queue", "all"), zap.String("queue", "with-twice"))
	log.Info("x", zap.String("queue", "one"), zap.String("caller", "a key name"), zap.Int("n", 1), zap.Int("n", 2),
		zap.String("n_2", "taken"), zap.Skip(), zap.Skip(), zap.Namespace("inner"), zap.String("queue", "nested"))
	log.Info("y", zap.String("other", "no copy"))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2)
	m, err := testenv.DecodeLogLine([]byte(lines[0]))
	require.NoError(t, err, lines[0])
	require.Equal(t, "all", m["queue"])
	require.Equal(t, "with-twice", m["queue_2"])
	require.Equal(t, "one", m["queue_3"])
	require.Contains(t, m["caller"], "logging_test.go", "zap's own caller stays")
	require.Equal(t, "a key name", m["caller_2"])
	require.Equal(t, "1", fmt.Sprint(m["n"]))
	require.Equal(t, "2", fmt.Sprint(m["n_3"]), "n_2 was taken by a later field")
	require.Equal(t, "taken", m["n_2"])
	require.Equal(t, map[string]any{"queue": "nested"}, m["inner"], "a namespace's keys are its own")
	m, err = testenv.DecodeLogLine([]byte(lines[1]))
	require.NoError(t, err)
	require.Equal(t, "all", m["queue"])
	require.Equal(t, "no copy", m["other"])
}

// Nor a token, a key or a signature in a URL's query, whatever package
// logged it (issue 37: Go's url.Error quotes the whole request URL).
func TestRedactingTakesQueriesOut(t *testing.T) {
	t.Parallel()
	core, logs := observer.New(zapcore.DebugLevel)
	log := zap.New(Redacting(core))
	log.Warn(`upload failed: Post "http://h/cgi-bin/media/upload?access_token=tok-in-message": timeout`,
		zap.Error(errors.New(`Get "https://h/cgi-bin/gettoken?corpid=c&corpsecret=secret-in-error": EOF`)),
		zap.String("url", "https://h/cgi-bin/webhook/send?key=key-in-string"))
	e := logs.All()[0]
	text := e.Message + fmt.Sprint(e.ContextMap())
	for _, s := range []string{"tok-in-message", "secret-in-error", "key-in-string"} {
		require.NotContains(t, text, s)
	}
	require.Contains(t, text, "https://h/cgi-bin/[redacted]", "scheme, host and first path segment stay")
}
