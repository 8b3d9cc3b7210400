package dispatch

import (
	"context"
	"maps"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// A message's next attempt (a retry, a snooze, a wait for a breaker or an
// account) is a copy published through the delay queues with a confirm,
// and only then is the delivery acked; a copy the broker will not take
// holds its delivery until it does.

// retryLater records u (a "retrying" status) and then schedules the
// message for later (see later).
//
// In that order: the copy can be back at once (a wait cut short by its
// deadline comes back in a millisecond) and reach a final status in
// another worker, expired or failed. A "retrying" written after that
// overwrote it for good (the status script keeps only "sent" from being
// overwritten): TestRefusedAccountWaitsAndExpiresWithoutSlowingTheOther
// once found a message dead-lettered for its deadline whose record still
// said retrying. When the publish fails the delivery is held until it
// works, so "retrying" is still true.
func (d *Dispatcher) retryLater(ctx context.Context, j *job, wait time.Duration, isRetry bool, u status.Update) broker.Action {
	d.recordJob(ctx, j, u)
	return d.later(ctx, j, wait, isRetry)
}

// later publishes the message again, to arrive after wait: Ack once the
// broker confirmed the copy. When the broker refuses or blocks it (a full
// delay queue, a resource alarm), the delivery is held and the publish
// tried again in the background until it works (Held; see holdLater),
// never handed back to spend a delivery attempt. A retry counts the
// attempt it follows.
func (d *Dispatcher) later(ctx context.Context, j *job, wait time.Duration, isRetry bool) broker.Action {
	out, err := d.laterMessage(j, isRetry)
	if err != nil {
		// Not the broker's refusal: nothing to wait for. Hand it back after
		// a pause rather than ack a message whose next attempt exists
		// nowhere.
		d.log.Error("could not build the message's next attempt; handing it back", zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Error(err))
		sleep(ctx, time.Second)
		return broker.Requeue
	}
	due := d.now().Add(min(max(wait, time.Millisecond), d.cfg.Model.Delay.Max))
	if err = d.publishLater(ctx, out, due); err == nil {
		return broker.Ack
	}
	return d.holdLater(ctx, j, out, due, err)
}

// laterMessage is the copy later publishes: back to the level it left (an
// empty level is the channel's first, codes'), with the attempt counted for
// a retry.
func (d *Dispatcher) laterMessage(j *job, isRetry bool) (broker.Outgoing, error) {
	m := *j.msg
	if isRetry {
		m.Attempt++
	}
	pub, err := envelope.Publishing(&m)
	if err != nil {
		return broker.Outgoing{}, err
	}
	if isRetry {
		pub.Headers[envelope.HeaderRetryOf] = int32(j.msg.Attempt + 1)
	}
	if r, ok := j.del.Headers[envelope.HeaderReplays]; ok {
		pub.Headers[envelope.HeaderReplays] = r
	}
	ct, err := d.cfg.Model.Channel(j.channel)
	if err != nil {
		return broker.Outgoing{}, err
	}
	return broker.Outgoing{Exchange: ct.Exchange, RoutingKey: ct.Level(topology.Level(m.Level)).RoutingKey, Msg: pub}, nil
}

// publishLater publishes out through the delay queues, to be delivered at
// due (at once when due has passed), and waits for the confirm.
func (d *Dispatcher) publishLater(ctx context.Context, out broker.Outgoing, due time.Time) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// The copy carries this attempt's trace context: its own spans join the
	// request's trace after the delay queues. Headers are copied: a held
	// delivery publishes out again.
	out.Msg.Headers = maps.Clone(out.Msg.Headers)
	pctx, pspan := telemetry.StartPublish(pctx, out.Exchange, out.RoutingKey, &out.Msg)
	err := d.cfg.Delayed.PublishDelayed(pctx, out, max(due.Sub(d.now()), time.Millisecond))
	channel.EndCall(pspan, err)
	return err
}

// Backoff of a held delivery's publish: from holdFirst, doubling, at most
// holdMax between two tries (with jitter, so many held deliveries do not
// try together). Each try is one publish, refused or blocked at once.
const (
	holdFirst = 100 * time.Millisecond
	holdMax   = 5 * time.Second
)

// holdLater keeps a delivery whose next step (a retry, a snooze, a wait
// for a breaker or an account) could not be published, and publishes it in
// the background until the broker takes it; then the delivery is acked.
//
// Handing it back instead (nack with requeue, after a pause) was a loop
// that cost a quorum queue's delivery limit on RabbitMQ 4.x: 20 by
// default, every return counted before 4.3. A delay queue that refused
// publishes for 40 s had the broker dead-letter 3 of 5 notices whose fault
// had healed, their status still "retrying" (issue 36). Held, the delivery
// spends nothing: its status ("retrying", written before) stays true, and
// the copy is due when it was meant to be, or at once if that has passed.
//
// A held delivery keeps its place in its queue's prefetch window, but not a
// worker: the broker.Consumer moves on at once (broker.Held). Each queue
// has its own channel and window, so held notices never stop codes; a
// window full of held deliveries pauses that queue on this consumer, which
// is the back-pressure wanted while the broker refuses the retries.
//
// On stop, the delivery is held through the grace period; when it is over
// (ctx ends), the copy goes to the delivery's own queue without its delay
// (handBack), and only if that fails too is the delivery handed back,
// spending one attempt, as a channel closing with it unacked would.
func (d *Dispatcher) holdLater(ctx context.Context, j *job, out broker.Outgoing, due time.Time, cause error) broker.Action {
	taskID := j.msg.TaskID
	h := j.hold // a job handed off holds its delivery already, past its handler
	if h == nil {
		h = broker.HoldDelivery(ctx)
	}
	if h == nil {
		// Not under a broker.Consumer (a handler called directly): the one
		// way left is the old one.
		d.log.Error("could not schedule the message for later; handing it back", zap.String("task_id", taskID), telemetry.LogField(ctx), zap.Error(cause))
		sleep(ctx, time.Second)
		return broker.Requeue
	}
	d.log.Warn("could not schedule the message for later; holding it and trying again", zap.String("task_id", taskID), zap.String("queue", h.Queue()), telemetry.LogField(ctx), zap.Error(cause))
	d.cfg.Metrics.Held.Inc()
	go func() {
		defer d.cfg.Metrics.Held.Dec()
		h.Settle(d.publishHeld(ctx, h, taskID, out, due))
	}()
	return broker.Held
}

// publishHeld tries the publish until it works, the delivery's channel is
// lost, or ctx ends (the consumer's grace period is over), and says how to
// settle the delivery.
func (d *Dispatcher) publishHeld(ctx context.Context, h *broker.Hold, taskID string, out broker.Outgoing, due time.Time) broker.Action {
	wait, tries, since := holdFirst, 1, d.now()
	for {
		select {
		case <-h.Lost():
			return broker.Requeue // a no-op: the broker has it back
		case <-ctx.Done():
			// A lost session ends ctx too, and select picks at random: a
			// delivery the broker has back gets no copy of its own.
			select {
			case <-h.Lost():
				return broker.Requeue
			default:
			}
			return d.handBack(ctx, h, taskID, out)
		case <-time.After(wait/2 + rand.N(wait/2+1)): //nolint:gosec // spreading retries, not a secret
		}
		tries++
		err := d.publishLater(ctx, out, due)
		if err == nil {
			d.log.Info("scheduled the held message for later", zap.String("task_id", taskID), zap.Int("tries", tries), zap.Duration("held", d.now().Sub(since)))
			return broker.Ack
		}
		if tries%20 == 0 {
			d.log.Warn("still holding a message the broker will not take", zap.String("task_id", taskID), zap.Int("tries", tries), zap.Duration("held", d.now().Sub(since)), zap.Error(err))
		}
		wait = min(2*wait, holdMax)
	}
}

// handBack is a held delivery's way out when the consumer stops: its copy
// goes straight to the queue it came from, without the wait (the delay
// queues still refuse it), and the delivery is acked. A stopping consumer
// would otherwise hand it back unacked, which counts toward a quorum
// queue's delivery limit as a requeue does. The copy is the one the delay
// queues were to carry (a retry counts its attempt), so it is one early
// attempt, never one more.
func (d *Dispatcher) handBack(ctx context.Context, h *broker.Hold, taskID string, out broker.Outgoing) broker.Action {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := d.cfg.Delayed.PublishNow(pctx, out)
	if err == nil {
		d.log.Info("stopping: put the held message back in its queue without its wait", zap.String("task_id", taskID), zap.String("queue", h.Queue()))
		return broker.Ack
	}
	d.log.Warn("stopping: could not put the held message back in its queue; handing the delivery back", zap.String("task_id", taskID), zap.String("queue", h.Queue()), zap.Error(err))
	return broker.Requeue
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
