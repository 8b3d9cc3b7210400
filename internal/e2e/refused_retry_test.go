package e2e

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Issue 36, "Done when": retries whose delay queues refuse publishes for
// 60 s (a max-length 0, reject-publish policy on them, then removed) are
// delivered once after the policy goes, and nothing is dead-lettered, with
// the binaries at their defaults (RETRY_BACKOFF aside). Reproduced on
// RabbitMQ 4.0.5 with QUEUE_TYPE=quorum before the fix: a retry handed
// back every second spent the quorum queue's delivery limit (20), and the
// broker dead-lettered 3 of 5 notices whose fault had healed, their status
// still retrying. TEST_QUEUE_TYPE picks the queue type.
func TestRetriesWaitOutDelayQueuesThatRefuse(t *testing.T) {
	const n, refuseFor = 5, 60 * time.Second
	// MAX_RETRIES high: a quorum delay queue still takes one copy while it
	// is empty, which comes back and is refused by SMTP again; the test is
	// about the hand-backs, not about running out of retries.
	s := newSystem(t, "QUEUE_TYPE="+string(testenv.QueueType), "MAX_RETRIES=100")
	// The SMTP server refuses (451) while the delay queues do, as a
	// provider outage fills them in production: a retry handed back is
	// tried again at once and refused again.
	outage := mailcatcher.NewSMTPOutage()
	s.mail.SetHook(outage.Hook)
	m, err := topology.Build(topology.DefaultConfig(), "")
	require.NoError(t, err)
	restore := s.broker.RefusePublishes(t, m.Delay.Queues()...)
	_, c := s.api()
	s.consumer("c1")
	ctx := testenv.Context(t, 3*time.Minute)
	ids := make([]string, n)
	for i := range ids {
		res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: fmt.Sprintf("refused%d@example.com", i),
			Variables: map[string]string{"title": "t", "content": "c"}})
		require.NoError(t, err)
		ids[i] = res.TaskID
	}
	testenv.WaitFor(t, 20*time.Second, "every first attempt refused by SMTP", func() bool { return outage.Recipients() == n })
	<-time.After(refuseFor) // the fault's length, not a wait for an outcome
	restore()
	require.Zero(t, s.depth("queue.mail.dlq"), "nothing dead-lettered while the delay queues refused (delivery_limit)")
	outage.End()

	testenv.WaitFor(t, time.Minute, "every notice mailed", func() bool { return s.mail.Count() >= n })
	for i, id := range ids {
		require.Equal(t, 1, s.mailsTo(fmt.Sprintf("refused%d@example.com", i)))
		testenv.WaitFor(t, 10*time.Second, "status sent", func() bool {
			msg, err := c.GetMessage(ctx, id)
			require.NoError(t, err)
			return msg.Status == client.Status("sent")
		})
	}
	require.Zero(t, s.depth("queue.mail.dlq"), "nothing dead-lettered (delivery_limit)")
}
