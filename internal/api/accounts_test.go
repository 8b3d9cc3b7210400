package api

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
)

// WECOM_ACCOUNTS as the API reads it: team-a is shop's, team-b blog's,
// shared is every tenant's.
func accountsFromEnv(t *testing.T) options {
	t.Helper()
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_AUTH": "disabled",
		"WECOM_ACCOUNTS":       "team-a=corp-a:2001:secret-a@shop, team-b=corp-b:2002@blog, shared=corp-c:2003",
		"WECOM_ACCOUNT_LIMITS": "team-a=20/600/0/100000"}))
	require.NoError(t, l.Err())
	for _, a := range cfg.WeComAccounts {
		require.Empty(t, a.Secret, "the API keeps no secret")
	}
	return options{keys: tenantKeys(t), wecomAccounts: cfg.WeComAccounts, wecomLimits: cfg.WeComLimits}
}

func TestWeComAccountIsChosenForTheTenant(t *testing.T) {
	h := setup(t, accountsFromEnv(t))
	for _, tc := range []struct {
		name, key, account string
		status             int
		want               string // the envelope's account, or the 400's words
	}{
		{"shop's first account", shopKey, "", 202, "team-a"},
		{"blog's first account", blogKey, "", 202, "team-b"},
		{"no account listed for the tenant: default", allKey, "", 202, "default"},
		{"named, listed for the tenant", shopKey, "team-a", 202, "team-a"},
		{"named, every tenant's", blogKey, "shared", 202, "shared"},
		{"another tenant's account", shopKey, "team-b", 400, `WeCom account "team-b" is not listed for tenant "shop"`},
		{"unknown account", shopKey, "nope", 400, `unknown WeCom account "nope"`},
	} {
		body := map[string]any{"messageType": "WECOM", "templateCode": "notice", "recipient": "zhangsan", "account": tc.account,
			"variables": map[string]string{"title": "t", "content": "c"}}
		r := h.do("POST", "/api/messages/send", body, "X-API-Key", tc.key)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Msg)
		if tc.status != 202 {
			require.Contains(t, r.Msg, tc.want, tc.name)
			continue
		}
		m, err := envelope.Decode(h.get("queue.wecom.normal").Body)
		require.NoError(t, err)
		require.Equal(t, tc.want, m.Account, tc.name)
	}
	// A batch is checked the same way.
	r := h.do("POST", "/api/messages/batch", map[string]any{"messageType": "WECOM", "templateCode": "notice", "recipients": []string{"a", "b"},
		"account": "team-a", "variables": map[string]string{"title": "t", "content": "c"}}, "X-API-Key", blogKey)
	require.Equal(t, 400, r.Status)
	require.Contains(t, r.Msg, `"team-a" is not listed for tenant "blog"`)
	// account is for WECOM only.
	r = h.do("POST", "/api/messages/send", map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipient": "a@example.com",
		"account": "team-a", "variables": map[string]string{"title": "t", "content": "c"}}, "X-API-Key", shopKey)
	require.Equal(t, 400, r.Status)
}

func TestQueueStatsShowWeComAccounts(t *testing.T) {
	h := setup(t, accountsFromEnv(t))
	ctx := context.Background()
	require.NoError(t, h.srv.d.Accounts.Account("team-b").MarkDown(ctx, "wecom 40001: invalid credential"))
	require.NoError(t, h.srv.d.Accounts.Account("team-a").Record(ctx, true))
	require.NoError(t, h.srv.d.Accounts.Account("team-a").Record(ctx, false))
	r := h.do("GET", "/api/queues/stats", nil, "X-API-Key", adminKey)
	require.Equal(t, 200, r.Status, r.Msg)
	var data struct {
		WeComAccounts []struct {
			Account, Status, DownReason string
			Health                      float64
			Sends                       int
			Tenants                     []string
			Limits                      *wecom.Limits
		} `json:"wecomAccounts"`
	}
	require.NoError(t, json.Unmarshal(r.RawData, &data))
	require.Len(t, data.WeComAccounts, 4) // default, team-a, team-b, shared
	byName := map[string]int{}
	for i, a := range data.WeComAccounts {
		byName[a.Account] = i
	}
	a, b := data.WeComAccounts[byName["team-a"]], data.WeComAccounts[byName["team-b"]]
	require.Equal(t, "up", a.Status)
	require.InDelta(t, 0.5, a.Health, 1e-9)
	require.Equal(t, 2, a.Sends)
	require.Equal(t, []string{"shop"}, a.Tenants)
	require.Equal(t, &wecom.Limits{PerSecond: 20, PerMinute: 600, PerDay: 100000}, a.Limits, "WECOM_ACCOUNT_LIMITS, as the API read it")
	require.Equal(t, "down", b.Status)
	require.Contains(t, b.DownReason, "40001")
	require.Nil(t, b.Limits, "none configured")
}

// The console reads the accounts through WeComAccountStates: the rows of
// /api/queues/stats, or none when no WeCom account is configured.
func TestWeComAccountStatesForTheConsole(t *testing.T) {
	ctx := context.Background()
	t.Run("listed", func(t *testing.T) {
		h := setup(t, accountsFromEnv(t))
		require.NoError(t, h.srv.d.Accounts.Account("team-b").MarkDown(ctx, "wecom 40001: invalid credential"))
		states, err := h.srv.WeComAccountStates(ctx)
		require.NoError(t, err)
		require.Len(t, states, 4) // default, team-a, team-b, shared: as the stats
		require.Equal(t, "team-b", states[2].Account)
		require.Equal(t, "down", states[2].Status)
		require.NotNil(t, states[2].DownUntil)
	})
	t.Run("none", func(t *testing.T) {
		h := setup(t, options{keys: tenantKeys(t)})
		states, err := h.srv.WeComAccountStates(ctx)
		require.NoError(t, err)
		require.Nil(t, states, "no WECOM_ACCOUNTS and an unused default: nothing configured")
		require.NoError(t, h.srv.d.Accounts.Account("default").Record(ctx, true))
		states, err = h.srv.WeComAccountStates(ctx)
		require.NoError(t, err)
		require.Len(t, states, 1, "the default account sends: it is configured")
		require.Equal(t, "default", states[0].Account)
	})
}

func TestWeComMediaMessage(t *testing.T) {
	o := accountsFromEnv(t)
	o.egress = egress.Policy{Lookup: func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "cdn.example.com" {
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("10.0.0.7")}, nil
	}}
	h := setup(t, o)
	send := func(m map[string]any) response {
		body := map[string]any{"messageType": "WECOM", "recipient": "zhangsan"}
		for k, v := range m {
			body[k] = v
		}
		return h.do("POST", "/api/messages/send", body, "X-API-Key", shopKey)
	}
	r := send(map[string]any{"media": map[string]string{"type": "image", "url": "https://cdn.example.com/logo.png", "filename": "logo.png"}})
	require.Equal(t, 202, r.Status, r.Msg)
	m, err := envelope.Decode(h.get("queue.wecom.normal").Body)
	require.NoError(t, err)
	require.Equal(t, &envelope.Media{Type: "image", URL: "https://cdn.example.com/logo.png", Filename: "logo.png"}, m.Media)
	require.Empty(t, m.Template)
	require.Equal(t, "team-a", m.Account)
	for _, tc := range []struct {
		name string
		body map[string]any
		want string
	}{
		{"internal host", map[string]any{"media": map[string]string{"type": "image", "url": "https://intranet.corp/x.png"}}, "media url host refused"},
		{"http", map[string]any{"media": map[string]string{"type": "image", "url": "http://cdn.example.com/x.png"}}, "https URL"},
		{"type", map[string]any{"media": map[string]string{"type": "voice", "url": "https://cdn.example.com/x.amr"}}, "media type"},
		{"both", map[string]any{"templateCode": "notice", "media": map[string]string{"type": "file", "url": "https://cdn.example.com/a.pdf"}}, "not both"},
		{"robot", map[string]any{"messageType": "WECOM_ROBOT", "recipient": "ops", "media": map[string]string{"type": "file", "url": "https://cdn.example.com/a.pdf"}}, "WECOM messages only"},
	} {
		r := send(tc.body)
		require.Equal(t, 400, r.Status, tc.name)
		require.Contains(t, r.Msg, tc.want, tc.name)
	}
}
