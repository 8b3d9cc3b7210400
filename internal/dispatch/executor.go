package dispatch

import (
	"context"
	"errors"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// The executor: a delivery's handler runs the pipeline (process), and
// complete turns its outcome into the delivery's action, like river's
// JobExecutor and its completer. It never names a channel.

// LevelHandler returns the broker handler for one level's queue of a
// channel: the pipeline is the same, the level labels its metrics. Like
// river's executor it names no channel: the channel's Send does its
// work, and complete turns the outcome into the delivery's action.
func (d *Dispatcher) LevelHandler(name string, level topology.Level) broker.Handler {
	queue := d.queueName(name, level)
	ch := d.channel(name)
	holds := ch.Holds(level) > 0
	return func(ctx context.Context, del *amqp.Delivery) broker.Action {
		ctx, span := telemetry.StartProcess(ctx, queue, del)
		d.cfg.Metrics.InFlight.Inc()
		d.hot.consumed(name, level).Inc()
		if due, ok := envelope.HeaderTime(del.Headers, envelope.HeaderDueAt); ok {
			d.cfg.DelayMetrics.Accuracy.Observe(d.now().Sub(due).Seconds())
		}
		j := &job{channel: name, level: level, del: del, provider: ch.Provider(), ch: ch, queue: queue, span: span}
		j.task.Level = level
		if holds {
			j.hold = broker.HoldDelivery(ctx)
		}
		if j.hold != nil {
			j.task.Finish = func(rcpt provider.Receipt, err error) { d.finish(ctx, j, rcpt, err) }
		}
		handedOff := false
		defer func() {
			if !handedOff {
				d.end(j)
			}
		}()
		var a broker.Action
		a, handedOff = d.complete(ctx, j, d.process(ctx, j))
		return a
	}
}

// complete turns the outcome of a run of the pipeline into the delivery's
// action (decide). A Redis that did not answer pauses the work and runs
// the pipeline again, here, until it has another outcome; handedOff says
// the channel holds the job (Held: whoever holds it calls finish).
func (d *Dispatcher) complete(ctx context.Context, j *job, err error) (a broker.Action, handedOff bool) {
	for errors.Is(err, channel.ErrRedis) {
		if !d.pause(ctx, err) {
			return broker.Requeue, false
		}
		err = d.process(ctx, j)
	}
	if errors.Is(err, channel.ErrHandedOff) {
		return broker.Held, true
	}
	return d.decideInSpan(ctx, j.queue, j, err), false
}

// finish completes a job that was handed off, once its send is done, in
// the goroutine of whoever held it (Task.Finish): what the handler would
// have done after the send, then the delivery's settle. From here on the
// job finishes where it is: a Redis pause runs it again in this goroutine,
// never handed off again.
func (d *Dispatcher) finish(ctx context.Context, j *job, rcpt provider.Receipt, err error) {
	defer d.end(j)
	j.task.Finish = nil
	a, _ := d.complete(ctx, j, d.afterSend(ctx, j, d.sent(j, rcpt, err)))
	if a != broker.Held { // held: its publish settles it (holdLater)
		j.hold.Settle(a)
	}
}

// end ends what the handler started for j (its span, the in-flight
// count, what its channel reserved): when the handler returns, or, for a
// job handed off, when it is finished.
func (d *Dispatcher) end(j *job) {
	// Also on a panic: OnPanic then writes "failed", which a late
	// "sending" must not overwrite.
	j.waitSending()
	j.ch.Release(&j.task)
	d.cfg.Metrics.InFlight.Dec()
	j.span.End()
}
