package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"
)

// errSubscribeTimeout: a subscription took longer than SubscribeTimeout.
var errSubscribeTimeout = errors.New("no answer to opening the channel or to basic.consume")

// cannotServe reports whether a consume ended because its node cannot
// serve the queue: no answer to the subscription (or a probe) in time,
// RabbitMQ's 541 INTERNAL_ERROR (a quorum queue's consume timed out on a
// node cut off from its leader), or nothing delivered while messages are
// ready (watchNode).
func cannotServe(err error) bool {
	var ae *amqp.Error
	return errors.Is(err, errSubscribeTimeout) || errors.Is(err, errNodeIdle) || (errors.As(err, &ae) && ae.Code == amqp.InternalError)
}

// subscribeWithin is subscribe, bounded by SubscribeTimeout. An abandoned
// subscription finishes in the background and is closed then; its
// deliveries, if any came, go back to the queue with its channel.
func (c *Consumer) subscribeWithin(conn *amqp.Connection, q QueueShare, tag string, lost chan<- error, log *zap.Logger) (*inbox, error) {
	in, err := within(context.Background(), c.cfg.SubscribeTimeout,
		func() (*inbox, error) { return c.subscribe(conn, q, tag, lost, log) },
		func(in *inbox) {
			if in != nil {
				in.acks.close()
				_ = in.ch.Close()
				<-in.watched
			}
		})
	if errors.Is(err, errSubscribeTimeout) {
		return nil, fmt.Errorf("consume %s: %w within %s", q.Name, err, c.cfg.SubscribeTimeout)
	}
	return in, err
}

// within runs f, waiting for it at most d (errSubscribeTimeout past it)
// or until ctx ends (ctx's error). f goes on in the background when abandoned, and hands what it
// returns to abandon: amqp091-go's channel.open, basic.consume and
// queue.declare wait for the broker's answer without a bound, which a
// node behind a silent network never sends (they end when the connection
// closes, as Session.Leave closes it).
func within[T any](ctx context.Context, d time.Duration, f func() (T, error), abandon func(T)) (T, error) {
	type result struct {
		v   T
		err error
	}
	res := make(chan result, 1)
	go func() {
		v, err := f()
		res <- result{v, err}
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	var zero T
	select {
	case r := <-res:
		return r.v, r.err
	case <-ctx.Done():
		go func() { abandon((<-res).v) }()
		return zero, ctx.Err()
	case <-t.C:
		go func() { abandon((<-res).v) }()
		return zero, errSubscribeTimeout
	}
}

// errNodeIdle: the node reports messages ready in the consumer's queues
// and delivers none of them to a consumer that has room.
var errNodeIdle = errors.New("the node delivers nothing while messages are ready")

// watchNode checks, while the consumer is idle, that its node can serve
// it, and reports on stuck when it cannot. A consumer on a node cut off
// from its peers sees no error at all: the connection, its heartbeats and
// its subscriptions stay up, but a quorum queue's leader on the other side
// cannot deliver to it, and RabbitMQ's own partition handling acts only
// after net_ticktime (60s), or never for a shorter cut. Publishers notice
// missing confirms (Session.unanswered); a consumer that only consumes has
// nothing to miss, so it asks.
//
// Every ProbeEvery in which no delivery came and no handler ran, it opens
// a channel, reads its queues' ready counts (passive declares) and
// subscribes to each once, cancelling at once (see ready), bounded by
// SubscribeTimeout: no answer, or a 541, means the node cannot serve;
// messages ready at two probes in a row with none delivered in between
// mean the node's deliveries do not reach this consumer. A consumer that
// is busy, or whose queues are empty, is never probed twice in a row, and
// costs the broker one channel, and a passive declare and a consume and
// cancel per queue, every ProbeEvery while idle.
func (c *Consumer) watchNode(ctx context.Context, conn *amqp.Connection, stuck chan<- error) {
	t := time.NewTicker(c.cfg.ProbeEvery)
	defer t.Stop()
	seen, strikes := c.received.Load(), 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n := c.received.Load(); n != seen || c.inFlight.Load() > 0 {
			seen, strikes = n, 0
			continue
		}
		ready, err := c.readyWithin(ctx, conn)
		if ctx.Err() != nil {
			return
		}
		switch {
		case cannotServe(err):
			stuck <- err
			return
		case err != nil:
			strikes = 0 // a queue deleted under us, say: the subscription's own error tells
		case ready > 0 && c.received.Load() == seen:
			if strikes++; strikes >= 2 {
				stuck <- fmt.Errorf("%w: %d ready in %s and none delivered for %s", errNodeIdle, ready, c.cfg.queues, 2*c.cfg.ProbeEvery)
				return
			}
		default:
			strikes = 0
		}
		seen = c.received.Load()
	}
}

// readyWithin is the ready count of the consumer's queues, read on a
// channel of its own within SubscribeTimeout. An abandoned read finishes
// in the background (the connection's close ends it, when the consumer
// leaves the node).
func (c *Consumer) readyWithin(ctx context.Context, conn *amqp.Connection) (int, error) {
	n, err := within(ctx, c.cfg.SubscribeTimeout, func() (int, error) { return c.ready(conn) }, func(int) {})
	if errors.Is(err, errSubscribeTimeout) {
		return 0, fmt.Errorf("probing %s: %w within %s", c.cfg.queues, err, c.cfg.SubscribeTimeout)
	}
	return n, err
}

// ready reads the queues' ready counts and, since a node cut off from
// its peers answers those from its own stale copy (a quorum queue's on
// 3.10.8 and 4.0.5 alike), subscribes to each queue once and cancels at
// once: registering a consumer takes the queue's leader, which a node in
// the minority cannot reach, so the subscription times out (within's
// bound) or fails with 541. The probe runs only while this consumer is
// idle, so there is nothing for it to take; a message that arrives in
// the instant between its consume and its cancel goes back to the queue
// with the probe's channel, unsent.
func (c *Consumer) ready(conn *amqp.Connection) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("probe: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(1, 0, false); err != nil {
		return 0, fmt.Errorf("probe: qos: %w", err)
	}
	n := 0
	for _, q := range c.cfg.Queues {
		st, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("probe %s: %w", q.Name, err)
		}
		n += st.Messages
		const tag = "msgpulse-probe"
		if _, err := ch.Consume(q.Name, tag, false, false, false, false, nil); err != nil {
			return 0, fmt.Errorf("probe %s: consume: %w", q.Name, err)
		}
		if err := ch.Cancel(tag, false); err != nil {
			return 0, fmt.Errorf("probe %s: cancel: %w", q.Name, err)
		}
	}
	return n, nil
}
