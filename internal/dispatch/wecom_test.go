package dispatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func setupWeCom(t *testing.T, opts dispatchtest.Options) (*dispatchtest.Stack, *wecomtest.Server) {
	t.Helper()
	srv := wecomtest.New(t)
	opts.WeComBase = srv.URL
	return setup(t, opts), srv
}

func TestWeComMessageIsDeliveredOnce(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	s.StartConsumer("c1", 4)
	id := s.WeCom("Deploy", []string{"alice"}, nil)[0]
	rec := waitStatus(t, s, id, status.Sent)
	require.Equal(t, "wecom", rec.Provider)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, []wecomtest.Received{{MsgType: "markdown", Content: "**Deploy**\n\ncontent of Deploy"}}, srv.ReceivedBy("alice"))
	require.Equal(t, 1, srv.DuplicateCheck(), "WeCom's duplicate check is on")
	require.Equal(t, 1, srv.SendCalls())
}

func users(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%04d", prefix, i)
	}
	return out
}

func TestWeComBatchGoesOutInOneCallAndUnknownUsersFail(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	to := users("u", 600)
	unknown := map[int]bool{7: true, 250: true, 599: true}
	for i := range unknown {
		srv.Unknown[to[i]] = true
	}
	var batchID string
	ids := s.WeCom("Outage", to, func(m *envelope.Message) { batchID = m.BatchID })
	s.StartConsumer("c1", 4)
	for i, id := range ids {
		want := status.Sent
		if unknown[i] {
			want = status.Failed
		}
		rec := waitStatus(t, s, id, want)
		if unknown[i] {
			require.Contains(t, rec.LastError, "invaliduser")
			require.Equal(t, status.ReasonPermanent, rec.Reason)
		}
	}
	require.Equal(t, 1, srv.SendCalls(), "one message/send call for 600 users")
	require.Equal(t, 1, srv.SendAttempts())
	require.Equal(t, 1, srv.TokenFetches())
	for i, u := range to {
		if !unknown[i] {
			require.Len(t, srv.ReceivedBy(u), 1, u)
		}
	}
	b, err := s.Status.GetBatch(context.Background(), batchID)
	require.NoError(t, err)
	require.Equal(t, map[status.State]int{status.Sent: 597, status.Failed: 3}, b.Counts)
	require.Equal(t, ids, b.TaskIDs)
}

// A batch's "sending" statuses are written while its call is in flight
// (issue 22), and still count each attempt of every recipient; the
// outcome is written after them: a batch of 1,000 WeCom refuses for good
// ends failed after one attempt, one throttled and then sent ends sent
// after two.
func TestWeComBatchOutcomesAreWrittenAfterItsSendingStatuses(t *testing.T) {
	tests := []struct {
		name     string
		codes    []int
		want     status.State
		attempts int
	}{
		{"refused for good", []int{40008}, status.Failed, 1},
		{"throttled, then sent", []int{45009}, status.Sent, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, srv := setupWeCom(t, dispatchtest.Options{})
			srv.Throttle(tt.codes...)
			s.StartConsumer("c1", 4)
			ids := s.WeCom("Outage", users("w", envelope.MaxRecipients), nil)
			for _, id := range ids {
				waitStatus(t, s, id, tt.want)
			}
			for _, id := range ids {
				rec, err := s.Status.Get(context.Background(), id)
				require.NoError(t, err)
				require.Equal(t, tt.want, rec.Status, id)
				require.Equal(t, tt.attempts, rec.Attempts, id)
			}
		})
	}
}

// A token WeCom expired early interrupts a batch once: the send is
// refused (42001), the token refreshed, and the batch sent again: two
// message/send calls, each user served once.
func TestWeComBatchInterruptedByATokenRefresh(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	s.StartConsumer("c1", 4)
	waitStatus(t, s, s.WeCom("warm-up", []string{"first"}, nil)[0], status.Sent)
	srv.ExpireTokens()
	before := srv.SendAttempts()
	ids := s.WeCom("Outage", users("v", 600), nil)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	require.Equal(t, 2, srv.SendAttempts()-before, "the refused call and the one after the refresh")
	require.Equal(t, 2, srv.TokenFetches())
	for _, u := range users("v", 600) {
		require.Len(t, srv.ReceivedBy(u), 1, u)
	}
}

func TestRedeliveredWeComBatchSendsNothingTwice(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	var msg envelope.Message
	ids := s.WeCom("Twice", users("r", 20), func(m *envelope.Message) { msg = *m })
	c := s.StartConsumer("c1", 2)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	c.Stop()
	// The same batch message again, as a redelivery after a lost ack.
	s.WeCom("Twice", users("r", 20), func(m *envelope.Message) { *m = msg })
	s.StartConsumer("c2", 2)
	testenv.WaitFor(t, 10*time.Second, "the redelivery acked", func() bool {
		return testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("wecom", "code", "duplicate")) == 1
	})
	require.Equal(t, 1, srv.SendCalls())
	require.Len(t, srv.ReceivedBy("r0000"), 1)
}

func TestTwoConsumersFetchTheWeComTokenOnce(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	var ids []string
	for i := range 50 {
		ids = append(ids, s.WeCom(fmt.Sprint("m", i), []string{fmt.Sprintf("user%02d", i)}, nil)...)
	}
	s.StartConsumer("c1", 8)
	s.StartConsumer("c2", 8)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	require.Equal(t, 1, srv.TokenFetches())
	require.Equal(t, 50, srv.SendCalls())

	// WeCom expires the token early: one refresh, nothing lost.
	srv.ExpireTokens()
	var more []string
	for i := range 50 {
		more = append(more, s.WeCom(fmt.Sprint("n", i), []string{fmt.Sprintf("user%02d", i)}, nil)...)
	}
	for _, id := range more {
		waitStatus(t, s, id, status.Sent)
	}
	require.Equal(t, 2, srv.TokenFetches())
	for i := range 50 {
		require.Len(t, srv.ReceivedBy(fmt.Sprintf("user%02d", i)), 2)
	}
}

func TestWeComThrottlingDelaysButDoesNotFail(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	srv.Throttle(45009, 45009, 45009)
	s.StartConsumer("c1", 2)
	id := s.WeCom("Slow", []string{"bob"}, nil)[0]
	rec := waitStatus(t, s, id, status.Sent)
	require.Equal(t, 4, rec.Attempts)
	require.Len(t, srv.ReceivedBy("bob"), 1)
	require.Equal(t, 3.0, testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("wecom", "code", "wecom", "throttled")))
	// The application's adaptive rate went down three times and up once.
	rate, err := s.Adaptive.For("wecom-app:"+wecomtest.CorpID+":1000002", wecomchannel.DefaultAppRate).Rate(context.Background())
	require.NoError(t, err)
	require.InDelta(t, wecomchannel.DefaultAppRate.Start/8+wecomchannel.DefaultAppRate.Increase, rate, 1e-9)
}

func TestWeComUnknownUserFailsWithTheReason(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	srv.Unknown["ghost"] = true
	s.StartConsumer("c1", 2)
	id := s.WeCom("Hello", []string{"ghost"}, nil)[0]
	rec := waitStatus(t, s, id, status.Failed)
	require.Contains(t, rec.LastError, "invaliduser")
	require.Equal(t, status.ReasonPermanent, rec.Reason)
}

// "@all" (everyone the application sees) and "a|b" lists queued before
// the API refused them (issue 43) never reach WeCom: a single one fails
// for good, a batch's fail each and its userids go out.
func TestQueuedNonUsersNeverReachWeCom(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	s.StartConsumer("c1", 2)
	for _, to := range []string{"@all", "@ALL", "zhangsan|lisi", "_x"} {
		id := s.WeCom("Broadcast", []string{to}, nil)[0]
		rec := waitStatus(t, s, id, status.Failed)
		require.Equal(t, status.ReasonPermanent, rec.Reason, to)
		require.Contains(t, rec.LastError, "one person", to)
	}
	ids := s.WeCom("Batch", []string{"alice", "@all", "_bob", "dave"}, nil) // the envelope itself refuses a|b in a batch
	for i, want := range []status.State{status.Sent, status.Failed, status.Failed, status.Sent} {
		rec := waitStatus(t, s, ids[i], want)
		if want == status.Failed {
			require.Contains(t, rec.LastError, "one person")
		}
	}
	require.Equal(t, 1, srv.SendCalls(), "one call, for the batch's userids")
	require.Len(t, srv.ReceivedBy("alice"), 1)
	require.Len(t, srv.ReceivedBy("dave"), 1)
	for _, u := range []string{"@all", "@ALL", "zhangsan", "lisi", "_bob", "_x"} {
		require.Empty(t, srv.ReceivedBy(u), u)
	}
}

// A robot that belongs to other tenants refuses a message that got past
// the API: dead-lettered as permanent, nothing posted; its own tenant's
// message goes out.
func TestRobotRefusesAnotherTenantsMessage(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	s.StartConsumer("c1", 2)
	theirs := s.WeCom("Not yours", []string{"shop-ops"}, func(m *envelope.Message) {
		m.Robot, m.Mentions, m.Tenant = true, []string{"alice"}, "blog"
	})[0]
	rec := waitStatus(t, s, theirs, status.Failed)
	require.Equal(t, status.ReasonPermanent, rec.Reason)
	require.Contains(t, rec.LastError, "does not belong to tenant")
	require.Empty(t, srv.RobotPosts())
	ours := s.WeCom("Yours", []string{"shop-ops"}, func(m *envelope.Message) { m.Robot, m.Tenant = true, "shop" })[0]
	waitStatus(t, s, ours, status.Sent)
	require.Len(t, srv.RobotPosts(), 1)
}

func TestRobotMessageReachesTheRobotWithMentions(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{})
	s.StartConsumer("c1", 2)
	id := s.WeCom("Disk full", []string{"ops"}, func(m *envelope.Message) {
		m.Robot, m.Mentions = true, []string{"alice", "bob"}
	})[0]
	rec := waitStatus(t, s, id, status.Sent)
	require.Equal(t, "wecom-robot", rec.Provider)
	posts := srv.RobotPosts()
	require.Len(t, posts, 1)
	require.Equal(t, "markdown", posts[0].MsgType)
	require.Contains(t, posts[0].Content, "**Disk full**")
	require.Contains(t, posts[0].Content, "<@alice><@bob>")
}
