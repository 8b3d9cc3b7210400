package delay

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Issue 36: when the next hop's delay queue refuses the relay's publish,
// the relay holds the message and publishes it again until the queue takes
// it: every message arrives once, and the relay queue redelivers none. The
// relay handed them back every 500 ms, which on a RabbitMQ 4.x quorum
// relay queue spent its delivery limit (20) in ten seconds and had the
// broker dead-letter a delayed message for a fault that healed.
func TestRelayHoldsWhatTheNextHopRefuses(t *testing.T) {
	h := setup(t, nil)
	b := h.broker
	pl, err := NewPlanner(h.model.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	r, err := NewRelay(RelayConfig{Session: h.session, Publisher: h.pub, Planner: pl, Topology: h.model.Delay, Metrics: h.metrics, RetryWait: 100 * time.Millisecond, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	var relayedN, redelivered atomic.Int64
	c, err := broker.NewConsumer(broker.ConsumerConfig{Session: h.session, Queue: h.model.Delay.RelayQueue, Concurrency: 4, Grace: time.Second, Logger: zaptest.NewLogger(t),
		BatchHandler: func(ctx context.Context, ds []*amqp.Delivery) []broker.Action {
			for _, d := range ds {
				relayedN.Add(1)
				if d.Redelivered {
					redelivered.Add(1)
				}
			}
			return r.HandleBatch(ctx, ds)
		}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	// 1.7 s: a first hop of 1 s, then the relay's, which every delay
	// queue refuses from now on: the relay holds them, re-planning each try
	// from the due time, until they are due and go to their target.
	const n = 5
	pctx := testenv.Context(t, 30*time.Second)
	for i := range n {
		require.NoError(t, h.delayed.PublishDelayed(pctx, h.out(fmt.Sprint(i)), 1700*time.Millisecond))
	}
	restore := b.RefusePublishes(t, h.model.Delay.Queues()...)
	testenv.WaitFor(t, 10*time.Second, "the relay got them", func() bool { return relayedN.Load() >= n })
	testenv.WaitFor(t, 10*time.Second, "every message delivered", func() bool { return h.count() == n })
	restore()
	for i := range n {
		l, ok := h.lateness(fmt.Sprint(i))
		require.True(t, ok)
		require.Len(t, l, 1, "message %d arrived once", i)
		require.Less(t, l[0], time.Second, "message %d on time, the refused hops notwithstanding", i)
	}
	if testenv.QueueType == topology.Classic {
		// A quorum delay queue applies its bound after the fact: a hop it
		// took despite the refusal comes back to the relay once more,
		// which is a pass, not a hand-back (redelivered says that).
		require.EqualValues(t, n, relayedN.Load(), "relayed once each")
	}
	require.Zero(t, redelivered.Load(), "the relay handed nothing back")
}
