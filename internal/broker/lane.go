package broker

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// A lane is a confirm channel shared by concurrent publishes: up to Window
// messages are in flight on it at once, and the broker confirms them in
// batches. One channel per publish in flight costs the broker a channel
// process and a confirm frame per message; measured here, sharing four
// lanes cut the broker's CPU per confirmed publish by a third and the
// client's by almost half.
//
// What makes sharing safe is attributing a basic.return to its message:
// lanes only carry messages with a MessageId, and the library hands a
// return to the returns channel before it processes the ack that follows
// it, so once a publish's confirm is in, its return (if any) is already in
// the channel's buffer or in the returned map.
//
// And what keeps one message's fate from becoming another's is how a lane
// ends. The broker confirms each delivery tag on its own (a nack names the
// tags it refuses), so a nack for one message says nothing about the
// others in flight. Closing the channel would: the library nacks every
// outstanding confirm when its channel closes. So a lane that must stop
// (it got a nack, or a publish on it failed) is only retired: no new
// publish takes it, and it is closed once the last publish in flight on it
// has its own ack or nack (inflight reaches 0). See retire for the one
// case where it closes with confirms still outstanding.
type lane struct {
	*pubChannel
	window  chan struct{}
	retired atomic.Bool
	// inflight counts the window's taken slots; the publish that frees
	// the last one on a retired lane closes it.
	inflight atomic.Int64
	closing  sync.Once

	mu       sync.Mutex
	returned map[string]amqp.Return
}

// takeReturn moves what the library delivered into the map and removes
// id's return, if there is one.
func (l *lane) takeReturn(id string) (amqp.Return, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		select {
		case r, ok := <-l.returns:
			if ok {
				l.returned[r.MessageId] = r
				continue
			}
		default:
		}
		break
	}
	r, ok := l.returned[id]
	delete(l.returned, id)
	return r, ok
}

// laneSlot holds one lane; its lock is a channel so that a publish waiting
// for another to open the lane still honours its own deadline.
type laneSlot struct {
	lock chan struct{}
	l    *lane
}

// A lanePool is the lanes of one destination (exchange and routing key).
// Destinations never share a channel: a full reject-publish queue nacks
// and retires its own lanes only, and a slow one (a queue process that
// holds the channel under flow control) delays only its own publishes. So
// a code's level queue, whose routing key the topology model gives, never
// shares a channel with the normal or low queue of the same channel.
//
// A destination starts on one lane and opens another (up to Lanes) each
// time more than laneGrowAt publishes per open lane are in flight on it:
// a quiet destination (a delay tier, the low queue) costs one channel,
// and a busy one spreads over as many as before lanes were per
// destination.
//
// Why 64: every extra lane is a channel process in the broker, and the
// broker confirms each lane's messages in batches of its own, so the same
// traffic split over more lanes costs it more. The API at 64 requests in
// flight ran 4 lanes with a threshold of 8; with one lane the broker spent
// about a tenth less CPU per publish and the API's closed-loop throughput
// rose 4-8% (alternating runs, docs/performance.md). One channel
// confirms over 20,000 publishes a second here, far above what one API
// process publishes, so a second lane is only worth its cost past 64 in
// flight (a quarter of the default window).
type lanePool struct {
	slots    []*laneSlot
	next     atomic.Uint32
	active   atomic.Int32 // slots in use, from the first
	inflight atomic.Int64 // publishes holding a window slot on any lane of the pool
}

const laneGrowAt = 64

func newLanePool(n int) *lanePool {
	lp := &lanePool{slots: make([]*laneSlot, n)}
	for i := range lp.slots {
		lp.slots[i] = &laneSlot{lock: make(chan struct{}, 1)}
	}
	lp.active.Store(1)
	return lp
}

type destination struct{ exchange, key string }

// pool returns the lanes of (exchange, key), made on first use; a
// destination is a fixed name from the topology model, so there are few.
func (p *Publisher) pool(exchange, key string) *lanePool {
	d := destination{exchange, key}
	if lp, ok := p.lanes.Load(d); ok {
		return lp.(*lanePool) //nolint:forcetypeassert // the map holds only pools
	}
	lp, _ := p.lanes.LoadOrStore(d, newLanePool(p.cfg.Lanes))
	return lp.(*lanePool) //nolint:forcetypeassert // the map holds only pools
}

// take returns a live lane of lp with a window slot held (inflight
// counted); the caller gives it back with done.
func (p *Publisher) take(ctx context.Context, conn *amqp.Connection, lp *lanePool) (*lane, error) {
	for {
		l, err := p.pickLane(ctx, conn, lp)
		if err != nil {
			return nil, err
		}
		select {
		case l.window <- struct{}{}:
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %d publishes already in flight on the channel: %w", ErrConfirmTimeout, p.cfg.Window, ctx.Err())
		}
		// Counted before retired is read, and retire sets retired before
		// it reads the count: either this publish sees the lane retired
		// and leaves it, or retire sees it in flight and leaves the close
		// to the last done.
		l.inflight.Add(1)
		if !l.retired.Load() {
			if n := lp.active.Load(); lp.inflight.Add(1) > int64(n)*laneGrowAt && int(n) < len(lp.slots) {
				lp.active.CompareAndSwap(n, n+1)
			}
			return l, nil
		}
		p.done(l)
	}
}

// finish is done for a publish that take returned.
func (p *Publisher) finish(lp *lanePool, l *lane) {
	lp.inflight.Add(-1)
	p.done(l)
}

// done frees a window slot of l; the last one out of a retired lane closes
// it.
func (p *Publisher) done(l *lane) {
	<-l.window
	if l.inflight.Add(-1) == 0 && l.retired.Load() {
		l.close()
	}
}

func (p *Publisher) pickLane(ctx context.Context, conn *amqp.Connection, lp *lanePool) (*lane, error) {
	s := lp.slots[lp.next.Add(1)%uint32(lp.active.Load())] //nolint:gosec // active is 1..64
	select {
	case s.lock <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: opening a channel: %w", ErrConfirmTimeout, ctx.Err())
	}
	defer func() { <-s.lock }()
	if l := s.l; l != nil && l.conn == conn && !l.retired.Load() && !l.ch.IsClosed() {
		return l, nil
	}
	if s.l != nil {
		p.retire(s.l)
		s.l = nil
	}
	l, err := p.openLane(ctx, conn)
	if err != nil {
		return nil, err
	}
	s.l = l
	return l, nil
}

// openLane opens the lane's confirm channel (see openWithin), with room
// for a return per message in flight: publishes drain returns only after
// their confirm, which comes after the return.
func (p *Publisher) openLane(ctx context.Context, conn *amqp.Connection) (*lane, error) {
	pc, err := p.openWithin(ctx, conn, p.cfg.Window+1, func(pc *pubChannel) {
		if pc != nil {
			pc.closeQuietly() // already in the background
		}
	})
	if err != nil {
		return nil, err
	}
	return &lane{pubChannel: pc, window: make(chan struct{}, p.cfg.Window), returned: map[string]amqp.Return{}}, nil
}

// retire takes a lane out of use for new publishes and closes it once the
// publishes in flight on it have their own confirms (see lane).
//
// One case closes it with confirms still outstanding: when some are still
// missing ConfirmTimeout after the retire. By then no caller is waiting on
// them (each publish's wait ends within ConfirmTimeout, see withTimeout):
// each was answered ErrConfirmTimeout, "the message may have been kept",
// and only the goroutines holding their window slots are left to end. If
// such a message is sent again, it keeps its MessageId (the API's task id),
// and the consumer's claim on that id delivers the two copies once.
func (p *Publisher) retire(l *lane) {
	if !l.retired.CompareAndSwap(false, true) {
		return
	}
	if l.inflight.Load() == 0 {
		l.close()
		return
	}
	time.AfterFunc(p.cfg.ConfirmTimeout+time.Second, l.close)
}

// close closes the lane's channel once, in the background (its close-ok
// may never come, see discard).
func (l *lane) close() {
	l.closing.Do(func() { go l.closeQuietly() })
}

// publishShared is Publish on a lane of (exchange, key).
func (p *Publisher) publishShared(ctx context.Context, conn *amqp.Connection, exchange, key string, msg amqp.Publishing) error {
	lp := p.pool(exchange, key)
	l, err := p.take(ctx, conn, lp)
	if err != nil {
		return err
	}
	sent := time.Now()
	dc, err := l.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		// Nothing was sent (the channel or connection is closed): the
		// message was not kept.
		p.retire(l)
		p.finish(lp, l)
		return fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
	}
	select {
	case <-dc.Done():
		p.cfg.Session.answered()
	case <-ctx.Done():
		// The slot stays taken until the broker answers or the channel
		// closes, so the window bounds what is really outstanding. A late
		// return is cleared with it.
		//
		// The lane is not retired: a node that confirms nothing at all is
		// left by the session (unanswered), and the lanes go with its
		// connection.
		p.cfg.Session.unanswered(conn, sent)
		go func() {
			<-dc.Done()
			l.takeReturn(msg.MessageId)
			p.finish(lp, l)
		}()
		return fmt.Errorf("%w: %w", ErrConfirmTimeout, ctx.Err())
	}
	defer p.finish(lp, l)
	if r, returned := l.takeReturn(msg.MessageId); returned {
		return &ReturnError{Exchange: exchange, RoutingKey: key, Code: r.ReplyCode, Text: r.ReplyText}
	}
	if !dc.Acked() {
		if l.ch.IsClosed() {
			// The channel closed under us (the connection was lost, or the
			// broker closed it), not by retire, which waits for this
			// publish: see lostConfirm for what was kept.
			p.retire(l)
			return l.lostConfirm(len(msg.Body))
		}
		// This message's own nack. The lane takes no new publish (see
		// Publish: RabbitMQ 3.10 keeps nacking on a channel after a quorum
		// leader change); the others in flight on it settle first.
		p.retire(l)
		return ErrNacked
	}
	return nil
}

// closeLanes retires every lane; called once no publish is in flight.
func (p *Publisher) closeLanes() {
	p.lanes.Range(func(_, v any) bool {
		for _, s := range v.(*lanePool).slots { //nolint:forcetypeassert // the map holds only pools
			s.lock <- struct{}{}
			if s.l != nil {
				p.retire(s.l)
				s.l = nil
			}
			<-s.lock
		}
		return true
	})
}
