package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// errNacked is a publish the broker refused.
var errNacked = errors.New("broker nacked the publish")

// ConfirmPublisher is the raw limit of confirmed publishing with
// amqp091-go: one channel in confirm mode shared by every caller, up to
// Window messages unconfirmed at once, each caller's confirm dispatched by
// delivery tag. It is the baseline the API's publisher is compared with.
type ConfirmPublisher struct {
	ch     *amqp.Channel
	window chan struct{}

	pubMu sync.Mutex // delivery tags follow publish order
	tag   uint64

	mu      sync.Mutex
	pending map[uint64]func(bool)
	done    chan struct{}
}

// NewConfirmPublisher opens its channel on conn.
func NewConfirmPublisher(conn *amqp.Connection, window int) (*ConfirmPublisher, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, err
	}
	p := &ConfirmPublisher{ch: ch, window: make(chan struct{}, window), pending: map[uint64]func(bool){}, done: make(chan struct{})}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	go func() {
		defer close(p.done)
		// amqp091-go expands multiple acks: one Confirmation per tag.
		for c := range confirms {
			p.mu.Lock()
			cb := p.pending[c.DeliveryTag]
			delete(p.pending, c.DeliveryTag)
			p.mu.Unlock()
			<-p.window
			if cb != nil {
				cb(c.Ack)
			}
		}
		// The channel closed: whatever is pending will never be confirmed.
		p.mu.Lock()
		for tag, cb := range p.pending {
			delete(p.pending, tag)
			cb(false)
		}
		p.mu.Unlock()
	}()
	return p, nil
}

// Send publishes msg and calls confirmed once the broker answered (true for
// an ack). It blocks while Window messages are unconfirmed.
func (p *ConfirmPublisher) Send(ctx context.Context, exchange, key string, msg amqp.Publishing, confirmed func(bool)) error {
	select {
	case p.window <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-p.done:
		return amqp.ErrClosed
	}
	p.pubMu.Lock()
	p.tag++
	tag := p.tag
	p.mu.Lock()
	p.pending[tag] = confirmed
	p.mu.Unlock()
	err := p.ch.PublishWithContext(ctx, exchange, key, false, false, msg)
	p.pubMu.Unlock()
	if err != nil {
		// No confirm will come for this one: the caller hears the error
		// instead. The channel is unusable now; closing it ends the
		// confirm loop, which fails what else is pending.
		p.mu.Lock()
		delete(p.pending, tag)
		p.mu.Unlock()
		<-p.window
		_ = p.ch.Close()
		return err
	}
	return nil
}

// Publish publishes msg and waits for its confirm.
func (p *ConfirmPublisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	res := make(chan bool, 1)
	if err := p.Send(ctx, exchange, key, msg, func(ack bool) { res <- ack }); err != nil {
		return err
	}
	select {
	case ack := <-res:
		if !ack {
			return errNacked
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close closes the channel.
func (p *ConfirmPublisher) Close() {
	_ = p.ch.Close()
	<-p.done
}

// publishN publishes n copies made by msg(i) as fast as the window allows
// and waits for every confirm; it returns confirmed messages per second.
func publishN(ctx context.Context, conn *amqp.Connection, window int, exchange, key string, n int, msg func(i int) amqp.Publishing) (float64, error) {
	p, err := NewConfirmPublisher(conn, window)
	if err != nil {
		return 0, err
	}
	defer p.Close()
	var wg sync.WaitGroup
	var mu sync.Mutex
	nacks := 0
	start := time.Now()
	for i := range n {
		wg.Add(1)
		if err := p.Send(ctx, exchange, key, msg(i), func(ack bool) {
			if !ack {
				mu.Lock()
				nacks++
				mu.Unlock()
			}
			wg.Done()
		}); err != nil {
			wg.Done()
			return 0, fmt.Errorf("publish %d of %d: %w", i, n, err)
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	if nacks > 0 {
		return 0, fmt.Errorf("%d of %d publishes nacked", nacks, n)
	}
	return float64(n) / elapsed.Seconds(), nil
}

// consumeN consumes n messages from queue with manual acks (one multiple
// ack per quarter of the prefetch) and returns messages per second, from
// the first delivery to the last ack.
func consumeN(ctx context.Context, conn *amqp.Connection, queue string, prefetch, n int) (float64, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return 0, err
	}
	ds, err := ch.ConsumeWithContext(ctx, queue, "loadgen-raw", false, false, false, false, nil)
	if err != nil {
		return 0, err
	}
	every := max(prefetch/4, 1)
	var start time.Time
	timeout := time.NewTimer(60 * time.Second)
	defer timeout.Stop()
	for i := range n {
		select {
		case d, ok := <-ds:
			if !ok {
				return 0, fmt.Errorf("consume %s: channel closed after %d of %d", queue, i, n)
			}
			if i == 0 {
				start = time.Now()
			}
			if (i+1)%every == 0 || i == n-1 {
				if err := d.Ack(true); err != nil {
					return 0, err
				}
			}
		case <-timeout.C:
			return 0, fmt.Errorf("consume %s: only %d of %d within 60s", queue, i, n)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	elapsed := time.Since(start)
	if err := ch.Cancel("loadgen-raw", false); err != nil {
		return 0, err
	}
	if n < 2 {
		return 0, nil
	}
	// n-1 intervals between the first and the last delivery.
	return float64(n-1) / elapsed.Seconds(), nil
}

// purge empties queues (a phase must not measure the previous one's
// backlog) and returns how many messages they held.
func purge(conn *amqp.Connection, queues ...string) (int, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	total := 0
	for _, q := range queues {
		n, err := ch.QueuePurge(q, false)
		if err != nil {
			return total, fmt.Errorf("purge %s: %w", q, err)
		}
		total += n
	}
	return total, nil
}

// depth returns the ready messages and consumers of a queue.
func depth(conn *amqp.Connection, queue string) (messages, consumers int, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, 0, fmt.Errorf("inspect %s: %w", queue, err)
	}
	return q.Messages, q.Consumers, nil
}

// waitConsumers polls until queue has at least one consumer: the moment a
// started consumer process begins taking messages.
func waitConsumers(ctx context.Context, conn *amqp.Connection, queue string, p *Proc, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		_, c, err := depth(conn, queue)
		if err != nil {
			return err
		}
		if c > 0 {
			return nil
		}
		if exited, _ := p.Exited(); exited {
			return fmt.Errorf("before consuming %s: %w", queue, p.exitError())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not consuming %s within %s:\n%s", p.Name, queue, within, p.Tail(20))
		}
		if !pace(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
}
