package broker

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// A list of nodes where some refuse connections: Dial and a Session both
// end up on the node that answers, whichever node they start at, and no
// error names a password.
func TestURLListSkipsDeadNodes(t *testing.T) {
	t.Parallel()
	b := testenv.NewBroker(t)
	dead, err := envconf.WithVHost("amqp://guest:s3cret@127.0.0.1:1/,amqp://guest:s3cret@127.0.0.1:2/", b.VHost)
	require.NoError(t, err)
	list := dead + "," + b.URL
	for range 4 { // each start picks a random node
		conn, err := Dial(testenv.Context(t, 10*time.Second), Config{URL: list})
		require.NoError(t, err)
		require.NoError(t, conn.Close())
	}

	_, err = Dial(testenv.Context(t, 10*time.Second), Config{URL: dead})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	for _, node := range []string{"127.0.0.1:1:", "127.0.0.1:2:"} {
		require.True(t, strings.Contains(err.Error(), node), "every node is named: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewSession(Config{URL: list, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	_, err = s.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
}

// A channel that got a nack is never published on again: on RabbitMQ 3.10,
// once a quorum queue's leader died, such a channel kept nacking (found by
// the cluster scenarios). Both paths are checked: a pooled channel (no
// MessageId) and a shared lane (with one).
func TestNackedChannelIsNotReused(t *testing.T) {
	e := setup(t)
	e.queue(t, "q", nil)
	e.full(t, "full")
	ctx := testenv.Context(t, 20*time.Second)
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{Body: []byte("first")}))
	require.Len(t, e.pub.idle, 1, "a confirmed channel goes back to the pool")
	for _, tc := range []struct {
		name string
		id   string
	}{{"pooled channel", ""}, {"shared lane", "m-1"}} {
		err := e.pub.Publish(ctx, "x", "full", amqp.Publishing{MessageId: tc.id, Body: []byte(tc.name)})
		require.ErrorIs(t, err, ErrNacked, tc.name)
	}
	require.Empty(t, e.pub.idle, "the nacked pooled channel was discarded")
	retired := 0
	for _, s := range e.pub.pool("x", "full").slots {
		if s.l != nil && s.l.retired.Load() {
			retired++
		}
	}
	require.Equal(t, 1, retired, "the nacked lane was retired")
	// Publishing goes on, on fresh channels.
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{MessageId: "m-2", Body: []byte("after")}))
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{Body: []byte("after")}))
}

// twoNodes is a broker reached through two proxies, a and b, as if they
// were two nodes of a cluster, and a session on a (b refused while it
// connects). A blackholed proxy is a node cut off from its peers as its
// clients see it: the connection stays open and nothing is answered.
type twoNodes struct {
	b    *testenv.Broker
	a, z *testenv.FaultProxy
	s    *Session
}

func setupTwoNodes(t *testing.T, cfg Config) *twoNodes {
	t.Helper()
	b := testenv.NewBroker(t)
	u, err := url.Parse(b.URL)
	require.NoError(t, err)
	n := &twoNodes{b: b, a: testenv.NewFaultProxy(t, u.Host), z: testenv.NewFaultProxy(t, u.Host)}
	via := func(p *testenv.FaultProxy) string { v := *u; v.Host = p.Addr(); return v.String() }
	cfg.URL = via(n.a) + "," + via(n.z)
	cfg.Logger = zaptest.NewLogger(t)
	n.z.Cut()
	n.s, err = NewSession(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { n.s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	_, err = n.s.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
	require.Equal(t, 1, n.a.Live(), "the session is on a")
	n.z.Restore()
	return n
}

// channel is a plain channel of the broker's own (not through a proxy)
// with queue q declared and bound to exchange x.
func (n *twoNodes) channel(t *testing.T) *amqp.Channel {
	t.Helper()
	conn, err := amqp.Dial(n.b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare("x", "direct", false, false, false, false, nil))
	_, err = ch.QueueDeclare("q", true, false, false, false, testenv.QueueArgs(nil))
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind("q", "q", "x", false, nil))
	return ch
}

// consume runs a consumer of q on the session, configured by cfg, that
// hands each body to got (dropping it when got is full) and acks; it
// stops when t ends.
func (n *twoNodes) consume(t *testing.T, cfg ConsumerConfig, got chan<- string) *Consumer {
	t.Helper()
	cfg.Session, cfg.Queue, cfg.Logger = n.s, "q", zaptest.NewLogger(t)
	cfg.Handler = func(_ context.Context, d *amqp.Delivery) Action {
		select {
		case got <- string(d.Body):
		default:
		}
		return Ack
	}
	c, err := NewConsumer(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	return c
}

// A node that confirms nothing (cut off from its peers, its connection
// and heartbeats alive until net_ticktime) is left after LeaveAfter:
// publishes time out as "may have been kept" meanwhile, then go through
// the next node, long before the heartbeat (10 s, three missed) would
// have noticed.
func TestPublisherLeavesANodeThatConfirmsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		id   string // a MessageId takes a shared lane; none, a pooled channel
	}{{"lane", "m"}, {"pooled channel", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const confirmTimeout, leaveAfter = 300 * time.Millisecond, time.Second
			n := setupTwoNodes(t, Config{LeaveAfter: leaveAfter})
			n.channel(t)
			pub, err := NewPublisher(PublisherConfig{Session: n.s, ConfirmTimeout: confirmTimeout})
			require.NoError(t, err)
			t.Cleanup(pub.Close)
			ctx := testenv.Context(t, 30*time.Second)
			msg := func(i int) amqp.Publishing {
				m := amqp.Publishing{Body: []byte("x")}
				if tc.id != "" {
					m.MessageId = fmt.Sprintf("%s-%d", tc.id, i)
				}
				return m
			}
			require.NoError(t, pub.Publish(ctx, "x", "q", msg(0)))

			n.a.Blackhole()
			cut := time.Now()
			timeouts, i := 0, 1
			for ; ; i++ {
				err := pub.Publish(ctx, "x", "q", msg(i))
				if err == nil {
					break
				}
				require.True(t, MayBeKept(err) || errors.Is(err, ErrUnavailable), "publish %d: %v", i, err)
				if errors.Is(err, ErrConfirmTimeout) {
					timeouts++
				}
				require.Less(t, time.Since(cut), 15*time.Second, "still no confirm through the other node")
			}
			t.Logf("published through the other node %s after the cut; %d publishes timed out meanwhile", time.Since(cut).Round(time.Millisecond), timeouts)
			require.Equal(t, int64(1), n.s.Leaves())
			require.Positive(t, timeouts)
			require.Equal(t, 1, n.z.Live(), "the session is on the other node")
			for j := range 5 {
				require.NoError(t, pub.Publish(ctx, "x", "q", msg(i+1+j)))
			}
		})
	}
}

// A batch counts too: a batch whose confirms never come makes the session
// leave as single publishes do.
func TestBatchOnANodeThatConfirmsNothingLeavesIt(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, Config{LeaveAfter: 500 * time.Millisecond})
	pub, err := NewPublisher(PublisherConfig{Session: n.s, ConfirmTimeout: 300 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(pub.Close)
	ctx := testenv.Context(t, 30*time.Second)
	n.a.Blackhole()
	testenv.WaitFor(t, 15*time.Second, "the session leaves the silent node", func() bool {
		errs := pub.PublishBatch(ctx, []Outgoing{{Exchange: "amq.direct", RoutingKey: "none", Msg: amqp.Publishing{MessageId: "1"}}})
		return n.s.Leaves() == 1 && errs[0] != nil
	})
	testenv.WaitFor(t, 10*time.Second, "the session is on the other node", func() bool { return n.z.Live() == 1 })
}

// A consume that is never answered (a channel.open or basic.consume on a
// node cut off from a quorum queue's leader) is given up after
// SubscribeTimeout, and the consumer resumes through the next node.
func TestConsumerLeavesANodeThatDoesNotAnswerItsSubscription(t *testing.T) {
	t.Parallel()
	n := setupTwoNodes(t, Config{})
	ch := n.channel(t)

	n.a.Blackhole() // before the consumer subscribes: its channel.open is never answered
	got := make(chan string, 1)
	n.consume(t, ConsumerConfig{SubscribeTimeout: 500 * time.Millisecond}, got)

	require.NoError(t, ch.PublishWithContext(testenv.Context(t, 5*time.Second), "", "q", false, false, amqp.Publishing{Body: []byte("hello")}))
	select {
	case body := <-got:
		require.Equal(t, "hello", body)
	case <-time.After(15 * time.Second):
		t.Fatal("nothing was delivered through the other node")
	}
	require.Equal(t, int64(1), n.s.Leaves())
	require.Equal(t, 1, n.z.Live())
}

// A consumer whose node stops answering after it subscribed (the
// connection and subscription up, nothing delivered: a node cut off from
// its peers) finds out by probing while idle, leaves the node, and
// resumes through the next one. A consumer on a quiet queue, or a busy
// one, probes and stays.
func TestIdleConsumerLeavesANodeThatStoppedAnswering(t *testing.T) {
	t.Parallel()
	// A short heartbeat makes the broker give up on the old connection
	// (and requeue what it had sent on it) within seconds; the probe
	// leaves well before the client's own heartbeat check would.
	n := setupTwoNodes(t, Config{Heartbeat: 2 * time.Second})
	ch := n.channel(t)

	got := make(chan string, 16)
	c := n.consume(t, ConsumerConfig{SubscribeTimeout: 500 * time.Millisecond, ProbeEvery: 100 * time.Millisecond}, got)
	publish := func(body string) {
		require.NoError(t, ch.PublishWithContext(testenv.Context(t, 5*time.Second), "", "q", false, false, amqp.Publishing{Body: []byte(body)}))
	}
	receive := func(want string) {
		t.Helper()
		select {
		case body := <-got:
			require.Equal(t, want, body)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s was not delivered", want)
		}
	}
	publish("before")
	receive("before")
	// Idle on an empty queue for many probes: the node answers, it stays.
	probes := c.cfg.ProbeEvery * 10
	deadline := time.Now().Add(probes)
	for time.Now().Before(deadline) {
		require.Zero(t, n.s.Leaves(), "a quiet node that answers is not left")
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // observing that nothing happens for ten probes
	}

	n.a.Blackhole()
	testenv.WaitFor(t, 10*time.Second, "the idle consumer leaves the silent node", func() bool { return n.s.Leaves() == 1 })
	testenv.WaitFor(t, 10*time.Second, "the session is on the other node", func() bool { return n.z.Live() == 1 })
	// What the broker sends the old subscription meanwhile is requeued
	// once it gives up on that connection (here its heartbeat timeout; on
	// a real cluster, when the node is found down), and delivered through
	// the new one.
	publish("after")
	receive("after")
}
