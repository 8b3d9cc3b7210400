package delay

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// ErrOverflow means a delay queue was full and refused the message.
var ErrOverflow = errors.New("delay queue full")

// DelayedMessage is one message of a batch: where it goes when due, and
// after how long.
type DelayedMessage struct {
	broker.Outgoing
	Delay time.Duration
}

// Publisher publishes delayed messages.
type Publisher struct {
	pub     *broker.Publisher
	plan    *Planner
	d       topology.DelayTopology
	metrics *Metrics
	now     func() time.Time
}

// NewPublisher returns a delay publisher. metrics may be nil.
func NewPublisher(pub *broker.Publisher, plan *Planner, d topology.DelayTopology, metrics *Metrics) *Publisher {
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Publisher{pub: pub, plan: plan, d: d, metrics: metrics, now: time.Now}
}

// Check validates a delay up front (positive, at most DELAY_MAX), for
// callers that answer before publishing.
func (p *Publisher) Check(delay time.Duration) error { return p.plan.Check(delay) }

func (p *Publisher) prepare(m DelayedMessage, now time.Time) (broker.Outgoing, Hop, error) {
	hop, err := p.plan.First(m.Delay)
	if err != nil {
		return broker.Outgoing{}, Hop{}, err
	}
	msg := m.Msg
	h := amqp.Table{}
	maps.Copy(h, msg.Headers)
	h[envelope.HeaderDueAt] = now.Add(m.Delay).UnixMilli()
	h[envelope.HeaderDelay] = m.Delay.Milliseconds()
	h[envelope.HeaderTargetExchange] = m.Exchange
	h[envelope.HeaderTargetKey] = m.RoutingKey
	h[envelope.HeaderHops] = int32(1)
	h[envelope.HeaderPlanLeft] = (m.Delay - hop.TTL).Milliseconds()
	h[envelope.HeaderCC] = []any{p.plan.After(hop, m.Delay-hop.TTL, m.RoutingKey, p.d.RelayKey)}
	msg.Headers = h
	msg.Expiration = ""
	if hop.Precise {
		msg.Expiration = strconv.FormatInt(hop.TTL.Milliseconds(), 10)
	}
	return broker.Outgoing{Exchange: p.d.Exchange, RoutingKey: hop.RoutingKey, Msg: msg}, hop, nil
}

func (p *Publisher) record(hop Hop, delay time.Duration, err error) error {
	if err == nil {
		p.metrics.Published.WithLabelValues(hop.Queue).Inc()
		p.metrics.Requested.Observe(delay.Seconds())
		if p.plan.Final(hop, delay-hop.TTL) {
			p.metrics.Hops.Observe(1)
		}
		return nil
	}
	if errors.Is(err, broker.ErrNacked) {
		p.metrics.Overflow.WithLabelValues(hop.Queue).Inc()
		return fmt.Errorf("%w: %s refused the message (x-max-length %d reached): %w", ErrOverflow, hop.Queue, p.d.MaxLength, err)
	}
	return err
}

// PublishDelayed publishes out to be delivered to its exchange and routing
// key after delay. It returns nil only when the broker confirmed the first
// hop.
func (p *Publisher) PublishDelayed(ctx context.Context, out broker.Outgoing, delay time.Duration) error {
	o, hop, err := p.prepare(DelayedMessage{Outgoing: out, Delay: delay}, p.now())
	if err != nil {
		return err
	}
	return p.record(hop, delay, p.pub.Publish(ctx, o.Exchange, o.RoutingKey, o.Msg))
}

// PublishNow publishes out at once, bypassing the delay queues, and waits
// for the confirm: for a delayed message that must not wait after all (a
// held retry the delay queues refuse, handed back when its consumer stops).
func (p *Publisher) PublishNow(ctx context.Context, out broker.Outgoing) error {
	return p.pub.Publish(ctx, out.Exchange, out.RoutingKey, out.Msg)
}

// PublishDelayedBatch publishes every message pipelined on one channel and
// returns one error per message (nil when confirmed). Messages need
// distinct MessageIds.
func (p *Publisher) PublishDelayedBatch(ctx context.Context, msgs []DelayedMessage) []error {
	errs := make([]error, len(msgs))
	outs := make([]broker.Outgoing, 0, len(msgs))
	hops := make([]Hop, 0, len(msgs))
	idx := make([]int, 0, len(msgs))
	now := p.now()
	for i, m := range msgs {
		o, hop, err := p.prepare(m, now)
		if err != nil {
			errs[i] = err
			continue
		}
		outs, hops, idx = append(outs, o), append(hops, hop), append(idx, i)
	}
	for j, err := range p.pub.PublishBatch(ctx, outs) {
		errs[idx[j]] = p.record(hops[j], msgs[idx[j]].Delay, err)
	}
	return errs
}

// forward strips what RabbitMQ added when the message died in a delay
// queue (and the previous hop's CC key), so the next hop, the target queue
// and later the DLQ tool see only what matters.
func forward(h amqp.Table) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		if k == envelope.HeaderXDeath || k == envelope.HeaderCC || strings.HasPrefix(k, envelope.HeaderFirstDeathPfx) || strings.HasPrefix(k, envelope.HeaderLastDeathPfx) {
			continue
		}
		out[k] = v
	}
	return out
}
