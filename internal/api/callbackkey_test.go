package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
)

// `api callback-key -tenant NAME` prints the key that signs NAME's
// callbacks, read from the API's own settings, and nothing for a tenant
// without one.
func TestPrintCallbackKey(t *testing.T) {
	t.Parallel()
	const master = "master-callback-secret-0123"
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": "shopA/backend:k-0123456789abcdefgh",
		"CALLBACK_SECRET": master, "CALLBACK_SECRETS": "shopB=shopB-callback-secret-01"}))
	require.NoError(t, l.Err())
	for _, tc := range []struct {
		tenant, want string
	}{
		{"shopA", callbackkey.Derive(master, "shopA")},
		{"shopB", "shopB-callback-secret-01"},
	} {
		var out, errw bytes.Buffer
		require.Equal(t, cli.ExitOK, PrintCallbackKey(&out, &errw, cfg.CallbackKeys, []string{"-tenant", tc.tenant}))
		require.Equal(t, tc.want+"\n", out.String())
		require.NotContains(t, out.String(), master)
	}
	var out, errw bytes.Buffer
	require.Equal(t, cli.ExitUsage, PrintCallbackKey(&out, &errw, cfg.CallbackKeys, nil))
	require.Contains(t, errw.String(), "-tenant")

	none, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": "shopA/backend:k-0123456789abcdefgh"}))
	require.NoError(t, l.Err())
	out.Reset()
	errw.Reset()
	require.Equal(t, cli.ExitError, PrintCallbackKey(&out, &errw, none.CallbackKeys, []string{"-tenant", "shopA"}))
	require.Empty(t, out.String())
	require.True(t, strings.Contains(errw.String(), "CALLBACK_SECRETS") && strings.Contains(errw.String(), "CALLBACK_SECRET"), errw.String())
}
