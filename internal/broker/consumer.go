package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// Action is what to do with a delivery once its handler returns.
type Action int

// Actions.
const (
	// Ack: done with it (sent, skipped, or a retry was published first).
	Ack Action = iota
	// Reject: reject without requeue, so the broker dead-letters it.
	Reject
	// Requeue: give it back to the queue unprocessed (shutdown, pause).
	Requeue
	// Held: the handler took the delivery over (HoldDelivery) and settles
	// it later, through its Hold (a retry whose publish the broker refuses
	// for now, a WeCom merge buffer, a media download pool); the worker
	// moves on at once. See Hold.
	Held
)

func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Reject:
		return "reject"
	case Requeue:
		return "requeue"
	case Held:
		return "held"
	}
	return fmt.Sprintf("action(%d)", int(a))
}

// Handler processes one delivery and says what to do with it. It must not
// ack or nack the delivery itself. ctx ends only when the consumer's
// shutdown grace period is over, not when shutdown begins, so in-flight
// work can finish.
type Handler func(ctx context.Context, d *amqp.Delivery) Action

// BatchHandler processes the deliveries that were waiting together and
// returns one Action per delivery, in order. It lets a handler pipeline
// its own publishes (one confirm wait for the lot).
type BatchHandler func(ctx context.Context, ds []*amqp.Delivery) []Action

// QueueShare is one of several queues a Consumer's workers share.
type QueueShare struct {
	Name string
	// Weight is the queue's share of the workers' picks while the other
	// queues also have deliveries waiting (smooth weighted round robin).
	// A queue that alone has work gets every pick. Default 1.
	Weight int
	// Prefetch is the unacked deliveries held for this queue; default the
	// config's Prefetch.
	Prefetch int
	// Handler replaces the config's Handler for this queue's deliveries.
	Handler Handler
	// Hold is how many deliveries this queue's handler may hand on to
	// work of its own at once (Held, see HoldDelivery); 0 = none. The
	// queue's prefetch grows by it, so that what is handed on never takes
	// the places its workers need. (A queue without it may still hold a
	// delivery whose retry the broker refuses: that one keeps its place in
	// the window, which is the back-pressure wanted then.)
	Hold int

	roomy bool // Hold was set (Validate folds it into Prefetch)
}

// ConsumerConfig configures a Consumer. Set exactly one of Handler and
// BatchHandler (or a Handler on every share), and one of Queue and Queues.
type ConsumerConfig struct {
	Session *Session
	Queue   string
	// Queues are consumed by one pool of Concurrency workers, each queue
	// with its own prefetch: a worker takes the next delivery by weight
	// from the queues that have one waiting (see QueueShare). Queue is
	// one share of weight 1.
	Queues       []QueueShare
	Handler      Handler
	BatchHandler BatchHandler
	// MaxBatch caps a batch (BatchHandler only); default 100. A worker
	// takes what is already prefetched, never waits to fill a batch.
	MaxBatch    int
	Concurrency int           // handlers running at once; default 8
	Prefetch    int           // unacked deliveries held; default 2×Concurrency
	Grace       time.Duration // how long in-flight handlers may finish on stop; default 30s
	Tag         string        // consumer tag prefix; default msgpulse-<host>-<pid>
	Logger      *zap.Logger
	// OnPanic is called with the recovered value; the delivery is then
	// rejected (dead-lettered), and the worker lives on.
	OnPanic func(d *amqp.Delivery, recovered any)
	// MaxConcurrency lets the pool grow from Concurrency up to it while
	// its workers are all busy (a backlog, or a slow provider: seed 004's
	// balanceConsumers), and shrink back as they idle; 0 = Concurrency,
	// a fixed pool.
	MaxConcurrency int
	// ScaleEvery is how often the pool is resized; default 1s.
	ScaleEvery time.Duration
	// OnWorkers is told the pool's size when it starts and whenever it
	// changes (a gauge).
	OnWorkers func(n int)
	// SubscribeTimeout bounds opening a queue's channel and its
	// basic.consume; default 10s. A node cut off from the leader of a
	// quorum queue answers a consume late or never (or 541 "timed out
	// consuming from quorum queue"), and amqp091-go's Channel and Consume
	// wait without a bound: past it, or on a 541, the consumer leaves the
	// node (Session.Leave) and resumes through the next one.
	SubscribeTimeout time.Duration
	// ProbeEvery is how often an idle consumer checks that its node can
	// still serve it (see watchNode); default 5s, negative never.
	ProbeEvery time.Duration

	queues string // the queue names, for logs (set by Validate)
}

// Validate fills defaults and checks the configuration.
func (c *ConsumerConfig) Validate() error {
	if c.Session == nil || (c.Queue == "") == (len(c.Queues) == 0) {
		return errors.New("consumer: Session and one of Queue or Queues are required")
	}
	if c.Handler != nil && c.BatchHandler != nil {
		return errors.New("consumer: set Handler or BatchHandler, not both")
	}
	c.MaxBatch = cmp.Or(c.MaxBatch, 100)
	c.Concurrency = cmp.Or(c.Concurrency, 8)
	c.MaxConcurrency = cmp.Or(c.MaxConcurrency, c.Concurrency)
	c.ScaleEvery = cmp.Or(c.ScaleEvery, time.Second)
	c.Prefetch = cmp.Or(c.Prefetch, 2*c.MaxConcurrency)
	if c.Concurrency < 1 || c.Concurrency > 10000 || c.Prefetch < 1 || c.Prefetch > 65535 {
		return fmt.Errorf("consumer: Concurrency %d or Prefetch %d out of range", c.Concurrency, c.Prefetch)
	}
	if c.MaxConcurrency < c.Concurrency || c.MaxConcurrency > 10000 || c.ScaleEvery < 10*time.Millisecond {
		return fmt.Errorf("consumer: MaxConcurrency %d below Concurrency %d, or ScaleEvery %s too short", c.MaxConcurrency, c.Concurrency, c.ScaleEvery)
	}
	if c.Queue != "" {
		c.Queues, c.Queue = []QueueShare{{Name: c.Queue}}, "" // Validate may run again
	}
	names := make([]string, 0, len(c.Queues))
	for i := range c.Queues {
		q := &c.Queues[i]
		q.Weight = cmp.Or(q.Weight, 1)
		q.Prefetch = cmp.Or(q.Prefetch, c.Prefetch)
		if q.Hold < 0 || q.Hold > 65535 {
			return fmt.Errorf("consumer: queue %s: Hold %d out of range", q.Name, q.Hold)
		}
		if q.Hold > 0 {
			// Folded into the prefetch once: Validate may run again.
			q.Prefetch, q.Hold, q.roomy = min(q.Prefetch+q.Hold, 65535), 0, true
		}
		switch {
		case q.Name == "":
			return errors.New("consumer: a queue share has no name")
		case q.Weight < 1 || q.Weight > 1000 || q.Prefetch < 1 || q.Prefetch > 65535:
			return fmt.Errorf("consumer: queue %s: Weight %d or Prefetch %d out of range", q.Name, q.Weight, q.Prefetch)
		case q.Handler == nil && c.Handler == nil && c.BatchHandler == nil:
			return fmt.Errorf("consumer: queue %s has no handler", q.Name)
		case q.Handler != nil && c.BatchHandler != nil:
			return fmt.Errorf("consumer: queue %s: a per-queue Handler cannot be mixed with BatchHandler", q.Name)
		}
		names = append(names, q.Name)
	}
	c.queues = strings.Join(names, ",")
	c.Grace = cmp.Or(c.Grace, 30*time.Second)
	c.SubscribeTimeout = cmp.Or(c.SubscribeTimeout, 10*time.Second)
	c.ProbeEvery = cmp.Or(c.ProbeEvery, 5*time.Second)
	if c.SubscribeTimeout < 0 {
		return fmt.Errorf("consumer: SubscribeTimeout %s is negative", c.SubscribeTimeout)
	}
	if c.Tag == "" {
		host, _ := os.Hostname()
		c.Tag = fmt.Sprintf("msgpulse-%s-%d", host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Consumer consumes one queue with manual acknowledgements, re-consuming
// after a lost connection or channel.
type Consumer struct {
	cfg      ConsumerConfig
	inFlight atomic.Int64
	seq      atomic.Int64
	received atomic.Int64 // deliveries a worker took, for watchNode
}

// NewConsumer validates cfg.
func NewConsumer(cfg ConsumerConfig) (*Consumer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Consumer{cfg: cfg}, nil
}

// InFlight returns how many handlers are running, held deliveries
// included.
func (c *Consumer) InFlight() int64 { return c.inFlight.Load() }

// Run consumes until ctx ends, then stops gracefully: it cancels the
// subscription so no new deliveries come, hands back prefetched ones that
// no handler started, lets running handlers finish (up to Grace) and acts
// on their results, and only then closes the channel.
func (c *Consumer) Run(ctx context.Context) error {
	// "queues" on the lines about every queue of the consumer, "queue" on
	// those about one (the acker's among them): a logger carrying either
	// would repeat the key on the others' lines (issue 38: a JSON line
	// with a key twice is refused by Elasticsearch).
	log := c.cfg.Logger
	backoff := 100 * time.Millisecond
	for {
		conn, err := c.cfg.Session.Conn(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil //nolint:nilerr // stopping is not a failure: ctx ended while waiting for a connection
			}
			return err
		}
		started := time.Now()
		err = c.consumeOnce(ctx, conn, log)
		if ctx.Err() != nil {
			return nil //nolint:nilerr // a graceful stop, whatever the last consume reported
		}
		if cannotServe(err) {
			// Re-consuming on the same node would meet the same wall.
			c.cfg.Session.Leave(conn, err.Error())
		}
		if time.Since(started) > 10*time.Second {
			backoff = 100 * time.Millisecond
		}
		log.Warn("consumer stopped; re-consuming", zap.String("queues", c.cfg.queues), zap.Error(err), zap.Duration("in", backoff))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(jitter(backoff)):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func (c *Consumer) consumeOnce(ctx context.Context, conn *amqp.Connection, log *zap.Logger) error {
	// One AMQP channel per queue: delivery tags, and so the acker's
	// multiple acks, are per channel, and a delivery of one queue waiting
	// in its inbox must not hold back the acks (and with them the next
	// deliveries) of another.
	seq := c.seq.Add(1)
	inboxes := make([]*inbox, 0, len(c.cfg.Queues))
	chanLost := make(chan error, len(c.cfg.Queues))
	defer func() {
		for _, in := range inboxes {
			in.acks.close()
			_ = in.ch.Close()
			<-in.watched
		}
	}()
	for _, q := range c.cfg.Queues {
		in, err := c.subscribeWithin(conn, q, fmt.Sprintf("%s-%s-%d", c.cfg.Tag, q.Name, seq), chanLost, log)
		if err != nil {
			return err
		}
		inboxes = append(inboxes, in)
		log.Info("consuming", zap.String("queue", q.Name), zap.String("tag", in.tag), zap.Int("concurrency", c.cfg.Concurrency), zap.Int("prefetch", q.Prefetch), zap.Int("weight", q.Weight))
	}
	pick := newPicker(inboxes)

	// Handlers get a context that outlives ctx by the grace period.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	// Deliveries handlers hold (HoldDelivery) past their return.
	hs := newHolds(log, func() { c.inFlight.Add(-1) })
	defer hs.close() // the channels close with consumeOnce: a Hold still out can no longer settle
	var stopping atomic.Bool
	var wg sync.WaitGroup
	p := newPool(c.cfg.Concurrency, c.cfg.MaxConcurrency)
	defer p.open() // a worker waiting for a permit goes on to find its deliveries closed
	scaleDone := make(chan struct{})
	scaleCtx, stopScale := context.WithCancel(ctx)
	go func() { defer close(scaleDone); c.scale(scaleCtx, p) }()
	defer func() { stopScale(); <-scaleDone }()
	for range c.cfg.MaxConcurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// One slot per worker, in a context made once: a handler that
			// holds its delivery finds it there, and a delivery that is not
			// held costs no allocation.
			slot := &holdSlot{new: hs.new, lost: hs.lost}
			wctx := context.WithValue(hctx, holdKey{}, slot)
			for {
				p.acquire()
				d, in, ok := pick.next()
				if !ok {
					p.release()
					return
				}
				c.received.Add(1)
				if stopping.Load() {
					// Never started: give it back for another consumer.
					_ = in.acks.requeue(d.DeliveryTag)
					p.release()
					continue
				}
				if c.cfg.BatchHandler != nil {
					c.handleBatch(wctx, in.acks, c.gather(d, in.buf))
					p.release()
					continue
				}
				h := in.share.Handler
				if h == nil {
					h = c.cfg.Handler
				}
				if in.share.roomy {
					// A queue with room to hold (Hold) may have its
					// deliveries finished after the handler returned, by
					// work that still has the handler's context: each
					// gets a slot of its own, never the worker's next one.
					own := &holdSlot{new: hs.new, lost: hs.lost, in: in, d: &d}
					c.handle(context.WithValue(hctx, holdKey{}, own), in, &d, h, own)
				} else {
					slot.in, slot.d, slot.hold = in, &d, nil
					c.handle(wctx, in, &d, h, slot)
					slot.in, slot.d, slot.hold = nil, nil, nil
				}
				p.release()
			}
		}()
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	stuck := make(chan error, 1)
	if c.cfg.ProbeEvery > 0 {
		probeCtx, stopProbe := context.WithCancel(ctx)
		probeDone := make(chan struct{})
		go func() { defer close(probeDone); c.watchNode(probeCtx, conn, stuck) }()
		defer func() { stopProbe(); <-probeDone }()
	}

	var lost error
	select {
	case <-ctx.Done():
		stopping.Store(true)
		p.open()
		// Cancel the subscriptions: the broker stops sending, and the
		// library closes deliveries, which ends the workers' loops once
		// their current message is done.
		for _, in := range inboxes {
			if err := in.ch.Cancel(in.tag, false); err != nil {
				log.Warn("cancel consumer", zap.String("queue", in.share.Name), zap.Error(err))
			}
		}
		// Held deliveries get the same grace as running handlers: their
		// publishes may yet work, their merges and downloads finish, and
		// their settles come in before the last acks go out.
		allDone := make(chan struct{})
		go func() { <-workersDone; <-hs.wait(); close(allDone) }()
		select {
		case <-allDone:
		case <-time.After(c.cfg.Grace):
			log.Warn("grace period over; abandoning in-flight handlers (their messages will be redelivered)", zap.String("queues", c.cfg.queues), zap.Int64("in_flight", c.inFlight.Load()))
			hcancel() // held deliveries are settled now, by their owners
			<-allDone
		}
		// The owed acks go out before the channels close; without them
		// every message finished in the last millisecond would come back.
		for _, in := range inboxes {
			if err := in.acks.flush(); err != nil {
				log.Warn("could not send the last acks; those messages will be redelivered", zap.String("queue", in.share.Name), zap.Error(err))
			}
		}
		return nil
	case lost = <-chanLost:
	case lost = <-stuck:
		// Leave first: closing the channels waits for the node's
		// close-ok, which a node that answers nothing never sends.
		c.cfg.Session.Leave(conn, lost.Error())
	case in := <-pick.lost:
		lost = fmt.Errorf("deliveries of %s ended (consumer cancelled by the broker?)", in.share.Name)
	case <-workersDone:
		lost = errors.New("delivery channel closed")
	}
	// A channel is gone, or one of its subscriptions: running handlers
	// cannot be trusted to ack any more; their messages go back to the
	// queue and are redelivered (idempotency makes that safe). Closing
	// every channel ends the other subscriptions too, so the workers run
	// out of deliveries; let them finish their current step and exit.
	stopping.Store(true)
	p.open()
	for _, in := range inboxes {
		_ = in.ch.Close()
	}
	hs.close() // handlers waiting for something stop waiting
	<-workersDone
	return lost
}

// subscribe opens a channel for one queue, with the queue's prefetch, and
// starts consuming it into an inbox. The channel's close is reported on
// lost (nil closes, ours, are not).
func (c *Consumer) subscribe(conn *amqp.Connection, q QueueShare, tag string, lost chan<- error, log *zap.Logger) (*inbox, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	watched := make(chan struct{})
	go func() { // ends when the library closes closed, after the channel closed
		defer close(watched)
		for e := range closed {
			if e != nil {
				select {
				case lost <- fmt.Errorf("channel of %s closed: %w", q.Name, e):
				default:
				}
			}
		}
	}()
	fail := func(err error) (*inbox, error) {
		_ = ch.Close()
		<-watched
		return nil, err
	}
	if err := ch.Qos(q.Prefetch, 0, false); err != nil {
		return fail(fmt.Errorf("qos: %w", err))
	}
	deliveries, err := ch.Consume(q.Name, tag, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return fail(fmt.Errorf("queue %s does not exist (run `topology declare`): %w", q.Name, err))
		}
		return fail(fmt.Errorf("consume %s: %w", q.Name, err))
	}
	in := startInbox(q, tag, deliveries)
	in.ch, in.acks, in.watched = ch, newAcker(ch, log.With(zap.String("queue", q.Name)), q.Prefetch, c.cfg.MaxConcurrency), watched
	return in, nil
}

// gather takes first and whatever else is already waiting in its queue,
// up to MaxBatch.
func (c *Consumer) gather(first amqp.Delivery, deliveries <-chan amqp.Delivery) []*amqp.Delivery {
	batch := []*amqp.Delivery{&first}
	for len(batch) < c.cfg.MaxBatch {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return batch
			}
			batch = append(batch, &d)
		default:
			return batch
		}
	}
	return batch
}

func (c *Consumer) handleBatch(ctx context.Context, acks *acker, ds []*amqp.Delivery) {
	c.inFlight.Add(int64(len(ds)))
	defer c.inFlight.Add(-int64(len(ds)))
	actions := c.safeHandleBatch(ctx, ds)
	for i, d := range ds {
		c.settle(acks, d, actions[i])
	}
}

func (c *Consumer) safeHandleBatch(ctx context.Context, ds []*amqp.Delivery) (actions []Action) {
	defer func() {
		if r := recover(); r != nil {
			// Which delivery caused it is unknown: dead-letter the batch,
			// as a single handler's panic would, rather than requeue a
			// poison message for ever.
			actions = make([]Action, len(ds))
			for i, d := range ds {
				if c.cfg.OnPanic != nil {
					c.cfg.OnPanic(d, r)
				}
				actions[i] = Reject
			}
			return
		}
		if len(actions) != len(ds) { // a broken handler: hand everything back
			actions = make([]Action, len(ds))
			for i := range actions {
				actions[i] = Requeue
			}
		}
	}()
	return c.cfg.BatchHandler(ctx, ds)
}

func (c *Consumer) handle(ctx context.Context, in *inbox, d *amqp.Delivery, h Handler, slot *holdSlot) {
	c.inFlight.Add(1)
	a := c.safeHandle(ctx, d, h)
	switch {
	case a == Held && slot.hold != nil:
		return // its Hold settles it, and ends its count (holds.new)
	case a == Held:
		in.acks.log.Error("handler returned Held without holding the delivery; handing it back", zap.String("message_id", d.MessageId))
		a = Requeue
	case slot.hold != nil:
		// Held, then settled by the handler's own action after all (a
		// panic, say): through the Hold, whose once keeps a delivery its
		// owner settled already from being settled twice (a second ack of
		// a tag closes the channel with every unacked delivery on it).
		slot.hold.Settle(a)
		return
	}
	c.settle(in.acks, d, a)
	c.inFlight.Add(-1)
}

func (c *Consumer) settle(acks *acker, d *amqp.Delivery, action Action) {
	var err error
	switch action {
	case Ack:
		err = acks.ack(d.DeliveryTag)
	case Reject:
		err = acks.reject(d.DeliveryTag)
	default:
		err = acks.requeue(d.DeliveryTag)
	}
	if err != nil {
		acks.log.Warn("could not settle delivery; the broker will redeliver it", zap.String("action", action.String()), zap.String("message_id", d.MessageId), zap.Error(err))
	}
}

func (c *Consumer) safeHandle(ctx context.Context, d *amqp.Delivery, h Handler) (a Action) {
	defer func() {
		if r := recover(); r != nil {
			if c.cfg.OnPanic != nil {
				c.cfg.OnPanic(d, r)
			}
			a = Reject
		}
	}()
	return h(ctx, d)
}
