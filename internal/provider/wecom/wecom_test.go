package wecom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
)

// memTokens is a one-process token source (internal/token is the shared
// one; its tests cover the sharing).
type memTokens struct {
	mu    sync.Mutex
	c     *wecom.Client
	tok   string
	drops int
}

func (m *memTokens) Token(ctx context.Context) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tok == "" {
		t, _, err := m.c.FetchToken(ctx)
		if err != nil {
			return "", err
		}
		m.tok = t
	}
	return m.tok, nil
}

func (m *memTokens) Invalidate(_ context.Context, bad string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tok == bad {
		m.tok = ""
		m.drops++
	}
	return nil
}

func setup(t *testing.T) (*wecomtest.Server, *wecom.Client, *memTokens) {
	t.Helper()
	t.Parallel()
	srv := wecomtest.New(t)
	tokens := &memTokens{}
	c, err := wecom.New(wecom.Config{CorpID: wecomtest.CorpID, CorpSecret: wecomtest.CorpSecret, AgentID: wecomtest.AgentID,
		APIBase: srv.URL, Robots: map[string]string{"ops": wecomtest.RobotKey, "stale": "no-such-key"}}, tokens)
	require.NoError(t, err)
	tokens.c = c
	return srv, c, tokens
}

func users(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("user%04d", i)
	}
	return out
}

func TestAppMessageReachesKnownUsersAndNamesTheOthers(t *testing.T) {
	srv, c, _ := setup(t)
	to := users(600)
	srv.Unknown[to[5]], srv.Unknown[to[300]], srv.Unknown[to[599]] = true, true, true
	rcpt, err := c.SendWeCom(context.Background(), provider.WeCom{ToUsers: to, Format: "markdown", Content: "**hi**"})
	require.NoError(t, err)
	require.Equal(t, 1, srv.SendCalls())
	require.Len(t, rcpt.Rejected, 3)
	require.Contains(t, rcpt.Rejected[to[300]], "invaliduser")
	require.Equal(t, 597, srv.Users())
	require.Equal(t, []wecomtest.Received{{MsgType: "markdown", Content: "**hi**"}}, srv.ReceivedBy(to[0]))
	require.Equal(t, 1, srv.DuplicateCheck())
}

func TestEveryRecipientUnknownIsPermanent(t *testing.T) {
	srv, c, _ := setup(t)
	srv.Unknown["ghost"] = true
	_, err := c.SendWeCom(context.Background(), provider.WeCom{ToUsers: []string{"ghost"}, Format: "text", Content: "hi"})
	require.ErrorIs(t, err, provider.ErrPermanent)
	require.ErrorContains(t, err, "invaliduser")
}

func TestExpiredTokenIsRefreshedAndTheSendRetriedOnce(t *testing.T) {
	srv, c, tokens := setup(t)
	ctx := context.Background()
	_, err := c.SendWeCom(ctx, provider.WeCom{ToUsers: []string{"a"}, Format: "text", Content: "one"})
	require.NoError(t, err)
	srv.ExpireTokens()
	_, err = c.SendWeCom(ctx, provider.WeCom{ToUsers: []string{"a"}, Format: "text", Content: "two"})
	require.NoError(t, err)
	require.Equal(t, 2, srv.TokenFetches())
	require.Equal(t, 1, tokens.drops)
	require.Len(t, srv.ReceivedBy("a"), 2)
}

func TestTooManyUsersForOneCallIsRefusedBeforeSending(t *testing.T) {
	srv, c, _ := setup(t)
	_, err := c.SendWeCom(context.Background(), provider.WeCom{ToUsers: users(1001), Format: "text", Content: "hi"})
	require.ErrorIs(t, err, provider.ErrPermanent)
	require.Equal(t, 0, srv.SendCalls())
}

func TestRobotPostCarriesMentions(t *testing.T) {
	srv, c, _ := setup(t)
	ctx := context.Background()
	rcpt, err := c.SendWeCom(ctx, provider.WeCom{Robot: "ops", Format: "text", Content: "disk full", Mentions: []string{"alice", "@all"}})
	require.NoError(t, err)
	require.Equal(t, wecom.RobotName, rcpt.Provider)
	_, err = c.SendWeCom(ctx, provider.WeCom{Robot: "ops", Format: "markdown", Content: "**disk full**", Mentions: []string{"bob"}})
	require.NoError(t, err)
	posts := srv.RobotPosts()
	require.Equal(t, wecomtest.Received{MsgType: "text", Content: "disk full", Mentions: []string{"alice", "@all"}}, posts[0])
	require.Equal(t, "markdown", posts[1].MsgType)
	require.True(t, strings.HasSuffix(posts[1].Content, "<@bob>"), posts[1].Content)
	_, err = c.SendWeCom(ctx, provider.WeCom{Robot: "ops", Format: "markdown", Content: "x", Mentions: []string{"@all"}})
	require.ErrorIs(t, err, provider.ErrPermanent)

	for _, tc := range []struct{ robot, code string }{{"stale", "93000"}, {"nobody", "unknown_robot"}} {
		_, err = c.SendWeCom(ctx, provider.WeCom{Robot: tc.robot, Format: "text", Content: "x"})
		var pe *provider.Error
		require.True(t, errors.As(err, &pe), "%v", err)
		require.Equal(t, provider.Permanent, pe.Class)
		require.Equal(t, tc.code, pe.Code)
	}
}

// A robot that lists its tenants refuses another tenant's post before
// anything reaches WeCom: a permanent error, to be dead-lettered.
func TestRobotRefusesAnotherTenant(t *testing.T) {
	t.Parallel()
	srv := wecomtest.New(t)
	c, err := wecom.New(wecom.Config{APIBase: srv.URL, Robots: map[string]string{"shop-ops": wecomtest.RobotKey, "open": wecomtest.RobotKey},
		RobotTenants: map[string][]string{"shop-ops": {"shop"}}}, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = c.SendWeCom(ctx, provider.WeCom{Robot: "shop-ops", Format: "text", Content: "x", Mentions: []string{"@all"}, Tenant: "blog"})
	var pe *provider.Error
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, provider.Permanent, pe.Class)
	require.Equal(t, "robot_not_allowed", pe.Code)
	require.Empty(t, srv.RobotPosts(), "nothing posted")
	for _, m := range []provider.WeCom{{Robot: "shop-ops", Tenant: "shop"}, {Robot: "open", Tenant: "blog"}} {
		m.Format, m.Content = "text", "x"
		_, err = c.SendWeCom(ctx, m)
		require.NoError(t, err, m.Robot)
	}
	require.Len(t, srv.RobotPosts(), 2)
}

func TestThrottlingIsThrottled(t *testing.T) {
	srv, c, _ := setup(t)
	srv.Throttle(45009, 45033)
	for range 2 {
		_, err := c.SendWeCom(context.Background(), provider.WeCom{ToUsers: []string{"a"}, Format: "text", Content: "hi"})
		require.ErrorIs(t, err, provider.ErrThrottled)
	}
}

func TestBadCredentialsArePermanent(t *testing.T) {
	t.Parallel()
	srv := wecomtest.New(t)
	for _, tc := range []struct {
		corp, secret string
		code         string
	}{{"wrong", wecomtest.CorpSecret, "40013"}, {wecomtest.CorpID, "wrong", "40001"}} {
		c, err := wecom.New(wecom.Config{CorpID: tc.corp, CorpSecret: tc.secret, AgentID: wecomtest.AgentID, APIBase: srv.URL}, &memTokens{})
		require.NoError(t, err)
		_, _, err = c.FetchToken(context.Background())
		var pe *provider.Error
		require.True(t, errors.As(err, &pe))
		require.Equal(t, tc.code, pe.Code)
		require.Equal(t, provider.Permanent, pe.Class)
	}
}

func TestErrcodeClasses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code  int
		class provider.Class
	}{
		{-1, provider.Transient}, {6000, provider.Transient},
		{40014, provider.Transient}, {42001, provider.Transient}, {41001, provider.Transient},
		{45009, provider.Throttled}, {45033, provider.Throttled},
		{40001, provider.Permanent}, {40013, provider.Permanent}, {40056, provider.Permanent},
		{40003, provider.Permanent}, {40031, provider.Permanent}, {40032, provider.Permanent},
		{40008, provider.Permanent}, {40058, provider.Permanent}, {41011, provider.Permanent},
		{44004, provider.Permanent}, {45002, provider.Permanent}, {48002, provider.Permanent},
		{60020, provider.Permanent}, {81013, provider.Permanent}, {82001, provider.Permanent},
		{93000, provider.Permanent}, {93004, provider.Permanent}, {301002, provider.Permanent},
		{99999, provider.Transient}, // unknown: retried, bounded, never lost
	} {
		require.Equal(t, tc.class, wecom.Classify(tc.code), "errcode %d", tc.code)
	}
	for _, code := range []int{40014, 42001, 41001} {
		require.True(t, wecom.TokenProblem(code))
	}
	require.False(t, wecom.TokenProblem(45009))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  wecom.Config
		want string
	}{
		{"nothing", wecom.Config{}, "configure an application"},
		{"half an app", wecom.Config{CorpID: "x"}, "needs WECOM_CORP_ID"},
		{"bad base", wecom.Config{Robots: map[string]string{"a": "k"}, APIBase: "ftp://x"}, "http(s)"},
		{"interval", wecom.Config{Robots: map[string]string{"a": "k"}, DuplicateCheckInterval: 5 * time.Hour}, "1s to 4h"},
		{"robots only", wecom.Config{Robots: map[string]string{"a": "k"}}, ""},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" {
			require.NoError(t, err, tc.name)
			continue
		}
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	r, tenants, err := wecom.ParseRobots("ops=K1, alerts=K2@shop+blog")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ops": "K1", "alerts": "K2"}, r)
	require.Equal(t, map[string][]string{"alerts": {"shop", "blog"}}, tenants, "ops lists none: every tenant's")
	for _, bad := range []string{"ops", "ops=", "ops=@shop", "ops=K1@", "ops=K1@shop+", "ops=K1@a/b", "ops=K1,ops=K2", "=K1"} {
		_, _, err = wecom.ParseRobots(bad)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "K1", "an error never shows a key")
	}
}

// The API reads the same WECOM_ROBOTS but needs no keys.
func TestParseRobotListWithoutKeys(t *testing.T) {
	t.Parallel()
	list, err := wecom.ParseRobotList("ops, alerts=@shop+blog, full=K1@shop, open=K2", false)
	require.NoError(t, err)
	require.Equal(t, []wecom.Robot{{Name: "ops"}, {Name: "alerts", Tenants: []string{"shop", "blog"}},
		{Name: "full", Key: "K1", Tenants: []string{"shop"}}, {Name: "open", Key: "K2"}}, list)
	require.True(t, list[0].Allows("anyone"))
	require.True(t, list[1].Allows("blog"))
	require.False(t, list[1].Allows("ops"))
	for _, bad := range []string{"ops=", "alerts=@", "a=b,a=c"} {
		_, err := wecom.ParseRobotList(bad, false)
		require.Error(t, err, bad)
	}
}

func TestParseAccountsAndPickOne(t *testing.T) {
	t.Parallel()
	list, err := wecom.ParseAccounts("a=ww1:1001:s1@shop+blog, b=ww2:1002:se:cret, c=ww3:1003:s3", true)
	require.NoError(t, err)
	require.Equal(t, []wecom.Account{
		{Name: "a", CorpID: "ww1", AgentID: 1001, Secret: "s1", Tenants: []string{"shop", "blog"}},
		{Name: "b", CorpID: "ww2", AgentID: 1002, Secret: "se:cret"},
		{Name: "c", CorpID: "ww3", AgentID: 1003, Secret: "s3"},
	}, list)
	for _, bad := range []string{"a=ww1:1001", "a=ww1:x:s", "a=:1:s", "a=ww1:1:s@", "a=ww1:1:s,a=ww2:2:t", "a b=ww1:1:s"} {
		_, err := wecom.ParseAccounts(bad, true)
		require.Error(t, err, bad)
		require.NotContains(t, err.Error(), "ww1:1:s", "errors never echo a secret")
	}
	_, err = wecom.ParseAccounts("a=ww1:1001@shop", false)
	require.NoError(t, err, "the API needs no secret")
	for _, tc := range []struct{ tenant, named, want, err string }{
		{"shop", "", "a", ""}, {"blog", "", "a", ""}, {"other", "", "default", ""},
		{"other", "b", "b", ""}, {"other", "a", "", `"a" is not listed for tenant "other"`},
		{"shop", "zzz", "", `unknown WeCom account "zzz"`}, {"shop", "default", "default", ""},
	} {
		got, err := wecom.AccountFor(list, tc.tenant, tc.named)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err)
			continue
		}
		require.NoError(t, err)
		require.Equal(t, tc.want, got, tc)
	}
	l, err := wecom.ParseLimits("a=20/600/0/100000")
	require.NoError(t, err)
	require.Equal(t, wecom.Limits{PerSecond: 20, PerMinute: 600, PerDay: 100000}, l["a"])
	_, err = wecom.ParseLimits("a=1/2/3")
	require.Error(t, err)
	require.True(t, wecom.CredentialsRefused(40001) && wecom.CredentialsRefused(60020) && !wecom.CredentialsRefused(45009))
}

func TestTextCardAndNewsAreSent(t *testing.T) {
	srv, c, _ := setup(t)
	for _, format := range []string{"textcard", "news"} {
		_, err := c.SendWeCom(context.Background(), provider.WeCom{ToUsers: []string{"card-" + format}, Format: format,
			Title: "Release 1.2", Description: "Rolled out", URL: "https://ci.example.com/r/12"})
		require.NoError(t, err, format)
		require.Equal(t, []wecomtest.Received{{MsgType: format, Content: "Release 1.2\nRolled out\nhttps://ci.example.com/r/12"}}, srv.ReceivedBy("card-"+format))
	}
	_, err := c.SendWeCom(context.Background(), provider.WeCom{Robot: "ops", Format: "textcard", Title: "t", Description: "d", URL: "https://x"})
	require.ErrorIs(t, err, provider.ErrPermanent, "robots take text and markdown")
}
