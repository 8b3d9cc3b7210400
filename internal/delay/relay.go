package delay

import (
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
	RetryWait   time.Duration // pause before handing back a message it could not forward; default 500ms
	Grace       time.Duration
}

// Validate fills defaults and checks the configuration.
func (c *RelayConfig) Validate() error {
	if c.Session == nil || c.Publisher == nil || c.Planner == nil {
		return errors.New("relay: Session, Publisher and Planner are required")
	}
	if c.Topology.RelayQueue == "" {
		return errors.New("relay: the topology has no relay queue (round-up mode needs no relay)")
	}
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.Prefetch == 0 {
		c.Prefetch = 64
	}
	if c.RetryWait == 0 {
		c.RetryWait = 500 * time.Millisecond
	}
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
		Concurrency: r.cfg.Concurrency, Prefetch: r.cfg.Prefetch, Grace: r.cfg.Grace,
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
	h := forward(d.Headers)
	hops, _ := envelope.HeaderInt(h, envelope.HeaderHops)
	msg := amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, MessageId: d.MessageId,
		Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
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

// settled records a step's outcome and says what to do with its delivery.
func (r *Relay) settled(s step, id string, err error) broker.Action {
	if err == nil {
		if s.due || s.final {
			r.cfg.Metrics.Hops.Observe(float64(s.hops))
		}
		return broker.Ack
	}
	if errors.Is(err, broker.ErrNacked) && !s.due {
		r.cfg.Metrics.Overflow.WithLabelValues(s.hop.Queue).Inc()
	}
	r.cfg.Logger.Warn("relay: forward failed; handing the message back", zap.String("message_id", id), zap.Bool("due", s.due), zap.String("next", s.hop.Queue), zap.Error(err))
	return broker.Requeue
}

// pause keeps a failing broker from turning the relay into a hot loop.
func (r *Relay) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(r.cfg.RetryWait):
	}
}

// HandleBatch forwards the messages that arrived together, publishing them
// pipelined with one confirm wait: when a tier expires many messages at
// once, the relay's round trips, not the broker, would otherwise decide
// how late the last of them is.
func (r *Relay) HandleBatch(ctx context.Context, ds []*amqp.Delivery) []broker.Action {
	actions := make([]broker.Action, len(ds))
	steps := make([]step, len(ds))
	var outs []broker.Outgoing
	var idx []int
	for i, d := range ds {
		steps[i] = r.plan(d)
		if steps[i].reject {
			actions[i] = broker.Reject
			continue
		}
		outs, idx = append(outs, steps[i].out), append(idx, i)
	}
	failed := false
	for j, err := range r.cfg.Publisher.PublishBatch(ctx, outs) {
		i := idx[j]
		actions[i] = r.settled(steps[i], ds[i].MessageId, err)
		failed = failed || err != nil
	}
	if failed {
		r.pause(ctx)
	}
	return actions
}

// WatchDepth sets the depth gauge of every delay and relay queue every
// interval until ctx ends.
func WatchDepth(ctx context.Context, s *broker.Session, d topology.DelayTopology, m *Metrics, every time.Duration, log *zap.Logger) {
	var names []string
	for _, t := range d.Tiers {
		names = append(names, t.Queue)
	}
	for _, n := range []string{d.PreciseQueue, d.RelayQueue} {
		if n != "" {
			names = append(names, n)
		}
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
