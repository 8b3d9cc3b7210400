package dlq

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Issue 36: with QUEUE_TYPE=quorum on a vhost whose default queue type is
// quorum, the dead-letter logs are still classic (declared with x-queue-type
// classic) and can be read 30 times without losing a dead letter. A log
// declared without the argument came out quorum there, and on RabbitMQ 4.x
// every read (a basic.get given back) spent one of its 20 deliveries: the
// 21st read lost everything in it.
func TestQuorumDeadLetterLogIsReadManyTimes(t *testing.T) {
	t.Parallel()
	e := setupWith(t, dispatchtest.Options{Model: func(c *topology.Config) { c.QueueType = topology.Quorum }, VHostDefaultType: "quorum"})
	dlq := e.mail.DeadLetterQueue
	log := topology.DeadLetterLogName(dlq)
	ctx := testenv.Context(t, 3*time.Minute)
	q, err := e.Broker.Mgmt.Queue(ctx, e.Broker.VHost, log)
	require.NoError(t, err)
	require.Equal(t, "classic", q.Type, "the log is classic whatever the vhost's default")
	q, err = e.Broker.Mgmt.Queue(ctx, e.Broker.VHost, dlq)
	require.NoError(t, err)
	require.Equal(t, "quorum", q.Type)

	e.Mail.FailAlways(550, "5.1.1 no such user")
	c := e.StartConsumer("c", 2)
	var ids []string
	for i := range 3 {
		ids = append(ids, e.Notice(topology.Mail, fmt.Sprintf("r%d@example.com", i), "t", nil))
	}
	testenv.WaitFor(t, 10*time.Second, "dead-lettered", func() bool { return e.Depth(dlq) == 3 })
	c.Stop()
	for read := range 30 {
		require.Equal(t, sorted(ids), e.listed(t, "mail"), "read %d", read+1)
		testenv.WaitFor(t, 5*time.Second, "the log's copies given back", func() bool { return e.Depth(log) == 3 })
	}
	require.Equal(t, 3, e.Depth(dlq), "the DLQ untouched")
}
