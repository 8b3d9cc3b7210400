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
// A multiple ack cannot pass a delivery still being handled. While one is
// (a send that hangs until SEND_TIMEOUT), the acks settled after it would
// all wait, each holding a place in the prefetch window, until the window
// is full and the broker sends nothing more: one slow message would stop
// its queue's consumer. So once the acks waiting behind the lowest
// unsettled delivery would take places the workers need (heldMax: the
// window beyond one delivery per worker, at least an eighth of it), or it
// has been the lowest for stuckAfter, they go out one by one (multiple=
// false) at the next flush, and so does every ack settled behind it after
// that, until it settles; those tags are then no longer outstanding, and a
// later multiple ack names only a tag that still is.
//
// Places in the window, not a time, are the main test, because sends
// that take long take long together and finish in no particular order.
// With a provider answering in 200 ms and 2,048 sends in flight, a
// saturated machine handles the answers of a whole wave in whatever order
// their goroutines run, and hundreds of acks at a time waited more than
// 50 ms behind an earlier one. A fixed 50 ms (before) sent half of that
// run's 40,960 acks one by one, a frame and a round of the broker's work
// each; counting places sent none, the broker's CPU per message fell by
// half and alternating runs went from ~3,100 to ~3,800 msg/s. stuckAfter
// only bounds how long an ack waits when too few are held to matter.
//
// Delaying an ack, by ackDelay or behind a late delivery, risks nothing
// but a redelivery if the process dies in between, which the consumer's
// idempotency makes a no-op.
type acker struct {
	ch  settler
	log *zap.Logger
	// heldMax is how many acks may wait behind the lowest unsettled
	// delivery before they go out one by one (newAcker).
	heldMax int

	mu   sync.Mutex
	next uint64 // lowest tag not yet settled; the broker numbers from 1
	// nextSince is when next became the lowest unsettled tag.
	nextSince time.Time
	// settled are the tags settled above next: true for an ack not yet
	// sent, false for one that is no longer outstanding (rejected,
	// requeued, or acked on its own).
	settled map[uint64]bool
	held    int    // acks owed in settled: waiting behind next
	lastAck uint64 // highest acked tag below next
	owed    int    // acks settled since the last flush
	acked   uint64 // highest tag an ack was sent for
	timer   *time.Timer
	timerAt time.Time // when timer fires
	closed  bool
}

const (
	ackBatch = 64
	ackDelay = time.Millisecond
	// heldShare: acks waiting behind one delivery may always hold
	// 1/heldShare of the prefetch window, even one no larger than the
	// workers, so that a burst settled at once in any order still rides a
	// multiple ack.
	heldShare = 8
	// stuckAfter: a delivery that has been the lowest unsettled one for
	// longer is slow, not merely out of order, and the acks behind it stop
	// waiting for it even when few. Far above the jitter of sends
	// completing together, far below a hung send's SEND_TIMEOUT.
	stuckAfter = time.Second
)

// settler is what the acker uses of an *amqp.Channel.
type settler interface {
	Ack(tag uint64, multiple bool) error
	Nack(tag uint64, multiple, requeue bool) error
	Reject(tag uint64, requeue bool) error
	IsClosed() bool
}

// newAcker settles the deliveries of ch, whose prefetch window is window,
// handled by up to workers at a time.
func newAcker(ch settler, log *zap.Logger, window, workers int) *acker {
	return &acker{ch: ch, log: log, heldMax: max(window-workers, window/heldShare, 1), next: 1, nextSince: time.Now(), settled: map[uint64]bool{}}
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
// tag settles, or has been out for stuckAfter.
func (a *acker) scheduleLocked() error {
	if a.lastAck <= a.acked && a.held == 0 {
		return nil
	}
	if a.owed >= ackBatch {
		return a.flushLocked(false)
	}
	a.armLocked()
	return nil
}

// armLocked starts the flush timer if none runs: in ackDelay, or, when the
// only acks owed wait behind a delivery not yet stuck and hold too few
// places to matter, when it will be.
func (a *acker) armLocked() {
	d := ackDelay
	if a.lastAck <= a.acked && a.held < a.heldMax {
		d = max(d, stuckAfter-time.Since(a.nextSince))
	}
	at := time.Now().Add(d)
	if a.timer != nil {
		// One armed for a stuck check must not hold back a multiple ack
		// owed since: move it earlier. One that already fired is
		// flushing, and takes that ack with it.
		if !at.Before(a.timerAt) || !a.timer.Stop() {
			return
		}
	}
	a.timerAt = at
	a.timer = time.AfterFunc(d, func() {
		a.mu.Lock()
		err := a.flushLocked(false)
		a.mu.Unlock()
		if err != nil {
			a.log.Warn("could not settle deliveries (an ack); the broker will redeliver them", zap.Error(err))
		}
	})
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
	if ack {
		a.held++
	}
	for {
		owed, ok := a.settled[a.next]
		if !ok {
			return
		}
		if owed {
			a.lastAck = a.next
			a.held--
		}
		delete(a.settled, a.next)
		a.next++
		a.nextSince = time.Now()
	}
}

// flush sends every ack owed, those waiting behind a delivery still out
// included. Call it before closing the channel.
func (a *acker) flush() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.flushLocked(true)
}

// flushLocked sends the multiple ack owed, and the acks waiting behind
// next when next is stuck, or when all (the last flush).
func (a *acker) flushLocked(all bool) error {
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	if a.closed {
		return nil
	}
	var err error
	if a.lastAck > a.acked {
		a.owed = 0
		a.acked = a.lastAck
		err = a.ch.Ack(a.lastAck, true)
	}
	if a.held == 0 {
		return err
	}
	if !all && a.held < a.heldMax && time.Since(a.nextSince) < stuckAfter {
		a.armLocked() // they wait for next a while longer
		return err
	}
	// next is stuck, or what waits behind it holds too much of the window
	// (or this is the last flush): that goes now, one by one.
	a.owed = 0
	for tag, owed := range a.settled {
		if !owed {
			continue
		}
		a.settled[tag] = false
		a.held--
		if aerr := a.ch.Ack(tag, false); err == nil {
			err = aerr
		}
	}
	return err
}

// close stops future flushes (the channel is gone). Acks still owed
// cannot go out on another channel: their deliveries come back, and
// close says so, since nothing else will (their ack calls returned nil).
func (a *acker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.closed && (a.lastAck > a.acked || a.held > 0) {
		// owed counts the acks since the last flush, held those waiting
		// behind next; a flush that sent the multiple ack but kept the
		// held ones reset owed, so the larger is a floor, not a count.
		a.log.Warn("could not settle deliveries (acks owed when the channel closed); the broker will redeliver them", zap.Int("acks_owed", max(a.owed, a.held)))
	}
	a.closed = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
