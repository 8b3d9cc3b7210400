package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

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
// a channel and reads its queues' ready counts (passive declares), bounded
// by SubscribeTimeout: no answer, or a 541, means the node cannot serve;
// messages ready at two probes in a row with none delivered in between
// mean the node's deliveries do not reach this consumer. A consumer that
// is busy, or whose queues are empty, is never probed twice in a row, and
// costs the broker one channel and a passive declare per queue every
// ProbeEvery while idle.
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
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		n, err := c.ready(conn)
		res <- result{n, err}
	}()
	t := time.NewTimer(c.cfg.SubscribeTimeout)
	defer t.Stop()
	select {
	case r := <-res:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-t.C:
		return 0, fmt.Errorf("probing %s: %w within %s", c.cfg.queues, errSubscribeTimeout, c.cfg.SubscribeTimeout)
	}
}

func (c *Consumer) ready(conn *amqp.Connection) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, fmt.Errorf("probe: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	n := 0
	for _, q := range c.cfg.Queues {
		st, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, nil)
		if err != nil {
			return 0, fmt.Errorf("probe %s: %w", q.Name, err)
		}
		n += st.Messages
	}
	return n, nil
}
