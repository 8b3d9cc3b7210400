package dlq

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
)

// Fingerprint identifies one dead-lettering of a message: the same in the
// DLQ and in its log, different for the same message after a replay (its
// x-replay-count grows) or another death (x-death counts and times). It
// hashes what the broker copies unchanged into both queues, and none of
// what a delivery adds (x-delivery-count, x-stream-offset, redelivered).
func Fingerprint(d *amqp.Delivery) string {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	num := func(v int64) { field(binary.BigEndian.AppendUint64(nil, uint64(v))) }
	field([]byte(d.MessageId))
	num(d.Timestamp.Unix())
	field(d.Body)
	replays, _ := envelope.HeaderInt(d.Headers, envelope.HeaderReplays)
	num(replays)
	for _, dd := range envelope.Deaths(d.Headers) {
		field([]byte(dd.Reason))
		field([]byte(dd.Queue))
		num(dd.Count)
		if dd.Time != nil {
			num(dd.Time.Unix())
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// logView is what a log read saw.
type logView struct {
	// Depth is the DLQ's depth (passive declare).
	Depth int
	// Read is how many log messages were read; Removed of them were
	// removed by replay or purge (the removed set).
	Read, Removed int
	// Present is how many log entries are taken to be in the DLQ: the
	// last Depth of those not removed. Gone is how many were skipped at
	// the front because the DLQ holds fewer (removed without the set
	// knowing: Redis down during a replay, a purge from the management
	// UI, a quorum DLQ's delivery limit). Unlogged is how many of the
	// DLQ's messages the log does not have (older than its retention, or
	// dead before the log existed).
	Present, Gone, Unlogged int
}

// readLog reads the log of dlq and calls visit for each dead letter in it
// that is still in the DLQ, in order. It touches the DLQ itself only with
// a passive declare for its depth, so it spends none of its delivery
// attempts: the log is a classic queue (no delivery limit), read with
// basic.get and given back, like the DLQ was read before the log existed.
//
// The log holds every dead letter of its retention; those replay and purge
// removed are in the removed set (Redis): left out, and their copies
// deleted from the log as they are met. If the DLQ still
// holds fewer than remain, the difference went without the set knowing,
// and the oldest are taken to be the ones gone (a DLQ is FIFO): visit
// sees them with present=false. The correction is by count only: a dead
// letter gone behind the tool's back and one the log never had (hand-
// published into the DLQ, or past the log's retention) cancel out, and
// the gone one is listed instead of the other until the latter is handled.
//
// It reads the log twice: once for fingerprints only (memory bounded by
// the count, not the bodies), to find what is gone, then to visit.
// Concurrent readers, replays or dead-lettering can make one read's
// counts off by what changed meanwhile; the next read is right again.
// readMatching is readLog over the messages still present in the log that
// sel matches, each inspected once. read, when not nil, counts every
// message present, matched or not.
func (t *Tool) readMatching(ctx context.Context, dlq string, sel selector, read *int, each func(in inspected, d *amqp.Delivery) error) (logView, error) {
	return t.readLog(ctx, dlq, func(d *amqp.Delivery, present bool) error {
		if !present {
			return nil
		}
		if read != nil {
			*read++
		}
		in := t.x.inspect(ctx, dlq, d)
		if !sel.match(&in.Entry, taskID(in)) {
			return nil
		}
		return each(in, d)
	})
}

func (t *Tool) readLog(ctx context.Context, dlq string, visit func(d *amqp.Delivery, present bool) error) (logView, error) {
	var v logView
	lq, ok := t.model.LogOf(dlq)
	if !ok {
		return v, fmt.Errorf("%s has no dead-letter log in the topology model", dlq)
	}
	removed := map[string]bool{}
	if t.st != nil {
		rctx, cancel := context.WithTimeout(ctx, t.x.timeout)
		r, err := t.st.Removed(rctx, dlq)
		cancel()
		if err != nil {
			t.warn(fmt.Sprintf("removed dead letters unknown (%v): what replay or purge took out of %s may still be listed", err, dlq))
		} else {
			removed = r
		}
	}
	// The log's depth is read before the DLQ's: a dead letter arriving
	// between the two is then counted in the DLQ but not read (Unlogged,
	// harmless) rather than read but not counted (which would make an
	// older one look gone).
	var fps []string
	depthRead := false
	// The log is classic: its returns are waited for with a barrier, not
	// by polling its depth (which a concurrent reader, holding part of it,
	// would stretch to the timeout).
	_, err := scanWith(ctx, t.conn, lq.Name, 0, true, nil, func(r *reader, d *amqp.Delivery) (bool, error) {
		if !depthRead {
			depth, err := t.depth(dlq)
			if err != nil {
				return true, err
			}
			v.Depth, depthRead = depth, true
		}
		v.Read++
		f := Fingerprint(d)
		if removed[f] {
			// The dead letter is gone from the DLQ for good, so its copy
			// can go too: the log then stays about the DLQ's size however
			// much was replayed, and reads stay cheap.
			v.Removed++
			return false, r.ack(d.DeliveryTag)
		}
		fps = append(fps, f)
		return false, nil
	})
	if err != nil {
		return v, err
	}
	if !depthRead {
		if v.Depth, err = t.depth(dlq); err != nil {
			return v, err
		}
	}
	v.Gone = max(0, len(fps)-v.Depth)
	v.Present = len(fps) - v.Gone
	v.Unlogged = max(0, v.Depth-len(fps))
	if visit == nil || v.Present == 0 {
		return v, nil
	}
	// Presence goes by fingerprint, not position: the log's head may
	// expire between the two reads.
	present := map[string]int{}
	for _, f := range fps[v.Gone:] {
		present[f]++
	}
	_, err = scanWith(ctx, t.conn, lq.Name, v.Read, true, nil, func(_ *reader, d *amqp.Delivery) (bool, error) {
		f := Fingerprint(d)
		if removed[f] {
			return false, nil
		}
		in := present[f] > 0
		if in {
			present[f]--
		}
		if err := visit(d, in); err != nil {
			if errors.Is(err, errStop) {
				return true, nil
			}
			return true, err
		}
		return false, nil
	})
	return v, err
}

// errStop ends a log read early (visit asked to stop).
var errStop = errors.New("stop")

// depth is a queue's ready count, from a passive declare.
func (t *Tool) depth(queue string) (int, error) {
	ch, err := t.conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("%w: open channel: %w", broker.ErrUnavailable, err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			return 0, &MissingQueueError{Queue: queue}
		}
		return 0, fmt.Errorf("queue %s: %w", queue, err)
	}
	_ = ch.Close()
	return q.Messages, nil
}

// forget records what a replay or purge removed from dlq, so that reads of
// its log leave it out. Only a reader whose channel closed cleanly has its
// acks applied; anything else is still in the DLQ.
func (t *Tool) forget(ctx context.Context, dlq string, r *reader) {
	if r == nil || !r.closed || len(r.removed) == 0 {
		return
	}
	if t.st == nil {
		t.warn(fmt.Sprintf("no Redis: the %d dead letters removed from %s are not recorded, so lists may show them until the log forgets them", len(r.removed), dlq))
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.x.timeout)
	defer cancel()
	if err := t.st.MarkRemoved(ctx, dlq, r.removed, t.model.DeadLetterLog.MaxAge); err != nil {
		t.warn(fmt.Sprintf("%v: lists may show them until the log forgets them", err))
	}
}
