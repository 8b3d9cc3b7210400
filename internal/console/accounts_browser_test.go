package console_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Issue 37: the accounts view shows each account's limits, as the API
// reads them (WECOM_ACCOUNT_LIMITS), in a real headless Chromium: an
// account with limits, one without, one down.
func TestBrowserShowsWeComAccountLimits(t *testing.T) {
	h := setup(t)
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_AUTH": "disabled",
		"WECOM_ACCOUNTS":       "team-a=corp-a:2001@shop,team-b=corp-b:2002",
		"WECOM_ACCOUNT_LIMITS": "team-a=20/600/0/100000,default=5/0/0/0"}))
	require.NoError(t, l.Err())
	rdb := h.stack.Redis
	store, err := accountstate.New(rdb.Client, accountstate.Config{Prefix: rdb.Prefix, DownFor: time.Hour})
	require.NoError(t, err)
	require.NoError(t, store.Account("team-b").MarkDown(context.Background(), "wecom 40001: invalid credential"))
	// As api.Server.WeComAccountStates builds them: the state from Redis,
	// tenants and limits from the API's configuration.
	h.accounts = func(ctx context.Context) ([]accountstate.State, error) {
		out := make([]accountstate.State, 0, 3)
		for _, a := range append([]wecom.Account{{Name: wecom.DefaultAccount}}, cfg.WeComAccounts...) {
			st, err := store.Get(ctx, a.Name)
			if err != nil {
				return nil, err
			}
			st.Tenants = a.Tenants
			if lim, ok := cfg.WeComLimits[a.Name]; ok {
				limits := client.WeComAccountLimits(lim)
				st.Limits = &limits
			}
			out = append(out, st)
		}
		return out, nil
	}
	_, srv := h.serve(t, keys, nil)

	b := newBrowser(t)
	b.login(srv.URL)
	b.waitVisible("#wecom-accounts")
	cell := func(account string) string {
		return b.text(`#wecom-accounts tr[data-account="` + account + `"] td.limits`)
	}
	require.Equal(t, "20/s · 600/min · 100000/day", cell("team-a"))
	require.Equal(t, "5/s", cell("default"))
	require.Equal(t, "–", cell("team-b"), "no limits configured")
	require.Contains(t, b.text("#wecom-accounts thead"), "Limits")
	require.Contains(t, b.text(`#wecom-accounts tr[data-account="team-b"]`), "down")
	if dir := os.Getenv("MSGPULSE_CONSOLE_SHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		b.screenshot(filepath.Join(dir, "wecom-accounts.png"))
	}
}
