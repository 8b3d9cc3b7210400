package dlq

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Entry is one dead letter as list shows it. The recipient is masked.
type Entry struct {
	ID    string `json:"id"`    // message id (= taskId), or the body's taskId
	Queue string `json:"queue"` // the DLQ it is in
	// Channel is where a replay sends it (mail, sms or wecom; "" if unknown).
	Channel string `json:"channel"`
	// Level is the traffic level a replay sends it to: the one its body
	// names, else the one of the queue it died in; "" is high.
	Level     string `json:"level,omitempty"`
	Recipient string `json:"recipient,omitempty"` // masked
	Kind      string `json:"kind,omitempty"`
	// Reason is BrokerReason refined by the consumer's status record
	// (permanent, retries_exhausted, deadline, panic) or by a body that
	// does not decode (malformed).
	Reason       string     `json:"reason"`
	BrokerReason string     `json:"brokerReason"`
	DeathQueue   string     `json:"deathQueue,omitempty"`
	DeathTime    *time.Time `json:"deathTime,omitempty"`
	Deaths       int64      `json:"deaths"`  // x-death counts summed
	Replays      int64      `json:"replays"` // x-replay-count
	// From the consumer's status record, when it still exists.
	Attempts   *int   `json:"attempts,omitempty"`
	ErrorClass string `json:"errorClass,omitempty"`
	LastError  string `json:"lastError,omitempty"`
	Status     string `json:"status,omitempty"`
	// Malformed says why the body does not decode.
	Malformed   string     `json:"malformed,omitempty"`
	CreatedAt   *time.Time `json:"createdAt,omitempty"`
	Deadline    *time.Time `json:"deadline,omitempty"`
	Redelivered bool       `json:"redelivered"`
	// DeliveryCount is a quorum queue's x-delivery-count.
	DeliveryCount int64 `json:"deliveryCount,omitempty"`
}

// Expired reports whether the message's deadline has passed at now.
func (e *Entry) Expired(now time.Time) bool {
	return e.Deadline != nil && !now.Before(*e.Deadline)
}

// Age is how long ago the message was created (or died, if its creation
// time is unknown).
func (e *Entry) Age(now time.Time) time.Duration {
	switch {
	case e.CreatedAt != nil:
		return now.Sub(*e.CreatedAt)
	case e.DeathTime != nil:
		return now.Sub(*e.DeathTime)
	}
	return 0
}

// inspector turns deliveries into entries. It asks Redis for status
// records until the first failure, then carries on with the broker's
// reasons alone: what the DLQ holds matters more than why.
type inspector struct {
	model   *topology.Model
	status  *status.Store // nil: no refinement from records
	timeout time.Duration
	feeders map[string]map[string]bool
	warn    func(string)
	// statusErr is the first Redis failure; no lookup is tried after it.
	statusErr error
	// worn counts messages read with a delivery count at or above
	// DeliveryCountWarn, and wornMax is the highest count seen.
	worn, wornMax int64
}

// DeliveryCountWarn is the x-delivery-count from which the tool warns. A
// quorum queue counts a delivery each time a message is given back (every
// return before RabbitMQ 4.3) and drops a message past the queue's
// delivery-limit (default 20 from 4.0) when, like msgpulse's DLQs, the
// queue has no dead-letter exchange. Reads go to the DLQ's log and never
// count, and replay and purge put back fresh copies of what they pass over;
// a high count comes from other tools or from runs that failed midway.
const DeliveryCountWarn = 10

func newInspector(m *topology.Model, st *status.Store, timeout time.Duration, warn func(string)) *inspector {
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	if warn == nil {
		warn = func(string) {}
	}
	return &inspector{model: m, status: st, timeout: timeout, feeders: map[string]map[string]bool{}, warn: warn}
}

func (x *inspector) from(dlq string) map[string]bool {
	f, ok := x.feeders[dlq]
	if !ok {
		f = x.model.Feeders(dlq)
		x.feeders[dlq] = f
	}
	return f
}

func (x *inspector) record(ctx context.Context, id string) *status.Record {
	if x.status == nil || x.statusErr != nil || id == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, x.timeout)
	defer cancel()
	rec, err := x.status.Get(ctx, id)
	switch {
	case err == nil:
		return &rec
	case errors.Is(err, status.ErrNotFound):
		return nil // expired with STATUS_TTL, or never written
	}
	if ctx.Err() == nil || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		x.statusErr = err
		x.warn(fmt.Sprintf("status records unavailable (%v): reasons are the broker's only (rejected, not permanent/malformed/...)", err))
	}
	return nil
}

// inspected is an entry with the decoded body, when it decodes.
type inspected struct {
	Entry
	msg *envelope.Message
}

// inspect reads what list, show, replay and purge need from a delivery.
func (x *inspector) inspect(ctx context.Context, dlq string, d *amqp.Delivery) inspected {
	e := Entry{ID: d.MessageId, Queue: dlq, Redelivered: d.Redelivered}
	msg, derr := envelope.Decode(d.Body)
	if derr != nil {
		e.Malformed = derr.Error()
	} else {
		if e.ID == "" {
			e.ID = msg.TaskID
		}
		e.Recipient = logging.Mask(msg.Recipient)
		e.Kind = string(msg.Kind)
		e.Deadline = msg.Deadline
		ca := msg.CreatedAt.UTC()
		e.CreatedAt = &ca
	}
	if dl, ok := envelope.HeaderTime(d.Headers, envelope.HeaderDeadline); ok {
		// The header is what the API wrote next to the body; the earlier
		// of the two wins, so a replay never outlives either.
		if e.Deadline == nil || dl.Before(*e.Deadline) {
			e.Deadline = &dl
		}
	}
	if e.Deadline != nil {
		t := e.Deadline.UTC()
		e.Deadline = &t
	}
	if e.CreatedAt == nil && !d.Timestamp.IsZero() {
		t := d.Timestamp.UTC()
		e.CreatedAt = &t
	}
	death, _ := envelope.DeathFrom(d.Headers, x.from(dlq))
	e.BrokerReason, e.DeathQueue, e.DeathTime = death.Reason, death.Queue, death.Time
	for _, dd := range envelope.Deaths(d.Headers) {
		e.Deaths += dd.Count
	}
	e.Replays, _ = envelope.HeaderInt(d.Headers, envelope.HeaderReplays)
	e.DeliveryCount, _ = envelope.HeaderInt(d.Headers, envelope.HeaderDeliveryCount)
	if e.DeliveryCount >= DeliveryCountWarn {
		x.worn++
		x.wornMax = max(x.wornMax, e.DeliveryCount)
	}
	e.Channel = x.channelOf(dlq, death.Queue, msg)
	e.Level = x.levelOf(death.Queue, msg)

	rec := x.record(ctx, e.ID)
	if rec != nil {
		e.Attempts = &rec.Attempts
		e.ErrorClass, e.LastError, e.Status = rec.ErrorClass, rec.LastError, string(rec.Status)
	}
	// Only a rejection is the consumer's doing; a record's reason on an
	// expired or dropped message is from an earlier life of the message.
	e.Reason = refine(e.BrokerReason, derr != nil, rec)
	return inspected{Entry: e, msg: msg}
}

func (x *inspector) levelOf(deathQueue string, msg *envelope.Message) string {
	if msg != nil && msg.Level != "" {
		return msg.Level
	}
	if q, ok := x.model.Queue(deathQueue); ok && q.Role == topology.RoleMain {
		return string(q.Level)
	}
	return ""
}

// channelOf decides where a replay sends a message: the channel of the
// main queue it died in; else the DLQ's own channel; else (the relay DLQ)
// the channel the body names. x-death's exchange and routing keys are not
// used: a message that went through delay queues carries theirs.
func (x *inspector) channelOf(dlq, deathQueue string, msg *envelope.Message) string {
	if q, ok := x.model.Queue(deathQueue); ok && q.Role == topology.RoleMain && q.Channel != "" {
		return q.Channel
	}
	if ch := x.model.ChannelOfQueue(dlq); ch != "" {
		return ch
	}
	if msg != nil {
		if _, err := x.model.Channel(msg.Channel); err == nil {
			return msg.Channel
		}
	}
	return ""
}

// jsonValue turns an AMQP field value into something encoding/json prints
// readably: times as RFC 3339, tables as objects, bytes as base64.
func jsonValue(v any) any {
	switch x := v.(type) {
	case amqp.Table:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = jsonValue(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = jsonValue(e)
		}
		return out
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case []byte:
		return base64.StdEncoding.EncodeToString(x)
	case amqp.Decimal:
		return fmt.Sprintf("%de-%d", x.Value, x.Scale)
	}
	return v
}

// properties are a delivery's AMQP properties, for show and export.
type properties struct {
	MessageID       string     `json:"messageId,omitempty"`
	ContentType     string     `json:"contentType,omitempty"`
	ContentEncoding string     `json:"contentEncoding,omitempty"`
	DeliveryMode    uint8      `json:"deliveryMode,omitempty"`
	Priority        uint8      `json:"priority,omitempty"`
	CorrelationID   string     `json:"correlationId,omitempty"`
	ReplyTo         string     `json:"replyTo,omitempty"`
	Expiration      string     `json:"expiration,omitempty"`
	Timestamp       *time.Time `json:"timestamp,omitempty"`
	Type            string     `json:"type,omitempty"`
	UserID          string     `json:"userId,omitempty"`
	AppID           string     `json:"appId,omitempty"`
	Redelivered     bool       `json:"redelivered"`
}

func propertiesOf(d *amqp.Delivery) properties {
	p := properties{
		MessageID: d.MessageId, ContentType: d.ContentType, ContentEncoding: d.ContentEncoding, DeliveryMode: d.DeliveryMode,
		Priority: d.Priority, CorrelationID: d.CorrelationId, ReplyTo: d.ReplyTo, Expiration: d.Expiration, Type: d.Type,
		UserID: d.UserId, AppID: d.AppId, Redelivered: d.Redelivered,
	}
	if !d.Timestamp.IsZero() {
		t := d.Timestamp.UTC()
		p.Timestamp = &t
	}
	return p
}
