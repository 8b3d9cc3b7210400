package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func atLevel(l topology.Level) func(*envelope.Message) {
	return func(m *envelope.Message) { m.Level = string(l) }
}

// Issue 12: a retried message, and a delayed one, come back to the level
// they left, not to the channel's high queue.
func TestRetriedAndDelayedMessagesReturnToTheirLevel(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	var mu sync.Mutex
	fails := 1
	s.Mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		if fails > 0 {
			fails--
			return mailcatcher.Reject(451, "4.3.0 try again later")
		}
		return nil
	})
	s.StartConsumer("c1", 2)
	low := s.Notice(topology.Mail, "low@example.com", "retry me", atLevel(topology.Low))
	waitStatus(t, s, low, status.Sent)
	consumed := func(l topology.Level) float64 {
		return testutil.ToFloat64(s.Metrics.Consumed.WithLabelValues("mail", string(l)))
	}
	require.Equal(t, 2.0, consumed(topology.Low), "the first delivery and the retry, both from queue.mail.low")
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("mail", "low", "smtp", "transient")))
	require.Zero(t, consumed(topology.High))

	// A scheduled normal message, through the delay queues and the relay.
	ct, err := s.Model.Channel(topology.Mail)
	require.NoError(t, err)
	m := &envelope.Message{Version: envelope.SchemaVersion, TaskID: testenv.ID() + testenv.ID(), Kind: envelope.Notification, Channel: topology.Mail,
		Recipient: "later@example.com", Template: "notice", Variables: map[string]string{"title": "t", "content": "c"}, CreatedAt: time.Now(), Level: string(topology.Normal)}
	require.NoError(t, s.Status.Create(context.Background(), status.Record{TaskID: m.TaskID, Status: status.Scheduled, Channel: "email", CreatedAt: time.Now(), UpdatedAt: time.Now()}))
	pub, err := envelope.Publishing(m)
	require.NoError(t, err)
	require.NoError(t, s.Delayed.PublishDelayed(testenv.Context(t, 10*time.Second),
		broker.Outgoing{Exchange: ct.Exchange, RoutingKey: ct.Level(topology.Normal).RoutingKey, Msg: pub}, 300*time.Millisecond))
	waitStatus(t, s, m.TaskID, status.Sent)
	require.Equal(t, 1.0, consumed(topology.Normal))
	require.Zero(t, consumed(topology.High))
	require.Zero(t, s.Depth("queue.mail.dlq"))
}

// A normal message past its own deadline (ttlSeconds) is not sent: the
// queue has no TTL, the consumer enforces the message's.
func TestNormalMessagePastItsDeadlineIsNotSent(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	past := time.Now().Add(-time.Second)
	id := s.Notice(topology.Mail, "stale@example.com", "stale", func(m *envelope.Message) {
		m.Level = string(topology.Normal)
		m.Deadline = &past
	})
	s.StartConsumer("c1", 2)
	rec := waitStatus(t, s, id, status.Expired)
	require.Equal(t, status.ReasonDeadline, rec.Reason)
	testenv.WaitFor(t, 5*time.Second, "dead-lettered", func() bool { return s.Depth("queue.mail.dlq") == 1 })
	require.Zero(t, s.MailsTo("stale@example.com"))
	require.Equal(t, 1.0, testutil.ToFloat64(s.Metrics.DeadLettered.WithLabelValues("mail", "normal", "smtp", status.ReasonDeadline)))
}

// A body naming a level that does not exist is malformed, not guessed at.
func TestUnknownLevelIsMalformed(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	id := s.Notice(topology.Mail, "odd@example.com", "odd", func(m *envelope.Message) { m.Level = "urgent" })
	s.StartConsumer("c1", 1)
	rec := waitStatus(t, s, id, status.Failed)
	require.Equal(t, status.ReasonMalformed, rec.Reason)
}

// Issue 12 (seed 004's traffic shaper): at a provider's limit the next
// tokens go to high. Normal stops at the limit less the reserve and waits
// (snoozed, never failed); a code still gets through.
func TestProviderLimitKeepsTokensForHigh(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	store, err := ratelimit.NewConfigStore(s.Redis.Client, s.Redis.Prefix, nil, ratelimit.StoreConfig{})
	require.NoError(t, err)
	smtp := "smtp"
	// A minute window: nothing frees up while the test runs.
	_, err = store.Create(context.Background(), ratelimit.Config{ID: "smtp-minute", Provider: &smtp, RequestsPerMinute: 5, IsEnabled: true})
	require.NoError(t, err)
	s.StartConsumer("c1", 4)
	var bulk []string
	for i := range 6 {
		bulk = append(bulk, s.Notice(topology.Mail, fmt.Sprintf("bulk%d@example.com", i), "bulk", atLevel(topology.Normal)))
	}
	testenv.WaitFor(t, 10*time.Second, "4 of 6 normal sent, 2 snoozed", func() bool {
		return s.Mail.Count() == 4 && testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("mail", "normal", "snoozed")) >= 2
	})
	code, _ := s.Verification("code@example.com", "login", nil)
	waitStatus(t, s, code, status.Sent)
	require.Equal(t, 1, s.MailsTo("code@example.com"), "the reserved token went to the code")
	for _, id := range bulk {
		rec := s.StatusOf(id)
		require.NotEqual(t, status.Failed, rec.Status, "lower levels wait, never fail")
	}
	require.Equal(t, 5, s.Mail.Count())
	require.Zero(t, s.Depth("queue.mail.dlq"))
}
