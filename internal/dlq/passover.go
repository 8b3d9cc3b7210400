package dlq

import (
	"context"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// passer returns what replay and purge do with a message of queue they
// read but do not act on.
//
// On a classic DLQ nothing: it stays held and is given back when the run
// ends (nack with requeue), which costs nothing. On a quorum DLQ a
// give-back counts toward the queue's delivery limit, so a replay of one id
// would wear out every message in front of it, and a few would make the
// broker drop them: "only replay and purge remove dead letters" would not
// hold for the ones they were not asked to touch. There the message is put
// back as a fresh copy instead (same body, properties and headers, x-death
// included, so its Fingerprint and its log entry still match it),
// published to the DLQ itself with a confirm, and only then is the
// original acked. A crash between the two leaves both: a duplicate, never
// a loss. The copy goes to the end of the queue; the run stops at the
// depth it saw, so it does not read it again.
//
// pub, if not nil, is the run's publisher; else one is opened when needed.
// The returned func closes what passer opened.
func (t *Tool) passer(ctx context.Context, queue string, pub *broker.Publisher) (func(r *reader, d *amqp.Delivery) error, func(), error) {
	q, _ := t.model.Queue(queue)
	if q.Type != topology.Quorum {
		return func(*reader, *amqp.Delivery) error { return nil }, func() {}, nil
	}
	closePub := func() {}
	if pub == nil {
		p, c, err := t.publisher(ctx)
		if err != nil {
			return nil, nil, err
		}
		pub, closePub = p, c
	}
	pubCtx := context.WithoutCancel(ctx) // a started copy finishes, as in replay
	return func(r *reader, d *amqp.Delivery) error {
		// The default exchange routes to the queue named by the key: the
		// DLQ's name, from the model.
		if err := pub.Publish(pubCtx, "", queue, keepAsIs(d)); err != nil {
			return fmt.Errorf("put back %s in %s: %w (it is given back instead)", d.MessageId, queue, err)
		}
		return r.moved(d.DeliveryTag)
	}, closePub, nil
}

// keepAsIs is d as it was dead-lettered: everything but what the delivery
// added (a quorum queue's x-delivery-count).
func keepAsIs(d *amqp.Delivery) amqp.Publishing {
	h := amqp.Table{}
	for k, v := range d.Headers {
		if k != envelope.HeaderDeliveryCount {
			h[k] = v
		}
	}
	return amqp.Publishing{
		Headers: h, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationId: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration,
		MessageId: d.MessageId, Timestamp: d.Timestamp, Type: d.Type, UserId: d.UserId, AppId: d.AppId, Body: d.Body,
	}
}
