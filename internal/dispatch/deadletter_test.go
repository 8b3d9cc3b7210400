package dispatch_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Issue 36: a message the broker dead-letters by itself does not keep a
// status of queued: a full queue.mail drops its oldest (maxlen) and its
// TTL expires the others, with no consumer running, and once one runs
// their statuses say failed and expired, with the broker's reason, read
// from the DLQ's status queue. A message the consumer dead-letters keeps
// the reason the consumer wrote.
func TestBrokerDeadLettersGetTheirStatus(t *testing.T) {
	for _, qt := range []topology.QueueType{topology.Classic, topology.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			s := setup(t, dispatchtest.Options{Model: func(c *topology.Config) {
				c.QueueType = qt
				cc := c.Channels[topology.Mail]
				cc.MaxLength, cc.QueueTTL = 2, time.Second
				c.Channels[topology.Mail] = cc
			}})
			dropped, _ := s.Verification("dropped@example.com", "login", nil)
			waitStatus(t, s, dropped, status.Queued)
			a, _ := s.Verification("a@example.com", "login", nil)
			b, _ := s.Verification("b@example.com", "login", nil)
			testenv.WaitFor(t, 10*time.Second, "all three dead-lettered by the broker", func() bool { return s.Depth("queue.mail.dlq") == 3 })
			require.Equal(t, status.Queued, s.StatusOf(a).Status, "nothing ran yet")

			s.Mail.FailAlways(550, "5.1.1 no such user")
			s.StartConsumer("c1", 2)
			rec := waitStatus(t, s, dropped, status.Failed)
			require.Equal(t, status.ReasonMaxLen, rec.Reason)
			require.Equal(t, "broker", rec.ErrorClass)
			require.Contains(t, rec.LastError, "queue.mail was full")
			for _, id := range []string{a, b} {
				rec := waitStatus(t, s, id, status.Expired)
				require.Equal(t, status.ReasonExpired, rec.Reason)
				require.Contains(t, rec.LastError, "past the queue's message TTL")
			}
			rejected := s.Notice(topology.Mail, "nobody@example.com", "bounce", nil)
			rec = waitStatus(t, s, rejected, status.Failed)
			require.Equal(t, status.ReasonPermanent, rec.Reason, "the consumer's own dead letter keeps its reason")
			testenv.WaitFor(t, 10*time.Second, "the status queue read", func() bool { return s.Depth("queue.mail.dlq.status") == 0 })
			require.Equal(t, status.ReasonPermanent, s.StatusOf(rejected).Reason)
			require.Zero(t, s.Mail.Count())
		})
	}
}

// Issue 36: a quorum queue that hands a message out its delivery limit's
// times dead-letters it (delivery_limit, 20 by default from RabbitMQ 4.0),
// and its status says so instead of the last one written.
func TestDeliveryLimitDeadLetterGetsItsStatus(t *testing.T) {
	s := setup(t, dispatchtest.Options{Model: func(c *topology.Config) { c.QueueType = topology.Quorum }})
	ctx := testenv.Context(t, 30*time.Second)
	require.NoError(t, s.Broker.Mgmt.SetPolicy(ctx, s.Broker.VHost, "limit", mgmt.Policy{Pattern: `^queue\.mail$`, ApplyTo: "queues", Definition: map[string]any{"delivery-limit": 1}}))
	id := s.Notice(topology.Mail, "looped@example.com", "looped", nil)
	// Hand it back until the broker gives up on it.
	testenv.WaitFor(t, 10*time.Second, "dead-lettered for its delivery limit", func() bool {
		if d, ok, err := s.Ch.Get("queue.mail", false); err == nil && ok {
			require.NoError(t, d.Nack(false, true))
		}
		return s.Depth("queue.mail.dlq") == 1
	})
	require.Equal(t, status.Queued, s.StatusOf(id).Status)
	s.StartConsumer("c1", 2)
	rec := waitStatus(t, s, id, status.Failed)
	require.Equal(t, status.ReasonDeliveryLimit, rec.Reason)
	require.Contains(t, rec.LastError, "delivery limit")
}
