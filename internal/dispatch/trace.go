package dispatch

import (
	"context"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// queueName is the queue a level handler consumes, for span names.
func (d *Dispatcher) queueName(channel string, level topology.Level) string {
	ct, err := d.cfg.Model.Channel(channel)
	if err != nil {
		return channel
	}
	return ct.Level(level).Queue
}

// decideInSpan is decide inside the span of the delivery's outcome, named
// after it (ack, reject, requeue): the retry's publish and the callback
// are its children, so they stay in the request's trace.
func (d *Dispatcher) decideInSpan(ctx context.Context, queue string, j *job, err error) broker.Action {
	ctx, span := telemetry.StartSettle(ctx, queue, j.del.MessageId)
	defer span.End()
	a := d.decide(ctx, j, err)
	if err != nil {
		span.Set("msgpulse.error_class", channel.Class(err))
	}
	span.Settled(a.String(), queue)
	return a
}
