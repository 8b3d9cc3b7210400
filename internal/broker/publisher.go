package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// Publish failures. Each means the broker did not take the message; the
// caller must not report success.
var (
	// ErrNacked: the broker refused the message (e.g. a reject-publish
	// queue is full, or an internal error).
	ErrNacked = errors.New("broker nacked the message")
	// ErrReturned: the message was unroutable (mandatory and no queue bound).
	ErrReturned = errors.New("broker returned the message as unroutable")
	// ErrConfirmTimeout: no confirm arrived in time; the message may or may
	// not have been taken (see MayBeKept).
	ErrConfirmTimeout = errors.New("no publisher confirm in time")
	// ErrTooLarge: the broker refused the message for its size (larger than
	// its max_message_size, 16 MiB by default from RabbitMQ 4.0), closing
	// the channel; it was not kept.
	ErrTooLarge = errors.New("message larger than the broker's max_message_size")
	// ErrConfirmLost: the channel or connection closed after the message
	// was sent and before its confirm came; it always comes wrapped in
	// ErrUnavailable, and the message may have been taken (see MayBeKept).
	ErrConfirmLost = errors.New("channel closed before the confirm")
)

// MayBeKept reports whether a failed publish is ambiguous: the message
// went out and the broker may have queued it although no ack came back (a
// confirm that did not arrive in time, or a connection lost while waiting
// for it). Sending it again is harmless only because it keeps its
// MessageId, on which the consumer's claim delivers two copies once. A
// publish that fails with anything else was not kept.
//
// A confirm timeout before anything was sent (no channel free in time)
// is counted as ambiguous too: the caller cannot tell the two apart, and
// saying "may have been kept" of a message that was not is the safe error.
func MayBeKept(err error) bool {
	return errors.Is(err, ErrConfirmTimeout) || errors.Is(err, ErrConfirmLost)
}

// ReturnError carries the broker's reason for a returned message.
type ReturnError struct {
	Exchange, RoutingKey string
	Code                 uint16
	Text                 string
}

func (e *ReturnError) Error() string {
	return fmt.Sprintf("%s: %d %s (exchange %q, routing key %q)", ErrReturned, e.Code, e.Text, e.Exchange, e.RoutingKey)
}

func (e *ReturnError) Unwrap() error { return ErrReturned }

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	Session *Session
	// Channels is the most confirm channels open at once, which is the most
	// publishes in flight. Each channel carries one publish (or one batch)
	// at a time, so a return or a nack is never attributed to the wrong
	// message. Default 32.
	Channels int
	// ConfirmTimeout bounds a publish when the caller's context has no
	// earlier deadline. Default 5s.
	ConfirmTimeout time.Duration
	// Lanes is how many shared confirm channels at most carry single
	// publishes that have a MessageId, per destination (exchange and
	// routing key: each queue of the topology model has its own, opened as
	// its traffic needs them, see lanePool); each holds up
	// to Window unconfirmed messages (see lane). Batches, and messages
	// without an id, use the Channels pool. Defaults 4 and 256; Lanes -1
	// turns sharing off.
	Lanes  int
	Window int
	Logger *zap.Logger
}

// Validate fills defaults and checks the configuration.
func (c *PublisherConfig) Validate() error {
	if c.Session == nil {
		return errors.New("publisher: Session is required")
	}
	c.Channels = cmp.Or(c.Channels, 32)
	if c.Channels < 1 || c.Channels > 2000 {
		return fmt.Errorf("publisher: Channels %d out of range 1..2000", c.Channels)
	}
	c.Lanes = cmp.Or(c.Lanes, 4)
	c.Window = cmp.Or(c.Window, 256)
	if c.Lanes < -1 || c.Lanes > 64 || c.Window < 1 || c.Window > 10_000 {
		return fmt.Errorf("publisher: Lanes %d (1..64, or -1 for none) or Window %d (1..10000) out of range", c.Lanes, c.Window)
	}
	c.ConfirmTimeout = cmp.Or(c.ConfirmTimeout, 5*time.Second)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	// closes gets the broker's reason when it closes the channel, before
	// the library nacks what was outstanding on it (see lostConfirm).
	closes chan *amqp.Error
	// reason is what closes delivered, once read. reasonMu makes the read
	// and the store one step: two publishes losing their confirms at once
	// (a batch's) must both see the reason, not one of them the channel
	// already emptied by the other and the reason not yet stored.
	reasonMu sync.Mutex
	reason   *amqp.Error
}

// lostConfirm is the error of a publish whose confirm never came because
// its channel closed. Whether the message was kept depends on why it
// closed. The broker closes a channel with 404 NOT_FOUND when a publish
// names an exchange that does not exist, on a connection that stays up:
// that publish was not routed, and the broker discards what follows it on
// the channel (a publish routed before the exchange was deleted, still
// unconfirmed, is the one exception this does not tell apart). Any other
// close (the connection was lost, a node went down) may have come after
// the broker queued the message: ErrConfirmLost.
//
// size is the body's length of the publish asking: a 406 for a message
// over the broker's max size names that size, and only the publish whose
// message it names was refused whole. The others in flight on the channel
// (a lane carries up to 256) may have been kept before it: theirs is
// ErrConfirmLost, never ErrTooLarge, which callers answer "nothing was
// kept".
func (pc *pubChannel) lostConfirm(size int) error {
	pc.reasonMu.Lock()
	select {
	case e, ok := <-pc.closes:
		if ok && e != nil {
			pc.reason = e
		}
	default:
	}
	e := pc.reason
	pc.reasonMu.Unlock()
	if e != nil && e.Code == amqp.NotFound && !pc.conn.IsClosed() {
		return fmt.Errorf("%w: the broker closed the channel: %w", ErrUnavailable, e)
	}
	// RabbitMQ checks a message's size before routing it, and closes the
	// channel with 406 ("message size N is larger than configured max size
	// M"): that message was not kept.
	if e != nil && e.Code == amqp.PreconditionFailed && strings.Contains(e.Reason, "max size") &&
		strings.Contains(e.Reason, fmt.Sprintf("message size %d ", size)) && !pc.conn.IsClosed() {
		return fmt.Errorf("%w: %w", ErrTooLarge, e)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, ErrConfirmLost)
}

// Publisher publishes with publisher confirms and mandatory routing. It is
// safe for concurrent use.
type Publisher struct {
	cfg   PublisherConfig
	slots chan struct{}    // one token per channel that may exist
	idle  chan *pubChannel // channels ready for reuse

	lanes sync.Map // destination → *lanePool, when Lanes > 0

	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
}

// NewPublisher returns a Publisher over the session's connection.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, slots: make(chan struct{}, cfg.Channels), idle: make(chan *pubChannel, cfg.Channels)}
	for range cfg.Channels {
		p.slots <- struct{}{}
	}
	return p, nil
}

// acquire returns a live confirm channel, or an error when there is no
// connection. It never waits for a reconnect: a caller in an HTTP request
// wants a fast answer, not a queue of requests behind a dead broker.
func (p *Publisher) acquire(ctx context.Context) (*pubChannel, error) {
	if p.cfg.Session.Blocked() {
		return nil, ErrBlocked
	}
	conn, ok := p.cfg.Session.Current()
	if !ok {
		return nil, fmt.Errorf("%w: not connected", ErrUnavailable)
	}
	for {
		select {
		case pc := <-p.idle:
			if pc.conn == conn && !pc.ch.IsClosed() {
				return pc, nil
			}
			p.discard(pc)
			continue
		default:
		}
		select {
		case pc := <-p.idle:
			if pc.conn == conn && !pc.ch.IsClosed() {
				return pc, nil
			}
			p.discard(pc)
		case <-p.slots:
			return p.open(ctx, conn)
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: all %d publish channels busy", ErrConfirmTimeout, p.cfg.Channels)
		}
	}
}

// open opens a confirm channel on the slot the caller took (see
// openWithin); an abandoned open gives the slot back once it has finished.
func (p *Publisher) open(ctx context.Context, conn *amqp.Connection) (*pubChannel, error) {
	pc, err := p.openWithin(ctx, conn, 16, func(pc *pubChannel) {
		if pc != nil {
			p.discard(pc)
		} else {
			p.slots <- struct{}{}
		}
	})
	if err != nil && !errors.Is(err, ErrConfirmTimeout) { // abandoned opens give their slot back themselves
		p.slots <- struct{}{}
	}
	return pc, err
}

// openWithin opens a confirm channel, giving up when ctx ends: opening
// waits for the broker's answers, which a broker that blocks this
// connection (resource alarm) or a silent network does not give until it
// recovers. An abandoned open finishes in the background and hands what it
// got (nil if it failed) to abandoned.
//
// No answer at all tells the session that the node may not be answering
// (see Session.unanswered): after a confirm timeout the channel is
// discarded, so on a node that answers nothing the next publishes wait
// here.
func (p *Publisher) openWithin(ctx context.Context, conn *amqp.Connection, returnsBuf int, abandoned func(*pubChannel)) (*pubChannel, error) {
	type result struct {
		pc  *pubChannel
		err error
	}
	res := make(chan result, 1)
	sent := time.Now()
	go func() {
		pc, err := open(conn, returnsBuf)
		res <- result{pc, err}
	}()
	select {
	case r := <-res:
		// An opened channel is no answer that counts: a node cut off
		// from its peers opens channels by itself, and only confirms
		// need the majority.
		return r.pc, r.err
	case <-ctx.Done():
		p.cfg.Session.unanswered(conn, sent)
		go func() { abandoned((<-res).pc) }()
		return nil, fmt.Errorf("%w: opening a channel: %w", ErrConfirmTimeout, ctx.Err())
	}
}

// open opens a confirm channel whose returns are buffered for returnsBuf.
// They must be drained: the library delivers a return before the matching
// ack, from its reader goroutine, so a full returns channel would stall the
// whole connection.
func open(conn *amqp.Connection, returnsBuf int) (*pubChannel, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("%w: open channel: %w", ErrUnavailable, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: confirm mode: %w", ErrUnavailable, err)
	}
	returns := ch.NotifyReturn(make(chan amqp.Return, returnsBuf))
	// A channel closes once, so one slot holds its reason: the library never
	// waits on it, read or not.
	closes := ch.NotifyClose(make(chan *amqp.Error, 1))
	return &pubChannel{conn: conn, ch: ch, returns: returns, closes: closes}, nil
}

// closeQuietly closes the channel and drains its returns until the library
// closes them, so nothing is left blocked. It waits for the broker's
// close-ok, so callers run it in the background (see discard).
func (pc *pubChannel) closeQuietly() {
	_ = pc.ch.Close()
	for range pc.returns { //nolint:revive // draining is the point
	}
}

func (p *Publisher) release(pc *pubChannel) {
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed || pc.ch.IsClosed() {
		p.discard(pc)
		return
	}
	p.idle <- pc
}

// discard closes a channel whose state is uncertain (a timed-out confirm
// could still arrive and be mistaken for the next publish's).
//
// The close runs in the background: it waits for the broker's close-ok,
// and a broker that blocks this connection (resource alarm) or a network
// that stopped delivering sends none until it recovers, so a caller waiting
// here would hang far past its timeout (internal/fault measured a publish
// held for the whole alarm). The goroutine ends when the broker answers or
// the connection closes; the slot comes back only then, so closing
// channels still count against Channels.
func (p *Publisher) discard(pc *pubChannel) {
	go func() {
		pc.closeQuietly()
		p.slots <- struct{}{}
	}()
}

func (p *Publisher) enter() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w: publisher closed", ErrUnavailable)
	}
	p.wg.Add(1)
	return nil
}

func (p *Publisher) withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < p.cfg.ConfirmTimeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, p.cfg.ConfirmTimeout)
}

// Publish sends one message with mandatory routing and waits for the
// broker's confirm. It returns nil only when the broker confirmed the
// message and did not return it.
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	if err := p.enter(); err != nil {
		return err
	}
	defer p.wg.Done()
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	if msg.MessageId != "" && p.cfg.Lanes > 0 {
		if p.cfg.Session.Blocked() {
			return ErrBlocked
		}
		conn, ok := p.cfg.Session.Current()
		if !ok {
			return fmt.Errorf("%w: not connected", ErrUnavailable)
		}
		return p.publishShared(ctx, conn, exchange, key, msg)
	}
	pc, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	sent := time.Now()
	dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, msg)
	if err != nil {
		p.discard(pc)
		return fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
	}
	select {
	case <-dc.Done():
		p.cfg.Session.answered()
	case <-ctx.Done():
		p.discard(pc)
		p.cfg.Session.unanswered(pc.conn, sent)
		return fmt.Errorf("%w: %w", ErrConfirmTimeout, ctx.Err())
	}
	if r, returned := drainReturn(pc); returned {
		p.release(pc)
		return &ReturnError{Exchange: exchange, RoutingKey: key, Code: r.ReplyCode, Text: r.ReplyText}
	}
	if !dc.Acked() {
		if pc.ch.IsClosed() {
			p.discard(pc)
			return pc.lostConfirm(len(msg.Body))
		}
		// Never publish on a channel that got a nack again: after a quorum
		// queue's leader dies, RabbitMQ 3.10 keeps nacking on that channel
		// (found in the cluster scenarios), so it is closed and a fresh one
		// takes its place.
		p.discard(pc)
		return ErrNacked
	}
	p.release(pc)
	return nil
}

func drainReturn(pc *pubChannel) (amqp.Return, bool) {
	select {
	case r, ok := <-pc.returns:
		return r, ok
	default:
		return amqp.Return{}, false
	}
}

// Outgoing is one message of a batch.
type Outgoing struct {
	Exchange   string
	RoutingKey string
	Msg        amqp.Publishing // MessageId must be unique within the batch
}

// PublishBatch publishes msgs pipelined on one channel (one round trip for
// the lot, not one per message) and returns one error per message, nil for
// each confirmed one. A message whose confirm did not arrive counts as
// failed.
func (p *Publisher) PublishBatch(ctx context.Context, msgs []Outgoing) []error {
	errs := make([]error, len(msgs))
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	if len(msgs) == 0 {
		return errs
	}
	if err := p.enter(); err != nil {
		return fail(err)
	}
	defer p.wg.Done()
	ctx, cancel := p.withTimeout(ctx)
	defer cancel()
	pc, err := p.acquire(ctx)
	if err != nil {
		return fail(err)
	}
	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	sent := time.Now()
	for i, m := range msgs {
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, m.Exchange, m.RoutingKey, true, false, m.Msg)
		if err != nil {
			p.discard(pc)
			for j := i; j < len(msgs); j++ {
				errs[j] = fmt.Errorf("%w: publish: %w", ErrUnavailable, err)
			}
			p.awaitBatch(ctx, pc.conn, nil, sent, msgs[:i], dcs[:i], errs)
			return errs
		}
		dcs[i] = dc
	}
	return p.awaitBatch(ctx, pc.conn, pc, sent, msgs, dcs, errs)
}

// awaitBatch waits for the confirms of a batch sent at sent on a channel
// of conn, pc; pc is nil when the channel already failed (it was
// discarded).
func (p *Publisher) awaitBatch(ctx context.Context, conn *amqp.Connection, pc *pubChannel, sent time.Time, msgs []Outgoing, dcs []*amqp.DeferredConfirmation, errs []error) []error {
	timedOut, heard := false, false
	for i, dc := range dcs {
		select {
		case <-dc.Done():
			heard = true
			if !dc.Acked() {
				errs[i] = ErrNacked
			}
		case <-ctx.Done():
			errs[i] = fmt.Errorf("%w: %w", ErrConfirmTimeout, ctx.Err())
			timedOut = true
		}
	}
	if heard {
		p.cfg.Session.answered()
	}
	if timedOut && !heard && len(dcs) > 0 {
		p.cfg.Session.unanswered(conn, sent)
	}
	if pc == nil {
		return errs
	}
	returned := map[string]amqp.Return{}
	for {
		r, ok := drainReturn(pc)
		if !ok {
			break
		}
		returned[r.MessageId] = r
	}
	for i, m := range msgs {
		if r, ok := returned[m.Msg.MessageId]; ok && errs[i] == nil {
			errs[i] = &ReturnError{Exchange: m.Exchange, RoutingKey: m.RoutingKey, Code: r.ReplyCode, Text: r.ReplyText}
		}
		if errs[i] != nil && errors.Is(errs[i], ErrNacked) && pc.ch.IsClosed() {
			errs[i] = pc.lostConfirm(len(m.Msg.Body))
		}
	}
	nacked := false
	for _, err := range errs {
		nacked = nacked || errors.Is(err, ErrNacked)
	}
	if timedOut || nacked || pc.ch.IsClosed() { // nacked: see Publish
		p.discard(pc)
	} else {
		p.release(pc)
	}
	return errs
}

// Close waits for publishes in flight, then closes every channel.
func (p *Publisher) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.wg.Wait()
	p.closeLanes()
	for {
		select {
		case pc := <-p.idle:
			p.discard(pc)
		default:
			return
		}
	}
}
