package dispatch

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Panic recovery wraps every handler: the broker.Consumer recovers the
// panic and rejects the delivery (dead-lettered), after OnPanic recorded
// why.

// OnPanic records a handler panic; the consumer then rejects the delivery.
func (d *Dispatcher) OnPanic(channel string) func(*amqp.Delivery, any) {
	return func(del *amqp.Delivery, recovered any) {
		d.log.Error("panic while processing; dead-lettering", zap.String("task_id", del.MessageId), telemetry.HeaderField(del.Headers), zap.Any("panic", recovered))
		// A WeCom batch's records are its recipients', not its own.
		j := &job{channel: channel, level: topology.Code, del: del}
		if msg, err := envelope.Decode(del.Body); err == nil && msg.TaskID == del.MessageId {
			j.msg = msg
			if msg.Level != "" {
				j.level = topology.Level(msg.Level)
			}
		}
		d.cfg.Metrics.DeadLettered.WithLabelValues(channel, string(j.level), d.providerName(channel), ReasonPanic).Inc()
		d.recordJob(context.Background(), j, status.Update{Status: status.Failed, Reason: ptr(ReasonPanic), ErrorClass: ptr("panic"), LastError: ptr(fmt.Sprint("panic: ", recovered))})
	}
}
