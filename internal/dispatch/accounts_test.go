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
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
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

// The consumer holds a message to what its tenant may send from, whatever
// the API checked: with the API's WECOM_ACCOUNTS unset, every message
// names default, and a consumer whose default belongs to shop must not send
// blog's from shop's corp (issue 37).
func TestConsumerEnforcesAccountTenancy(t *testing.T) {
	srv := wecomtest.New(t)
	srv.AddApp(appA.CorpID, "secret-a", appA.AgentID)
	s := setup(t, dispatchtest.Options{WeComBase: srv.URL, WeComAccounts: []wecom.Account{
		{Name: wecom.DefaultAccount, CorpID: appA.CorpID, AgentID: appA.AgentID, Secret: "secret-a", Tenants: []string{"shop"}},
	}})
	shop := sendFrom(s, wecom.DefaultAccount, "shop", 1, 0)
	blog := sendFrom(s, wecom.DefaultAccount, "blog", 1, 0) // what an API without WECOM_ACCOUNTS publishes
	unnamed := sendFrom(s, "", "blog", 1, 0)                // an older message, naming none
	s.StartConsumer("c1", 4)
	for u, id := range shop {
		waitStatus(t, s, id, status.Sent)
		require.Equal(t, []wecomtest.App{appA}, srv.From(u))
	}
	for _, set := range []map[string]string{blog, unnamed} {
		for u, id := range set {
			rec := waitStatus(t, s, id, status.Failed)
			require.Equal(t, status.ReasonPermanent, rec.Reason)
			require.Contains(t, rec.LastError, `not listed for tenant "blog"`)
			require.Empty(t, srv.From(u), "nothing sent from shop's corp")
		}
	}
}

// One WeCom job's walk through the pipeline resolves its account once: a
// single message, a batch, a robot post and merged singles alike.
func TestOneWeComJobResolvesItsAccountOnce(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{MergeWindow: 50 * time.Millisecond})
	jobs := 0
	s.WeCom("single", []string{"solo"}, nil)
	s.WeCom("batch", []string{"b1", "b2", "b3"}, nil)
	s.WeCom("robot", []string{"ops"}, func(m *envelope.Message) { m.Robot = true })
	jobs += 3
	for _, u := range users("merged", 5) {
		s.WeCom("merged", []string{u}, func(m *envelope.Message) { m.Level = "normal" })
		jobs++
	}
	c := s.StartConsumer("c1", 8)
	testenv.WaitFor(t, 15*time.Second, "every message sent", func() bool {
		return srv.Users() == 9 && len(srv.RobotPosts()) == 1
	})
	testenv.WaitFor(t, 5*time.Second, "every job settled", func() bool {
		sent := 0.0
		for _, l := range topology.Levels {
			for _, p := range []string{"wecom", "wecom-robot"} {
				sent += testutil.ToFloat64(s.Metrics.Sent.WithLabelValues("wecom", string(l), p))
			}
		}
		return sent == 10
	})
	require.EqualValues(t, jobs, c.Dispatcher.AccountResolutions(), "one resolution per job")
}
