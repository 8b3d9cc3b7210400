package logging

import (
	"errors"
	"fmt"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
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
	require.Contains(t, text, "https://h/cgi-bin/webhook/send?[redacted]")
}
