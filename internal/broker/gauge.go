package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// GaugeConfig configures a Gauge.
type GaugeConfig struct {
	Session *Session
	// Queues are the queues to watch, from the topology model.
	Queues []string
	// Interval is how often a queue in use is read (a passive declare);
	// default 25ms. A queue with no admission for IdleInterval is read
	// every IdleInterval instead.
	Interval     time.Duration
	IdleInterval time.Duration // default 1s (or Interval, if longer)
	// Stale is the age past which a reading is not used: with none fresh
	// (no connection, a read that hangs), Admit lets everything through
	// and the queue's own overflow rule decides. Default 3 IdleIntervals.
	Stale  time.Duration
	Logger *zap.Logger
}

// Validate fills defaults and checks the configuration.
func (c *GaugeConfig) Validate() error {
	if c.Session == nil {
		return errors.New("gauge: Session is required")
	}
	c.Interval = cmp.Or(c.Interval, 25*time.Millisecond)
	if c.IdleInterval == 0 {
		c.IdleInterval = max(time.Second, c.Interval)
	}
	c.Stale = cmp.Or(c.Stale, 3*c.IdleInterval)
	if c.Interval < time.Millisecond || c.IdleInterval < c.Interval || c.Stale <= c.IdleInterval {
		return fmt.Errorf("gauge: want 1ms <= Interval (%s) <= IdleInterval (%s) < Stale (%s)", c.Interval, c.IdleInterval, c.Stale)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// A Gauge estimates the depth of queues, fresh and without a round trip
// per question, so that a publisher can refuse a message before the
// queue's overflow rule would drop or refuse it (admission).
//
// Each queue has one goroutine (Run owns them) that reads its ready count
// with a passive declare every Interval: it is what the broker counts
// against x-max-length, and unlike the management API's figures it is
// current when it arrives. Between two readings the gauge adds what this
// process put in itself: the publishes confirmed since the reading's
// declare was sent, and the publishes admitted and still in flight. That
// overcounts a little (a publish confirmed while the declare was on its
// way may be in both), never under, for this process's own traffic.
// Other publishers sharing the queue (API replicas) are seen at the next
// reading: with N replicas each publishing r messages a second, the
// estimate can lag by about N·r·Interval messages, which the room between
// the admission limit and the bound has to hold (the queue's overflow
// rule catches the rest).
//
// It never decides what is too full: Admit takes the caller's limit.
type Gauge struct {
	cfg    GaugeConfig
	queues map[string]*queueGauge
}

type queueGauge struct {
	name      string
	reading   atomic.Pointer[reading]
	confirmed atomic.Int64 // admitted publishes that were confirmed
	inflight  atomic.Int64 // admitted publishes not yet finished
	admits    atomic.Int64 // every admission, to tell a queue in use
}

type reading struct {
	depth int64
	base  int64 // confirmed when the declare was sent
	at    time.Time
}

// NewGauge returns a Gauge; call Run to start reading.
func NewGauge(cfg GaugeConfig) (*Gauge, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Gauge{cfg: cfg, queues: make(map[string]*queueGauge, len(cfg.Queues))}
	for _, q := range cfg.Queues {
		g.queues[q] = &queueGauge{name: q}
	}
	return g, nil
}

// Ticket is one admitted publish; call Done with its outcome.
type Ticket struct{ q *queueGauge }

// Done records the publish's outcome: confirmed or not.
func (t Ticket) Done(confirmed bool) {
	if t.q == nil {
		return
	}
	if confirmed {
		t.q.confirmed.Add(1)
	}
	t.q.inflight.Add(-1)
}

// Admit admits one publish to queue unless the queue would then hold more
// than limit messages by the gauge's estimate, which it returns. It admits
// when the queue is not watched, limit is not positive, or no fresh
// reading exists. Admitted or not, it costs a few atomic operations.
func (g *Gauge) Admit(queue string, limit int) (Ticket, int, bool) {
	q := g.queues[queue]
	if q == nil || limit <= 0 {
		return Ticket{}, 0, true
	}
	q.admits.Add(1)
	n := q.inflight.Add(1)
	r := q.reading.Load()
	if r == nil || time.Since(r.at) > g.cfg.Stale {
		return Ticket{q}, 0, true
	}
	est := r.depth + q.confirmed.Load() - r.base + n
	if est > int64(limit) {
		q.inflight.Add(-1)
		return Ticket{}, int(est - 1), false
	}
	return Ticket{q}, int(est), true
}

// Depth is queue's current estimate and whether there is a fresh reading.
func (g *Gauge) Depth(queue string) (int, bool) {
	q := g.queues[queue]
	if q == nil {
		return 0, false
	}
	r := q.reading.Load()
	if r == nil || time.Since(r.at) > g.cfg.Stale {
		return 0, false
	}
	return int(r.depth + q.confirmed.Load() - r.base + q.inflight.Load()), true
}

// Run reads every queue until ctx ends; it returns when its goroutines
// have.
func (g *Gauge) Run(ctx context.Context) {
	done := make(chan struct{}, len(g.queues))
	for _, q := range g.queues {
		go func() {
			defer func() { done <- struct{}{} }()
			g.watch(ctx, q)
		}()
	}
	for range g.queues {
		<-done
	}
}

// watch is one queue's reader. It keeps a channel of its own: a passive
// declare of a missing queue closes the channel it ran on.
func (g *Gauge) watch(ctx context.Context, q *queueGauge) {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			go func() { _ = ch.Close() }() // close-ok may never come (see discard)
		}
	}()
	var conn *amqp.Connection
	seen, failing := int64(-1), false
	var tried time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if failing && time.Since(tried) < g.cfg.IdleInterval {
			continue // a missing queue: no channel churn every Interval
		}
		admits := q.admits.Load()
		if r := q.reading.Load(); admits == seen && r != nil && time.Since(r.at) < g.cfg.IdleInterval {
			continue // not in use: read it every IdleInterval only
		}
		seen = admits
		c, ok := g.cfg.Session.Current()
		if !ok {
			continue // the reading goes stale, and admission with it
		}
		if ch == nil || c != conn || ch.IsClosed() {
			if ch != nil {
				old := ch
				go func() { _ = old.Close() }()
			}
			var err error
			if ch, err = c.Channel(); err != nil {
				ch = nil
				continue
			}
			conn = c
		}
		base := q.confirmed.Load()
		sent := time.Now()
		tried = sent
		st, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
		if err != nil {
			if !failing {
				g.cfg.Logger.Warn("cannot read the queue's depth; admitting without it", zap.String("queue", q.name), zap.Error(err))
			}
			failing = true
			continue
		}
		failing = false
		q.reading.Store(&reading{depth: int64(st.Messages), base: base, at: sent})
	}
}
