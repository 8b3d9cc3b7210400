package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/status"
)

// Two teams, two WeCom applications: shop's in corp-a, blog's in corp-b.
var (
	appA = wecomtest.App{CorpID: "corp-a", AgentID: 2001}
	appB = wecomtest.App{CorpID: "corp-b", AgentID: 2002}
)

// setupAccounts runs a stack with the two accounts; secretB is what the
// consumer is configured with for team B (WeCom knows "secret-b").
func setupAccounts(t *testing.T, secretB string) (*dispatchtest.Stack, *wecomtest.Server) {
	t.Helper()
	srv := wecomtest.New(t)
	srv.AddApp(appA.CorpID, "secret-a", appA.AgentID)
	srv.AddApp(appB.CorpID, "secret-b", appB.AgentID)
	s := setup(t, dispatchtest.Options{WeComBase: srv.URL, WeComAccounts: []wecom.Account{
		{Name: "team-a", CorpID: appA.CorpID, AgentID: appA.AgentID, Secret: "secret-a", Tenants: []string{"shop"}},
		{Name: "team-b", CorpID: appB.CorpID, AgentID: appB.AgentID, Secret: secretB, Tenants: []string{"blog"}},
	}})
	return s, srv
}

// send publishes n single messages of tenant from account, with a deadline
// ttl away (0 = none), and returns their task ids by user.
func sendFrom(s *dispatchtest.Stack, account, tenant string, n int, ttl time.Duration) map[string]string {
	ids := map[string]string{}
	for i := range n {
		u := fmt.Sprintf("%s-user%02d", tenant, i)
		ids[u] = s.WeCom("hello from "+tenant, []string{u}, func(m *envelope.Message) {
			m.Account, m.Tenant = account, tenant
			if ttl > 0 {
				d := time.Now().Add(ttl)
				m.Deadline = &d
			}
		})[0]
	}
	return ids
}

func TestEachTenantSendsFromItsOwnAccount(t *testing.T) {
	s, srv := setupAccounts(t, "secret-b")
	a := sendFrom(s, "team-a", "shop", 20, 0)
	b := sendFrom(s, "team-b", "blog", 20, 0)
	s.StartConsumer("c1", 8)
	s.StartConsumer("c2", 8)
	for _, set := range []struct {
		ids map[string]string
		app wecomtest.App
	}{{a, appA}, {b, appB}} {
		for u, id := range set.ids {
			waitStatus(t, s, id, status.Sent)
			require.Equal(t, []wecomtest.App{set.app}, srv.From(u), u)
		}
	}
	require.Equal(t, 1, srv.TokenFetchesOf(appA.CorpID, appA.AgentID), "one token fetch for the fleet, per account")
	require.Equal(t, 1, srv.TokenFetchesOf(appB.CorpID, appB.AgentID))
	require.Equal(t, 0, srv.TokenFetchesOf(wecomtest.CorpID, wecomtest.AgentID), "the default account sent nothing")
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.AccountHealth.WithLabelValues("team-a")))
	require.Positive(t, testutil.ToFloat64(s.Metrics.AccountRate.WithLabelValues("team-b")))
	st, err := s.Accounts().Get(context.Background(), "team-a")
	require.NoError(t, err)
	require.Equal(t, "up", st.Status)
	require.Equal(t, int64(20), st.Sends, "every send counted in the account's health")
	require.NotNil(t, st.RatePerSecond, "the rate the consumers hold it to, for the stats")
}

func TestRefusedAccountWaitsAndExpiresWithoutSlowingTheOther(t *testing.T) {
	s, srv := setupAccounts(t, "wrong-secret")
	const deadline = 3 * time.Second
	start := time.Now()
	b := sendFrom(s, "team-b", "blog", 20, deadline)
	a := sendFrom(s, "team-a", "shop", 20, deadline)
	s.StartConsumer("c1", 4)
	for _, id := range a {
		waitStatus(t, s, id, status.Sent)
	}
	took := time.Since(start)
	t.Logf("team-a's 20 messages sent %s after publishing, next to 20 of a refused account", took)
	require.Less(t, took, deadline, "the good account is not held up by the refused one")
	for u, id := range b {
		rec := waitStatus(t, s, id, status.Expired)
		require.Equal(t, status.ReasonDeadline, rec.Reason)
		require.Empty(t, srv.From(u))
	}
	require.Equal(t, 0, srv.TokenFetchesOf(appB.CorpID, appB.AgentID))
	waits := testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("wecom", "code", "wecom", dispatch.ClassAccountDown))
	t.Logf("team-b's 20 messages waited %v times before expiring", waits)
	require.Greater(t, waits, 20.0, "each waited, with backoff, before its deadline")
	require.Equal(t, 20.0, testutil.ToFloat64(s.Metrics.DeadLettered.WithLabelValues("wecom", "code", "wecom", dispatch.ReasonDeadline)))
}
