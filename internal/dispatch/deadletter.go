package dispatch

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// DeadLetterQueues are the status queues (topology.RoleDeadLetterStatus)
// of the DLQs of channels and, with relay, of the relay's DLQ, each with
// its handler: what a consumer process consumes to record the status of
// what the broker dead-letters by itself.
//
// RabbitMQ dead-letters without any code of ours running: a code that
// waited in queue.{ch} past its TTL (expired), a message a full queue
// dropped (maxlen), a message a quorum queue handed out its delivery limit's
// times (delivery_limit: 20 by default from 4.0, every return counted
// before 4.3). Its status said queued, sending or retrying for good, a
// status that was not true. Each DLQ's status queue is bound where the DLQ
// is, so the broker puts every dead letter there too; reading it is the
// cheapest sound place: one delivery per dead letter, consumed by whichever
// consumer is up, and nothing read twice.
func (d *Dispatcher) DeadLetterQueues(channels []string, relay bool) []broker.QueueShare {
	var dlqs []string
	for _, ch := range channels {
		if ct, err := d.cfg.Model.Channel(ch); err == nil {
			dlqs = append(dlqs, ct.DeadLetterQueue)
		}
	}
	if relay && d.cfg.Model.Delay.RelayDeadLetterQ != "" {
		dlqs = append(dlqs, d.cfg.Model.Delay.RelayDeadLetterQ)
	}
	var out []broker.QueueShare
	for _, dlq := range dlqs {
		if q, ok := d.cfg.Model.StatusQueueOf(dlq); ok {
			out = append(out, broker.QueueShare{Name: q.Name, Handler: d.deadLetterHandler(dlq)})
		}
	}
	return out
}

// deadLetterHandler records, for each dead letter of dlq that the broker
// made, a final status saying why: expired for a TTL, failed for the rest,
// with the broker's reason. A dead letter the consumer or the relay made
// (rejected) already has its status, written before the reject. A record
// already final (sent, failed, expired) is left as it is: a copy of a
// message, not the message, died.
func (d *Dispatcher) deadLetterHandler(dlq string) broker.Handler {
	from := d.cfg.Model.Feeders(dlq)
	return func(ctx context.Context, del *amqp.Delivery) broker.Action {
		death, ok := envelope.DeathFrom(del.Headers, from)
		if !ok || death.Reason == "rejected" {
			return broker.Ack
		}
		msg, err := envelope.Decode(del.Body)
		if err != nil {
			return broker.Ack // no record of ours to correct
		}
		q, _ := d.cfg.Model.Queue(death.Queue)
		j := &job{channel: msg.Channel, level: q.Level, del: del, msg: msg, provider: d.providerName(msg.Channel)}
		if j.level == "" { // died in the relay queue: the level it was going back to
			j.level = topology.Code
			if l, err := topology.ParseLevel(msg.Level); err == nil {
				j.level = l
			}
		}
		u := brokerDeathUpdate(death)
		for {
			err := d.recordDeath(ctx, j, u)
			if err == nil {
				break
			}
			if !d.pause(ctx, err) {
				return broker.Requeue
			}
		}
		d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, death.Reason).Inc()
		d.log.Warn("the broker dead-lettered a message", zap.String("task_id", msg.TaskID), zap.String("queue", death.Queue),
			zap.String("reason", death.Reason), zap.String("status", string(u.Status)))
		return broker.Ack
	}
}

// brokerDeathUpdate is the final status of a message the broker
// dead-lettered.
func brokerDeathUpdate(death envelope.Death) status.Update {
	st, why := status.Failed, fmt.Sprintf("dead-lettered by RabbitMQ from %s (%s)", death.Queue, death.Reason)
	switch death.Reason {
	case status.ReasonExpired:
		st, why = status.Expired, "not sent: it waited in "+death.Queue+" past the queue's message TTL, and RabbitMQ dead-lettered it"
	case status.ReasonMaxLen:
		why = "not sent: " + death.Queue + " was full, and RabbitMQ dropped it (drop-head) to the DLQ"
	case status.ReasonDeliveryLimit:
		why = "not sent: " + death.Queue + " handed it out as many times as its delivery limit allows, and RabbitMQ dead-lettered it"
	}
	return status.Update{Status: st, Reason: ptr(death.Reason), ErrorClass: ptr("broker"), LastError: ptr(why)}
}

// recordDeath writes u to the job's records that are not final yet, and
// fires their callbacks. It returns an error only when Redis did not
// answer: the caller waits for it and tries again.
func (d *Dispatcher) recordDeath(ctx context.Context, j *job, u status.Update) error {
	for _, id := range j.taskIDs() {
		rec, err := d.cfg.Status.Get(ctx, id)
		switch {
		case errors.Is(err, status.ErrNotFound):
		case err != nil:
			return err
		case rec.Status.Final():
			continue
		}
		rec, err = d.cfg.Status.Update(ctx, id, u)
		if errors.Is(err, status.ErrFinal) {
			continue
		}
		if err != nil {
			return err
		}
		if d.cfg.Callbacks != nil && j.msg.CallbackURL != "" {
			d.cfg.Callbacks.Send(ctx, j.msg.CallbackURL, j.msg.Tenant, rec)
		}
	}
	return nil
}
