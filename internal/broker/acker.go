package broker

import (
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// acker settles one channel's deliveries, coalescing acks: an ack is owed
// until ackBatch of them wait or ackDelay passes, then one basic.ack with
// multiple=true names the highest acked tag below which every tag is
// settled. Rejects and requeues go out at once, each on its own, before
// their tag can fall under a multiple ack, which only touches tags still
// outstanding. The tag named must itself be outstanding (the broker closes
// the channel on an unknown one), hence the last acked tag, never a
// rejected one. One ack per message cost the broker
// and the client a frame each; the broker's own consume+ack reference runs
// with multiple acks.
//
// Delaying an ack by ackDelay risks nothing but a redelivery if the
// process dies in between, which the consumer's idempotency makes a no-op.
type acker struct {
	ch  *amqp.Channel
	log *zap.Logger

	mu      sync.Mutex
	next    uint64          // lowest tag not yet settled; the broker numbers from 1
	settled map[uint64]bool // settled tags above next: true for an ack
	lastAck uint64          // highest acked tag below next
	owed    int             // acks settled since the last flush
	acked   uint64          // highest tag an ack was sent for
	timer   *time.Timer     // armed while an ack is owed
	closed  bool
}

const (
	ackBatch = 64
	ackDelay = time.Millisecond
)

func newAcker(ch *amqp.Channel, log *zap.Logger) *acker {
	return &acker{ch: ch, log: log, next: 1, settled: map[uint64]bool{}}
}

// ack settles tag; the ack itself may be sent later (flush).
func (a *acker) ack(tag uint64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed || a.ch.IsClosed() {
		// Say so now, as an immediate ack would: this delivery will come
		// back, and the caller logs it.
		return amqp.ErrClosed
	}
	a.owed++
	a.markLocked(tag, true)
	return a.scheduleLocked()
}

// scheduleLocked sends the owed acks now or arms the timer that will; an
// ack waiting behind an earlier tag still in flight is owed until that
// tag settles, whichever way.
func (a *acker) scheduleLocked() error {
	if a.lastAck <= a.acked {
		return nil
	}
	if a.owed >= ackBatch {
		return a.flushLocked()
	}
	if a.timer == nil {
		a.timer = time.AfterFunc(ackDelay, func() {
			if err := a.flush(); err != nil {
				a.log.Warn("could not settle deliveries (a multiple ack); the broker will redeliver them", zap.Error(err))
			}
		})
	}
	return nil
}

// reject and requeue are sent at once.
func (a *acker) reject(tag uint64) error {
	return a.now(tag, func() error { return a.ch.Reject(tag, false) })
}

func (a *acker) requeue(tag uint64) error {
	return a.now(tag, func() error { return a.ch.Nack(tag, false, true) })
}

func (a *acker) now(tag uint64, send func() error) error {
	// Sent before tag is marked: a multiple ack must not overtake it.
	err := send()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.markLocked(tag, false)
	if serr := a.scheduleLocked(); err == nil {
		err = serr
	}
	return err
}

func (a *acker) markLocked(tag uint64, ack bool) {
	if tag < a.next {
		return
	}
	a.settled[tag] = ack
	for {
		isAck, ok := a.settled[a.next]
		if !ok {
			return
		}
		if isAck {
			a.lastAck = a.next
		}
		delete(a.settled, a.next)
		a.next++
	}
}

// flush sends what is owed. Call it before closing the channel.
func (a *acker) flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked()
}

func (a *acker) flushLocked() error {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.lastAck <= a.acked || a.closed {
		return nil
	}
	a.owed = 0
	a.acked = a.lastAck
	return a.ch.Ack(a.lastAck, true)
}

// close stops future flushes (the channel is gone).
func (a *acker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
