package delay

import (
	"cmp"
	"context"
	"errors"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// RelayConfig configures the relay.
type RelayConfig struct {
	Session     *broker.Session
	Publisher   *broker.Publisher
	Planner     *Planner
	Topology    topology.DelayTopology
	Metrics     *Metrics
	Logger      *zap.Logger
	Concurrency int           // default 16
	Prefetch    int           // default 64
	RetryWait   time.Duration // first pause before publishing again a message it could not forward; default 500ms
	Grace       time.Duration
	// SubscribeTimeout is broker.ConsumerConfig.SubscribeTimeout
	// (AMQP_SUBSCRIBE_TIMEOUT); 0 is its default.
	SubscribeTimeout time.Duration
}

// Validate fills defaults and checks the configuration.
func (c *RelayConfig) Validate() error {
	if c.Session == nil || c.Publisher == nil || c.Planner == nil {
		return errors.New("relay: Session, Publisher and Planner are required")
	}
	if c.Topology.RelayQueue == "" {
		return errors.New("relay: the topology has no relay queue (round-up mode needs no relay)")
	}
	c.Concurrency = cmp.Or(c.Concurrency, 16)
	c.Prefetch = cmp.Or(c.Prefetch, 64)
	c.RetryWait = cmp.Or(c.RetryWait, 500*time.Millisecond)
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Relay moves messages between delay hops: it consumes the relay queue,
// and for each message either publishes it to its target (when due) or to
// the next hop planned from the time left. It publishes with a confirm and
// only then acks, so each step is at-least-once.
type Relay struct {
	cfg RelayConfig
	now func() time.Time
}

// NewRelay validates cfg.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Relay{cfg: cfg, now: time.Now}, nil
}

// Run relays until ctx ends, then stops gracefully.
func (r *Relay) Run(ctx context.Context) error {
	c, err := broker.NewConsumer(broker.ConsumerConfig{
		Session: r.cfg.Session, Queue: r.cfg.Topology.RelayQueue, BatchHandler: r.HandleBatch,
		Concurrency: r.cfg.Concurrency, Prefetch: r.cfg.Prefetch, Grace: r.cfg.Grace, SubscribeTimeout: r.cfg.SubscribeTimeout,
		Tag: "msgpulse-relay", Logger: r.cfg.Logger.Named("relay"),
	})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// step is where one relayed message goes next.
type step struct {
	out    broker.Outgoing
	due    bool // published to the target now
	final  bool // the last hop: the broker delivers it at expiry
	hops   int64
	hop    Hop
	reject bool
}

func (r *Relay) plan(d *amqp.Delivery) step {
	due, okDue := envelope.HeaderTime(d.Headers, envelope.HeaderDueAt)
	exchange, okEx := d.Headers[envelope.HeaderTargetExchange].(string)
	key, okKey := d.Headers[envelope.HeaderTargetKey].(string)
	if !okDue || !okEx || !okKey {
		// Not ours to guess: the relay's dead-letter queue keeps it.
		r.cfg.Logger.Error("relay: message without due time or target; dead-lettering", zap.String("message_id", d.MessageId))
		return step{reject: true}
	}
	msg := relayCopy(d)
	h := msg.Headers
	hops, _ := envelope.HeaderInt(h, envelope.HeaderHops)
	left := due.Sub(r.now())
	var lag time.Duration
	if planned, ok := envelope.HeaderInt(d.Headers, envelope.HeaderPlanLeft); ok {
		lag = time.Duration(planned)*time.Millisecond - left
	}
	hop, isDue := r.cfg.Planner.Next(left, lag)
	if isDue {
		return step{out: broker.Outgoing{Exchange: exchange, RoutingKey: key, Msg: msg}, due: true, hops: hops}
	}
	h[envelope.HeaderHops] = int32(hops + 1)
	h[envelope.HeaderPlanLeft] = (left - hop.TTL).Milliseconds()
	h[envelope.HeaderCC] = []any{r.cfg.Planner.After(hop, left-hop.TTL, key, r.cfg.Topology.RelayKey)}
	if hop.Precise {
		msg.Expiration = strconv.FormatInt(hop.TTL.Milliseconds(), 10)
	}
	return step{out: broker.Outgoing{Exchange: r.cfg.Topology.Exchange, RoutingKey: hop.RoutingKey, Msg: msg}, hops: hops + 1, hop: hop,
		final: r.cfg.Planner.Final(hop, left-hop.TTL)}
}

// relayCopy is d as the relay publishes it on: its properties and body,
// and the headers forward keeps.
func relayCopy(d *amqp.Delivery) amqp.Publishing {
	return amqp.Publishing{
		Headers: forward(d.Headers), ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
}

// settled records a step's outcome: whether its delivery can be acked.
func (r *Relay) settled(s step, id string, err error, tries int) bool {
	if err == nil {
		if s.due || s.final {
			r.cfg.Metrics.Hops.Observe(float64(s.hops))
		}
		return true
	}
	if errors.Is(err, broker.ErrNacked) && !s.due {
		r.cfg.Metrics.Overflow.WithLabelValues(s.hop.Queue).Inc()
	}
	if tries == 1 || tries%20 == 0 {
		r.cfg.Logger.Warn("relay: forward failed; holding the message and trying again", zap.String("message_id", id), zap.Bool("due", s.due),
			zap.String("next", s.hop.Queue), zap.Int("tries", tries), zap.Error(err))
	}
	return false
}

// HandleBatch forwards the messages that arrived together, publishing them
// pipelined with one confirm wait: when a tier expires many messages at
// once, the relay's round trips, not the broker, would otherwise decide
// how late the last of them is.
//
// What the broker refuses or blocks (a full delay queue or target, an
// alarm) is held and published again, re-planned from its due time, from
// RetryWait doubling to 5 s between tries, until it works: handing it
// back with requeue every RetryWait, as the relay did, spent the relay
// queue's delivery limit on a quorum queue of RabbitMQ 4.x (20 returns)
// and had the broker dead-letter a delayed message for a fault that
// heals. The relay's workers wait meanwhile, which holds back the relay
// queue on this consumer and nothing else. When the consumer stops
// (ctx ends after its grace period) a held message goes back to the relay
// queue as a fresh copy (handBack).
func (r *Relay) HandleBatch(ctx context.Context, ds []*amqp.Delivery) []broker.Action {
	actions := make([]broker.Action, len(ds))
	pending := make([]int, 0, len(ds))
	for i := range ds {
		pending = append(pending, i)
	}
	wait := r.cfg.RetryWait
	for tries := 1; ; tries++ {
		steps := make([]step, 0, len(pending))
		outs := make([]broker.Outgoing, 0, len(pending))
		idx := make([]int, 0, len(pending))
		for _, i := range pending {
			s := r.plan(ds[i]) // again on every try: the time left shrinks
			if s.reject {
				actions[i] = broker.Reject
				continue
			}
			steps, outs, idx = append(steps, s), append(outs, s.out), append(idx, i)
		}
		pending = pending[:0]
		for j, err := range r.cfg.Publisher.PublishBatch(ctx, outs) {
			if r.settled(steps[j], ds[idx[j]].MessageId, err, tries) {
				actions[idx[j]] = broker.Ack
			} else {
				pending = append(pending, idx[j])
			}
		}
		if len(pending) == 0 {
			return actions
		}
		select {
		case <-broker.SessionLost(ctx): // the broker has them back: any action is lost
			for _, i := range pending {
				actions[i] = broker.Requeue
			}
			return actions
		case <-ctx.Done():
			for _, i := range pending {
				actions[i] = r.handBack(ds[i])
			}
			return actions
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// handBack puts a held message back in the relay queue as a fresh copy
// (the default exchange routes to the queue its key names) and acks the
// delivery, when the relay stops: a stopping consumer hands an unacked
// delivery back, which counts toward a quorum queue's delivery limit. The
// copy is re-planned from its due time when it is relayed again. Only if
// that publish fails too is the delivery handed back.
func (r *Relay) handBack(d *amqp.Delivery) broker.Action {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := r.cfg.Publisher.Publish(ctx, "", r.cfg.Topology.RelayQueue, relayCopy(d)); err != nil {
		r.cfg.Logger.Warn("relay: stopping: could not put the held message back in the relay queue; handing it back", zap.String("message_id", d.MessageId), zap.Error(err))
		return broker.Requeue
	}
	return broker.Ack
}

// WatchDepth sets the depth gauge of every delay and relay queue every
// interval until ctx ends.
func WatchDepth(ctx context.Context, s *broker.Session, d topology.DelayTopology, m *Metrics, every time.Duration, log *zap.Logger) {
	names := d.Queues()
	if d.RelayQueue != "" {
		names = append(names, d.RelayQueue)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if conn, ok := s.Current(); ok {
			states, err := broker.Inspect(conn, names)
			if err != nil {
				log.Debug("delay depth", zap.Error(err))
			}
			for _, st := range states {
				m.Depth.WithLabelValues(st.Name).Set(float64(st.Messages))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
