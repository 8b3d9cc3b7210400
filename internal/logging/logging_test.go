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
