package delay

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

type harness struct {
	broker  *testenv.Broker
	model   *topology.Model
	session *broker.Session
	pub     *broker.Publisher
	delayed *Publisher
	metrics *Metrics
	conn    *amqp.Connection
	target  topology.ChannelTopology

	mu      sync.Mutex
	arrived map[string][]time.Duration // message id -> arrival − due, per delivery
}

func setup(t *testing.T, mod func(*topology.DelayConfig)) *harness {
	t.Helper()
	t.Parallel()
	b := testenv.NewBroker(t)
	cfg := testenv.Topology()
	cfg.Channels[topology.Mail] = topology.ChannelConfig{} // no TTL, unbounded: measure delays only
	if mod != nil {
		mod(&cfg.Delay)
	}
	m, err := topology.Build(cfg, "")
	require.NoError(t, err)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	require.NoError(t, broker.Declare(conn, m))

	ctx, cancel := context.WithCancel(context.Background())
	s, err := broker.NewSession(broker.Config{URL: b.URL, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	sdone := make(chan struct{})
	go func() { s.Run(ctx); close(sdone) }()
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: s})
	require.NoError(t, err)
	t.Cleanup(func() { pub.Close(); cancel(); <-sdone })
	_, err = s.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)

	metrics := NewMetrics(prometheus.NewRegistry())
	pl, err := NewPlanner(m.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	mail, err := m.Channel(topology.Mail)
	require.NoError(t, err)
	h := &harness{broker: b, model: m, session: s, pub: pub, delayed: NewPublisher(pub, pl, m.Delay, metrics), metrics: metrics, conn: conn, target: mail, arrived: map[string][]time.Duration{}}

	// The target's consumer records when each message arrived.
	c, err := broker.NewConsumer(broker.ConsumerConfig{Session: s, Queue: mail.Queue, Concurrency: 4, Prefetch: 200,
		Handler: func(_ context.Context, d *amqp.Delivery) broker.Action {
			due, ok := envelope.HeaderTime(d.Headers, envelope.HeaderDueAt)
			require.True(t, ok, "delivered message carries x-due-at")
			h.mu.Lock()
			h.arrived[d.MessageId] = append(h.arrived[d.MessageId], time.Since(due))
			h.mu.Unlock()
			return broker.Ack
		}})
	require.NoError(t, err)
	go func() { _ = c.Run(ctx) }()
	return h
}

// relay starts a relay and returns a function that kills it.
func (h *harness) relay(t *testing.T) (stop func()) {
	t.Helper()
	pl, err := NewPlanner(h.model.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	r, err := NewRelay(RelayConfig{Session: h.session, Publisher: h.pub, Planner: pl, Topology: h.model.Delay, Metrics: h.metrics, Grace: time.Second})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = r.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return stop
}

func (h *harness) out(id string) broker.Outgoing {
	return broker.Outgoing{Exchange: h.target.Exchange, RoutingKey: h.target.RoutingKey, Msg: amqp.Publishing{MessageId: id, Body: []byte(id)}}
}

func (h *harness) lateness(id string) ([]time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	l, ok := h.arrived[id]
	return append([]time.Duration(nil), l...), ok
}

func (h *harness) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.arrived)
}

// The seed's precise queue would hold the 1.3 s message behind the 7.5 s
// one; composed hops deliver each on time.
func TestExactDelaysArriveOnTimeInBlockingOrder(t *testing.T) {
	h := setup(t, nil)
	h.relay(t)
	ctx := testenv.Context(t, 30*time.Second)
	delays := map[string]time.Duration{"7.5s": 7500 * ms, "1.3s": 1300 * ms, "0.3s": 300 * ms, "2.05s": 2050 * ms, "3s": 3 * time.Second, "40ms": 40 * ms}
	for _, id := range []string{"7.5s", "1.3s", "0.3s", "2.05s", "3s", "40ms"} { // long first
		require.NoError(t, h.delayed.PublishDelayed(ctx, h.out(id), delays[id]))
	}
	testenv.WaitFor(t, 20*time.Second, "all delayed messages delivered", func() bool { return h.count() == len(delays) })
	for id := range delays {
		l, _ := h.lateness(id)
		require.Len(t, l, 1, id)
		// Generous bound: a shared 2-core machine running -race; the seed's
		// scheme would be 6.2 s late for 1.3s here.
		require.Less(t, l[0], 250*ms, "%s arrived %s after its due time", id, l[0])
		require.Greater(t, l[0], -5*ms, "%s arrived %s early", id, -l[0])
	}
	require.Equal(t, 6.0, testutil.ToFloat64(h.metrics.Published.WithLabelValues("queue.delay.5s"))+
		testutil.ToFloat64(h.metrics.Published.WithLabelValues("queue.delay.1s"))+
		testutil.ToFloat64(h.metrics.Published.WithLabelValues("queue.delay.256ms"))+
		testutil.ToFloat64(h.metrics.Published.WithLabelValues("queue.delay.32ms")), "published, by first hop")
	require.Equal(t, uint64(6), histCount(t, h.metrics.Hops))
}

func histCount(t *testing.T, hist prometheus.Histogram) uint64 {
	t.Helper()
	var m dto.Metric
	require.NoError(t, hist.Write(&m))
	return m.GetHistogram().GetSampleCount()
}

// Round-up mode is the seed's scheme C: a 1.5 s delay waits for the 2 s
// tier, and the precise queue blocks a short message behind a long one.
func TestRoundUpModeIsTheSeedsScheme(t *testing.T) {
	h := setup(t, func(d *topology.DelayConfig) {
		d.Mode = topology.DelayRoundUp
		d.Tiers = []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
		d.PreciseThreshold = time.Second
		d.Max = 3 * time.Second
	})
	ctx := testenv.Context(t, 30*time.Second)
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("1.5s"), 1500*ms))   // → 2 s tier
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("0.9s"), 900*ms))    // precise
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("0.1s"), 100*ms))    // precise, behind 0.9 s
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("1s"), time.Second)) // = threshold → tier
	err := h.delayed.PublishDelayed(ctx, h.out("4s"), 4*time.Second)
	require.ErrorIs(t, err, ErrTooLong)
	testenv.WaitFor(t, 15*time.Second, "round-up deliveries", func() bool { return h.count() == 4 })
	late := func(id string) time.Duration { l, _ := h.lateness(id); return l[0] }
	require.InDelta(t, float64(500*ms), float64(late("1.5s")), float64(250*ms), "rounded up to the 2 s tier")
	require.InDelta(t, float64(800*ms), float64(late("0.1s")), float64(250*ms), "head-of-line blocked behind 0.9 s")
	require.Less(t, late("0.9s"), 250*ms)
	require.Less(t, late("1s"), 250*ms)
}

func TestOverflowNacksAndIsCounted(t *testing.T) {
	h := setup(t, func(d *topology.DelayConfig) { d.MaxLength = 2 })
	ctx := testenv.Context(t, 20*time.Second)
	for i := range 2 {
		require.NoError(t, h.delayed.PublishDelayed(ctx, h.out(fmt.Sprint(i)), 5*time.Second))
	}
	// A quorum queue's bound bites after the fact: it may hold one or two more.
	held := 2
	var err error
	for ; held <= 2+testenv.Overshoot(); held++ {
		if err = h.delayed.PublishDelayed(ctx, h.out(fmt.Sprint("overflow-", held)), 5*time.Second); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrOverflow)
	require.ErrorIs(t, err, broker.ErrNacked)
	require.ErrorContains(t, err, "queue.delay.5s")
	require.Equal(t, 1.0, testutil.ToFloat64(h.metrics.Overflow.WithLabelValues("queue.delay.5s")))
	st, err := broker.Inspect(h.conn, []string{"queue.delay.5s"})
	require.NoError(t, err)
	require.Equal(t, held, st[0].Messages, "nothing was dropped to make room")
}

// Killing the relay while messages are between hops loses none of them:
// unacked ones go back to the relay queue, and a new relay carries on.
func TestRelayKilledMidRunLosesNothing(t *testing.T) {
	h := setup(t, nil)
	stop := h.relay(t)
	ctx := testenv.Context(t, 60*time.Second)
	const n = 60
	for i := range n {
		d := 1100*ms + time.Duration(i*37%900)*ms // many hops each
		require.NoError(t, h.delayed.PublishDelayed(ctx, h.out(fmt.Sprint(i)), d))
	}
	// Between hops: the relay has carried some, not all have arrived (a
	// busy machine may deliver the first before this poll sees it).
	testenv.WaitFor(t, 10*time.Second, "some messages in the relay's hands", func() bool {
		return relayed(t, h) > 0 && h.count() < n
	})
	stop()
	h.relay(t)
	testenv.WaitFor(t, 30*time.Second, "every message delivered", func() bool { return h.count() == n })
	for i := range n {
		_, ok := h.lateness(fmt.Sprint(i))
		require.True(t, ok, "message %d", i)
	}
}

// relayed counts hop publications so far (messages the relay forwarded).
func relayed(t *testing.T, h *harness) int {
	st, err := broker.Inspect(h.conn, []string{"queue.delay.16ms", "queue.delay.32ms", "queue.delay.64ms", "queue.delay.128ms", "queue.delay.256ms", "queue.delay.512ms", "queue.delay.precise"})
	require.NoError(t, err)
	n := 0
	for _, s := range st {
		n += s.Messages
	}
	return n
}

func TestBatchIsConfirmedAndDelivered(t *testing.T) {
	h := setup(t, nil)
	h.relay(t)
	ctx := testenv.Context(t, 30*time.Second)
	var msgs []DelayedMessage
	for i := range 300 {
		msgs = append(msgs, DelayedMessage{Outgoing: h.out(fmt.Sprint(i)), Delay: time.Duration(200+i*5) * ms})
	}
	msgs = append(msgs, DelayedMessage{Outgoing: h.out("bad"), Delay: -time.Second})
	errs := h.delayed.PublishDelayedBatch(ctx, msgs)
	for i, err := range errs[:300] {
		require.NoError(t, err, i)
	}
	require.ErrorIs(t, errs[300], ErrNotPositive)
	testenv.WaitFor(t, 20*time.Second, "batch delivered", func() bool { return h.count() == 300 })
	var late []time.Duration
	for i := range 300 {
		l, _ := h.lateness(fmt.Sprint(i))
		late = append(late, l[0])
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	t.Logf("batch of 300: p50 %s, p99 %s, max %s", late[150], late[296], late[299])
	// How close to due the relay delivers is measured by make bench (a
	// busy 2-core machine makes any tight bound here flaky: p50 158 ms
	// once under load); a relay that skipped a hop, or waited a whole
	// tier, is late by far more than a second.
	require.Less(t, late[150], time.Second, "the batch's median lateness")
}

// The last hop is delivered by the broker itself when it expires: a delay
// of exactly one tier arrives with no relay running at all, and an
// intermediate hop waits in the relay queue until a relay takes it.
func TestFinalHopNeedsNoRelay(t *testing.T) {
	h := setup(t, nil)
	ctx := testenv.Context(t, 20*time.Second)
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("one-tier"), time.Second))
	require.NoError(t, h.delayed.PublishDelayed(ctx, h.out("two-hops"), 1300*ms))
	testenv.WaitFor(t, 10*time.Second, "the one-tier message, without a relay", func() bool { _, ok := h.lateness("one-tier"); return ok })
	l, _ := h.lateness("one-tier")
	// Arriving at all shows it needed no relay (none runs yet); the bound
	// only says it was not held up. Quorum delay queues expire a little
	// later than classic ones (261 ms seen on a loaded 4.0.5 run).
	require.Less(t, l[0], 500*ms)
	testenv.WaitFor(t, 10*time.Second, "the two-hop message waiting for a relay", func() bool {
		st, err := broker.Inspect(h.conn, []string{h.model.Delay.RelayQueue})
		require.NoError(t, err)
		return st[0].Messages == 1
	})
	_, ok := h.lateness("two-hops")
	require.False(t, ok)
	h.relay(t)
	testenv.WaitFor(t, 10*time.Second, "the two-hop message once a relay runs", func() bool { _, ok := h.lateness("two-hops"); return ok })
}

// A message published to the delay exchange without msgpulse's CC key
// (another publisher, or by hand) is parked when it expires, never dropped.
func TestForeignDelayedMessageIsParkedNotLost(t *testing.T) {
	h := setup(t, nil)
	ctx := testenv.Context(t, 20*time.Second)
	tier := h.model.Delay.Tiers[0]
	require.NoError(t, h.pub.Publish(ctx, h.model.Delay.Exchange, tier.RoutingKey, amqp.Publishing{MessageId: "foreign", Body: []byte("x")}))
	testenv.WaitFor(t, 10*time.Second, "parked in "+h.model.Delay.UnroutedQueue, func() bool {
		st, err := broker.Inspect(h.conn, []string{h.model.Delay.UnroutedQueue})
		require.NoError(t, err)
		return st[0].Messages == 1
	})
}
