package dispatch_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Issue 36: a retry whose delay-queue publish the broker refuses is held,
// its publish tried again, never handed back. Handing it back with requeue
// every second, as the consumer did, spent a 4.x quorum queue's delivery
// limit (20) and dead-lettered a message whose fault healed by itself; on
// any queue it was a loop, which the count shows: every delivery consumed
// is a message's first or one of its retries, none a hand-back. The SMTP
// server refuses (451) while the delay queues do, as a provider outage
// fills them in production.
func TestRetryRefusedByTheDelayQueuesIsHeldNotHandedBack(t *testing.T) {
	const n = 5
	for _, qt := range []topology.QueueType{topology.Classic, topology.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			s := setup(t, dispatchtest.Options{Model: func(c *topology.Config) { c.QueueType = qt },
				Retry: dispatch.RetryPolicy{MaxRetries: 100, Backoff: []time.Duration{200 * time.Millisecond}, Jitter: 0.01}})
			outage := mailcatcher.NewSMTPOutage()
			s.Mail.SetHook(outage.Hook)
			// A quorum queue refuses once it holds its bound: a copy still
			// gets into each delay queue while it is empty, and comes back
			// to fail again (a classic one refuses them all).
			restore := s.Broker.RefusePublishes(t, s.Model.Delay.Queues()...)
			s.StartConsumer("c1", 2)
			ids := make([]string, n)
			for i := range ids {
				ids[i] = s.Notice(topology.Mail, fmt.Sprintf("held%d@example.com", i), "held", nil)
			}
			testenv.WaitFor(t, 10*time.Second, "a retry refused", func() bool { return s.StatusOf(ids[0]).Status == status.Retrying })
			// The fault lasts several of the old hand-backs (a second each).
			<-time.After(4 * time.Second) // the fault's length, not a wait for an outcome
			held := testutil.ToFloat64(s.Metrics.Held)
			// Retrying while held; queued for one that waits behind the
			// held ones (they fill the prefetch window: 2 workers, 4);
			// sending for a copy that got into an empty quorum delay queue
			// and is being tried again. Never failed.
			for _, id := range ids {
				require.Contains(t, []status.State{status.Retrying, status.Queued, status.Sending}, s.StatusOf(id).Status)
			}
			restore()
			outage.End()

			for i, id := range ids {
				waitStatus(t, s, id, status.Sent)
				require.Equal(t, 1, s.MailsTo(fmt.Sprintf("held%d@example.com", i)))
			}
			testenv.WaitFor(t, 5*time.Second, "nothing held", func() bool { return testutil.ToFloat64(s.Metrics.Held) == 0 })
			testenv.WaitFor(t, 5*time.Second, "queue empty", func() bool { return s.Depth("queue.mail") == 0 })
			consumed := testutil.ToFloat64(s.Metrics.Consumed.WithLabelValues("mail", "code"))
			retries := testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("mail", "code", "smtp", "transient"))
			require.Equal(t, n+retries, consumed, "deliveries consumed: the first of each and its retries' copies, no hand-back")
			require.Zero(t, s.Depth("queue.mail.dlq"))
			t.Logf("%s: %.0f of %d held at the end of the fault; %.0f retries", qt, held, n, retries)
		})
	}
}
