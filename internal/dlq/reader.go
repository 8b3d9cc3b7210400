package dlq

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
)

// MissingQueueError: the queue is in the model but not on the broker.
type MissingQueueError struct{ Queue string }

func (e *MissingQueueError) Error() string {
	return fmt.Sprintf("queue %s does not exist: run `topology declare`", e.Queue)
}

// reader holds the deliveries of one DLQ on its own channel.
//
// Every delivery is taken with basic.get without auto-ack and stays
// unacknowledged until the command acts on it (ack) or gives it back
// (release). If the process dies, the broker requeues everything the
// channel held, so reading can duplicate work but never drop a message.
type reader struct {
	ch    *amqp.Channel
	queue string
	// depth is the ready count when reading started; reading stops there,
	// so what dead-letters meanwhile (or comes back from a replay) is not
	// read twice and cannot keep the command reading for ever.
	depth int
	// tags of every delivery taken, in order, and the acked ones; only
	// tags are kept, never bodies, so memory is bounded by the count.
	tags  []uint64
	acked map[uint64]bool
	// fps are the fingerprints of the deliveries held, and removed those
	// of the acked ones, for the removed set (Tool.forget) once closed
	// says the acks took effect.
	fps     map[uint64]string
	removed []string
	closed  bool
	// noSettle: the queue is classic (a DLQ's log), whose returns release
	// waits for with a barrier instead of polling its depth (see barrier).
	noSettle bool
}

// openReader opens a channel and checks the queue with a passive declare,
// which also gives its depth.
func openReader(conn *amqp.Connection, queue string) (*reader, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: open channel: %w", broker.ErrUnavailable, err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		_ = ch.Close() // the broker closed it already on a 404
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return nil, &MissingQueueError{Queue: queue}
		}
		return nil, fmt.Errorf("queue %s: %w", queue, err)
	}
	return &reader{ch: ch, queue: queue, depth: q.Messages, acked: map[uint64]bool{}, fps: map[uint64]string{}}, nil
}

// next takes the next message, or reports false when the queue is empty.
func (r *reader) next() (*amqp.Delivery, bool, error) {
	d, ok, err := r.ch.Get(r.queue, false)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", r.queue, err)
	}
	if !ok {
		return nil, false, nil
	}
	r.tags = append(r.tags, d.DeliveryTag)
	r.fps[d.DeliveryTag] = Fingerprint(&d)
	return &d, true, nil
}

// ack deletes one held message from the queue.
func (r *reader) ack(tag uint64) error {
	if err := r.ch.Ack(tag, false); err != nil {
		return fmt.Errorf("ack in %s: %w", r.queue, err)
	}
	r.acked[tag] = true
	r.removed = append(r.removed, r.fps[tag])
	return nil
}

// moved acks a held message whose copy was put back in the queue
// (passer): gone from the delivery, not from the queue, so not recorded
// as removed.
func (r *reader) moved(tag uint64) error {
	if err := r.ch.Ack(tag, false); err != nil {
		return fmt.Errorf("ack in %s: %w", r.queue, err)
	}
	r.acked[tag] = true
	return nil
}

// held is how many deliveries are taken and not acked.
func (r *reader) held() int { return len(r.tags) - len(r.acked) }

// release gives back every message still held (nack with requeue: a
// classic queue puts them back in their original positions, flagged
// redelivered) and closes the channel. Close waits for the broker's
// close-ok, which comes after it processed every ack and nack sent before,
// so a nil error means the acks took effect.
func (r *reader) release() error {
	var last uint64
	for i := len(r.tags) - 1; i >= 0; i-- {
		if !r.acked[r.tags[i]] {
			last = r.tags[i]
			break
		}
	}
	var errs []error
	if last != 0 {
		// multiple=true covers every unacked delivery up to last; the ones
		// acked in between are no longer outstanding and are not touched.
		if err := r.ch.Nack(last, true, true); err != nil {
			errs = append(errs, fmt.Errorf("give back %d messages to %s: %w (closing the channel gives them back)", r.held(), r.queue, err))
		}
	}
	switch {
	case last == 0 || len(errs) > 0:
	case r.noSettle:
		r.barrier()
	default:
		r.settle(r.depth - len(r.acked))
	}
	if err := r.ch.Close(); err != nil && !errors.Is(err, amqp.ErrClosed) {
		errs = append(errs, fmt.Errorf("close channel of %s: %w", r.queue, err))
	} else if err == nil {
		r.closed = true
	}
	return errors.Join(errs...)
}

// barrier makes the channel's Close return only once the queue has taken
// back what was given back to it. A classic queue takes a nack's requeue
// as a message it handles in turn, and answers a passive declare (a
// prioritised call) before it: right after a read of a log, the next
// reader (the next command, the read's own second pass, the API's stats)
// counted the log short by what was still being requeued and read less of
// it (issue 38: 29 reads of 30, 500 messages, RabbitMQ 3.10). A channel
// with a consumer on the queue tells the queue it closes with a call that
// the queue handles after those returns, and close-ok comes after that
// call; polling the depth instead (settle) is stretched to its timeout by
// a concurrent reader holding part of the log. The consumer's prefetch of
// 1 bounds what it may be sent before the close returns it, also a
// redelivery the log does not count (it is classic: no delivery limit).
// Best effort: if the consumer cannot start, Close still gives back.
func (r *reader) barrier() {
	if err := r.ch.Qos(1, 0, false); err != nil {
		return
	}
	_, _ = r.ch.Consume(r.queue, "", false, false, false, false, nil)
}

// settleTimeout bounds settle; returns normally show up within milliseconds.
const settleTimeout = 5 * time.Second

// settle waits until the queue has at least want ready messages again, or
// settleTimeout passes. A queue applies returns after it answers the nack
// (a quorum queue through its Raft log; a classic one answers a passive
// declare first, see barrier), and a reader starting right after
// this one (the next dlq command, the API's stats) would otherwise see only
// part of the queue, stop at that smaller depth and miss the rest. This is
// best effort: messages arriving meanwhile count too, and a concurrent
// reader can keep the count low until the timeout.
func (r *reader) settle(want int) {
	deadline := time.Now().Add(settleTimeout)
	wait := 2 * time.Millisecond
	for {
		q, err := r.ch.QueueDeclarePassive(r.queue, true, false, false, false, nil)
		if err != nil || q.Messages >= want || time.Now().After(deadline) {
			return
		}
		time.Sleep(wait) // polling the broker for the returns, not guessing a delay
		wait = min(wait*2, 50*time.Millisecond)
	}
}

// scan reads queue up to its depth at the start, or scanMax messages (0 =
// no cap besides the depth), calling visit for each; visit may ack through
// the reader. After the last visit, done (if not nil) runs while the
// messages are still held, for acks that must wait until everything was
// read. scan always releases what is still held, also on error or when
// ctx ends (then it returns ctx's error).
func scan(ctx context.Context, conn *amqp.Connection, queue string, scanMax int, done func(r *reader) error, visit func(r *reader, d *amqp.Delivery) (stop bool, err error)) (r *reader, err error) {
	return scanWith(ctx, conn, queue, scanMax, false, done, visit)
}

// scanWith is scan; noSettle waits for the returns with a barrier instead
// of polling the depth (classic queues: a DLQ's log).
func scanWith(ctx context.Context, conn *amqp.Connection, queue string, scanMax int, noSettle bool, done func(r *reader) error, visit func(r *reader, d *amqp.Delivery) (stop bool, err error)) (r *reader, err error) {
	r, err = openReader(conn, queue)
	if err != nil {
		return nil, err
	}
	r.noSettle = noSettle
	defer func() {
		if rerr := r.release(); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	limit := r.depth
	if scanMax > 0 && scanMax < limit {
		limit = scanMax
	}
	for range limit {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		d, ok, err := r.next()
		if err != nil {
			return r, err
		}
		if !ok {
			break
		}
		stop, err := visit(r, d)
		if err != nil {
			return r, err
		}
		if stop {
			break
		}
	}
	if done != nil {
		return r, done(r)
	}
	return r, nil
}

// read is how many messages scan took.
func (r *reader) read() int { return len(r.tags) }
