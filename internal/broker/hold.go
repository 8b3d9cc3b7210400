package broker

import (
	"context"
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// A Hold is a delivery its handler keeps past its return (the handler
// returned Held): settled later, by whatever goroutine the handler
// started, while the worker goes on to the next delivery.
//
// It is for a delivery whose next step is a publish that fails for a while
// (a delay queue that refuses publishes, a broker alarm that blocks them):
// handing it back with requeue until the publish works is a loop that, on a
// RabbitMQ 4.x quorum queue, spends the delivery limit (20 by default; every
// return counts before 4.3) and has the broker dead-letter a message for a
// fault that heals by itself. Held, it stays unacknowledged, in its queue's
// prefetch window, which each queue of a Consumer has on a channel of its
// own: held deliveries of one queue never take the window of another.
//
// A Hold ends one of three ways: Settle, by its owner; its channel lost
// (Lost closes; the broker has the delivery again and Settle does nothing);
// or the consumer's stop, which waits for it for the rest of the grace
// period and then cancels the handler context, after which its owner must
// settle at once.
type Hold struct {
	acks  *acker
	d     *amqp.Delivery
	queue string
	lost  <-chan struct{}
	log   *zap.Logger
	done  func()
	once  sync.Once
}

// Queue is the queue the delivery came from.
func (h *Hold) Queue() string { return h.queue }

// Lost is closed once the delivery's channel is gone (a lost connection, a
// consumer that restarts): the broker redelivers it, and Settle can no
// longer act on it.
func (h *Hold) Lost() <-chan struct{} { return h.lost }

// Settle acts on the delivery (Ack, Reject or Requeue); only the first call
// counts.
func (h *Hold) Settle(a Action) {
	h.once.Do(func() {
		defer h.done()
		var err error
		switch a {
		case Ack:
			err = h.acks.ack(h.d.DeliveryTag)
		case Reject:
			err = h.acks.reject(h.d.DeliveryTag)
		default:
			err = h.acks.requeue(h.d.DeliveryTag)
		}
		if err != nil {
			select {
			case <-h.lost: // expected: the broker has it back
			default:
				h.log.Warn("could not settle a held delivery; the broker will redeliver it", zap.String("action", a.String()), zap.String("message_id", h.d.MessageId), zap.Error(err))
			}
		}
	})
}

// holdKey finds a worker's holdSlot in the handler's context.
type holdKey struct{}

// holdSlot is a worker's: the delivery it is handling, which HoldDelivery
// turns into a Hold, and its session's lost channel (see SessionLost).
type holdSlot struct {
	lost <-chan struct{}
	in   *inbox
	d    *amqp.Delivery
	hold *Hold
	// new registers a Hold with its consumer session (counted until it is
	// settled, told when the channel is lost).
	new func(*inbox, *amqp.Delivery) *Hold
}

// HoldDelivery takes over the delivery being handled under ctx: the
// handler then returns Held and settles it through the Hold. It returns
// nil where no Consumer handles the delivery (a BatchHandler, a handler
// called directly): the caller must then settle by returning an action.
func HoldDelivery(ctx context.Context) *Hold {
	s, ok := ctx.Value(holdKey{}).(*holdSlot)
	if !ok || s == nil || s.d == nil {
		return nil
	}
	if s.hold == nil {
		s.hold = s.new(s.in, s.d)
	}
	return s.hold
}

// SessionLost is closed once the channels of the consumer session handling
// under ctx are gone (nil outside a Consumer): a handler that waits for
// something (a publish it tries again) stops, since the broker has its
// deliveries back and any settlement is lost.
func SessionLost(ctx context.Context) <-chan struct{} {
	if s, ok := ctx.Value(holdKey{}).(*holdSlot); ok && s != nil {
		return s.lost
	}
	return nil
}

// holds counts one consumer session's Holds.
type holds struct {
	wg     sync.WaitGroup
	lost   chan struct{} // closed when the session's channels are gone
	closer sync.Once
	log    *zap.Logger
	ended  func() // a Hold settled (the consumer's in-flight count)
}

// close says the session's channels are gone.
func (hs *holds) close() { hs.closer.Do(func() { close(hs.lost) }) }

func newHolds(log *zap.Logger, ended func()) *holds {
	return &holds{lost: make(chan struct{}), log: log, ended: ended}
}

func (hs *holds) new(in *inbox, d *amqp.Delivery) *Hold {
	hs.wg.Add(1)
	return &Hold{acks: in.acks, d: d, queue: in.share.Name, lost: hs.lost, log: hs.log, done: func() { hs.ended(); hs.wg.Done() }}
}

// wait returns a channel closed once every Hold was settled.
func (hs *holds) wait() <-chan struct{} {
	c := make(chan struct{})
	go func() { hs.wg.Wait(); close(c) }()
	return c
}
