package fault

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// 8. Issue 36, "Done when": the broker's memory alarm lasts 60 s while
// retries are due (the SMTP server refuses with 451 until it ends, as an
// outage would). Half the notices failed before the alarm, so their retries
// are between delay hops: the relay cannot publish the next hop; the
// others fail once it is up: the consumer cannot publish their retries
// (connection.blocked). Both hold what they have and publish it once the
// alarm clears; every notice is mailed once and nothing is dead-lettered. On RabbitMQ
// 4.x with QUEUE_TYPE=quorum, handing the deliveries back instead spent
// the delivery limit (20) and the broker dead-lettered them. Run it
// against a private node (TEST_AMQP_URL, TEST_RABBITMQ_MANAGEMENT_URL,
// TEST_RABBITMQCTL, TEST_QUEUE_TYPE=quorum): the alarm stalls every
// publisher of the broker it is raised on.
func TestRetriesWaitOutAMemoryAlarm(t *testing.T) {
	requireFaults(t)
	const n, alarmFor = 10, 60 * time.Second
	// The breaker stays shut: the scenario is about retries (a breaker's
	// waits go the same way, through later).
	s := startSystem(t, "retry-memory-alarm", "QUEUE_TYPE="+string(testenv.QueueType), "MAX_RETRIES=100", "BREAKER_FAILURES=1000")
	outage := mailcatcher.NewSMTPOutage()
	alarmUp := make(chan struct{})
	outage.Before = func(e mailcatcher.Envelope) {
		if strings.HasPrefix(e.To[0], "during") {
			select { // the first attempt fails once the alarm is up
			case <-alarmUp:
			case <-time.After(20 * time.Second):
			}
		}
	}
	s.sink.setHook(outage.Hook)
	_, c := s.api()
	s.consumer("c1")
	ctx := testenv.Context(t, 4*time.Minute)
	ids := make([]string, n)
	for i := range ids {
		rcpt := fmt.Sprintf("before%d@example.com", i)
		if i >= n/2 {
			rcpt = fmt.Sprintf("during%d@example.com", i)
		}
		res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: rcpt,
			Variables: map[string]string{"title": "t", "content": "c"}})
		require.NoError(t, err)
		ids[i] = res.TaskID
	}
	testenv.WaitFor(t, 20*time.Second, "the first attempts before the alarm refused by SMTP", func() bool { return outage.Recipients() == n/2 })
	raisedAt, restore := raiseMemoryAlarm(t)
	close(alarmUp)
	<-time.After(alarmFor) // the fault's length, not a wait for an outcome
	during := outage.Attempts()
	restore()
	clearedAt := time.Now()
	require.Positive(t, s.countLogs("consumer", `"broker blocked publishing"`), "the alarm blocked the consumer's publishes")
	_, dead := s.depths()
	require.Zero(t, dead, "nothing dead-lettered during the alarm (delivery_limit)")
	// A blocked connection's frames are not read until the alarm clears,
	// so hand-backs spent no delivery during it and the queue would not
	// show them; the consumer's log does. None is wanted: each would count
	// once the broker reads it.
	require.Zero(t, s.countLogs("consumer", "handing"), "the consumer and the relay held what they could not publish, and handed nothing back")
	outage.End()

	testenv.WaitFor(t, time.Minute, "every notice mailed", func() bool { return s.sink.count() >= n })
	byTask, _ := s.sink.snapshot()
	for _, id := range ids {
		require.Equal(t, 1, byTask[id], id)
		testenv.WaitFor(t, 10*time.Second, "status sent", func() bool {
			msg, err := c.GetMessage(ctx, id)
			require.NoError(t, err)
			return msg.Status == client.Status("sent")
		})
	}
	_, dead = s.depths()
	require.Zero(t, dead)
	t.Logf("FAULT scenario=%s queueType=%s notices=%d alarm=%s smtpAttemptsBeforeClear=%d mailedIn=%s heldByConsumer=%d heldByRelay=%d", s.name, string(testenv.QueueType), n,
		clearedAt.Sub(raisedAt).Round(time.Second), during, time.Since(clearedAt).Round(time.Millisecond),
		s.countLogs("consumer", "holding it and trying again"), s.countLogs("consumer", "relay: forward failed; holding"))
}
