package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SchemaVersion is the body format this build writes and reads. A consumer
// dead-letters messages with any other version as malformed rather than
// guessing at them.
const SchemaVersion = 1

// MaxBrokerBytes is the largest body msgpulse puts on the broker (a batch
// is at most this in all: BATCH_MAX_BYTES) or takes from it
// (MAX_MESSAGE_BYTES): RabbitMQ 4.0's default max_message_size, 16 MiB.
// 3.10's default was 128 MiB, and a larger message was accepted there and
// refused by a 4.x broker left at its default, which closes the channel
// (406 PRECONDITION_FAILED) instead of confirming: a publish that fails
// on one supported broker and not the other. A broker configured below
// 16 MiB needs BATCH_MAX_BYTES at or below its max_message_size.
const MaxBrokerBytes = 16 << 20

// ContentType of every body.
const ContentType = "application/json"

// Kind says what a message is for.
type Kind string

// Kinds.
const (
	Verification Kind = "verification"
	Notification Kind = "notification"
)

// AMQP header names. The x-death family is RabbitMQ's own.
const (
	HeaderSchema         = "x-msgpulse-schema"
	HeaderDeadline       = "x-deadline"           // unix ms; do not send after
	HeaderDueAt          = "x-due-at"             // unix ms; when a delayed message is due
	HeaderDelay          = "x-delay-ms"           // the delay originally asked for, ms
	HeaderHops           = "x-delay-hops"         // delay queues this message went through
	HeaderPlanLeft       = "x-delay-plan-left"    // ms the hop expects to be left when it ends
	HeaderTargetExchange = "x-target-exchange"    // where a delayed message goes when due
	HeaderTargetKey      = "x-target-routing-key" // with this routing key
	HeaderReplays        = "x-replay-count"       // times the DLQ tool replayed it
	HeaderRetryOf        = "x-retry-of-attempt"   // set on a retry: the attempt that failed
	HeaderCC             = "CC"                   // RabbitMQ sender-selected distribution
	HeaderXDeath         = "x-death"              // RabbitMQ dead-letter history
	HeaderFirstDeathPfx  = "x-first-death-"       // x-first-death-reason, -queue, -exchange
	HeaderLastDeathPfx   = "x-last-death-"        // RabbitMQ 3.13+
	HeaderDeliveryCount  = "x-delivery-count"     // quorum queues
)

// Message is the body of every message.
type Message struct {
	Version   int    `json:"v"`
	TaskID    string `json:"taskId"`
	Kind      Kind   `json:"kind"`
	Channel   string `json:"channel"`   // topology channel: mail, sms or wecom
	Recipient string `json:"recipient"` // empty when Recipients is set
	// Recipients: a WeCom batch, sent in one call. The message's TaskID is
	// then the batch's, and each recipient has a status record of its own.
	Recipients []Recipient `json:"recipients,omitempty"`
	BatchID    string      `json:"batchId,omitempty"`
	// Robot: on wecom, Recipient names a group robot (WECOM_ROBOTS) rather
	// than a userid; Mentions are the userids (or @all) it mentions.
	Robot     bool              `json:"robot,omitempty"`
	Mentions  []string          `json:"mentions,omitempty"`
	Template  string            `json:"template"`
	Locale    string            `json:"locale,omitempty"`
	Variables map[string]string `json:"variables,omitempty"`
	// Verification codes: the purpose, the code sealed for the consumer, and
	// the keyed digest that names the idempotency key.
	Purpose    string `json:"purpose,omitempty"`
	SealedCode string `json:"sealedCode,omitempty"`
	CodeDigest string `json:"codeDigest,omitempty"`

	Deadline    *time.Time `json:"deadline,omitempty"` // do not send after this
	CallbackURL string     `json:"callbackUrl,omitempty"`
	// Priority is the caller's 0-9 when it gave one, kept for the record:
	// it chose Level and is never an AMQP priority (see Publishing).
	Priority uint8 `json:"priority,omitempty"`
	// Tenant is the sending API key's tenant, for logs and tools; access
	// is decided on the status record's copy.
	Tenant string `json:"tenant,omitempty"`
	// Account is the WeCom application account (WECOM_ACCOUNTS) an
	// application message is sent from; empty means "default".
	Account string `json:"account,omitempty"`
	// Media is a WeCom application message's file (image, file, video),
	// sent instead of a rendered template.
	Media *Media `json:"media,omitempty"`
	// Level is the notice level (topology's high, normal or low) whose
	// queue the message was published to, so a retry or a snooze goes back
	// to it. Empty means the codes' queue, and is what codes carry: a
	// consumer built before levels existed reads them unchanged.
	Level     string    `json:"level,omitempty"`
	CreatedAt time.Time `json:"createdAt"`
	// Attempt counts send attempts already made; 0 on the first delivery.
	Attempt int `json:"attempt"`
}

// Media is the file of a WeCom media message, fetched by the consumer.
type Media struct {
	Type     string `json:"type"` // image, file or video
	URL      string `json:"url"`
	Filename string `json:"filename,omitempty"`
}

// Recipient is one member of a batch message.
type Recipient struct {
	TaskID    string `json:"taskId"`
	Recipient string `json:"recipient"`
}

// Channels the envelope knows; internal/topology holds the same names
// (the envelope is a leaf and imports nothing of ours).
var channels = map[string]bool{"mail": true, "sms": true, "wecom": true}

// MaxRecipients is the most recipients one message carries: WeCom's limit
// for one message/send call.
const MaxRecipients = 1000

// ErrMalformed marks a body the consumer cannot act on.
var ErrMalformed = errors.New("malformed message")

// Validate checks the fields every consumer relies on.
func (m *Message) Validate() error {
	switch {
	case m.Version != SchemaVersion:
		return fmt.Errorf("%w: schema version %d, this build reads %d", ErrMalformed, m.Version, SchemaVersion)
	case m.TaskID == "":
		return fmt.Errorf("%w: no taskId", ErrMalformed)
	case m.Kind != Verification && m.Kind != Notification:
		return fmt.Errorf("%w: unknown kind %q", ErrMalformed, m.Kind)
	case !channels[m.Channel]:
		return fmt.Errorf("%w: unknown channel %q", ErrMalformed, m.Channel)
	case len(m.Recipients) > 0:
		if err := m.validateBatch(); err != nil {
			return err
		}
	case m.Recipient == "":
		return fmt.Errorf("%w: no recipient", ErrMalformed)
	case strings.IndexFunc(m.Recipient, unicode.IsControl) >= 0:
		// The API never accepts one; a recipient with CR or LF on the queue
		// was put there by hand or by a bug, and could write mail headers.
		return fmt.Errorf("%w: recipient contains a control character", ErrMalformed)
	}
	switch {
	case m.Media != nil && (m.Channel != "wecom" || m.Robot || m.Kind != Notification || m.Media.URL == "" ||
		(m.Media.Type != "image" && m.Media.Type != "file" && m.Media.Type != "video")):
		return fmt.Errorf("%w: media is for WeCom application notices: image, file or video with a url", ErrMalformed)
	case m.Template == "" && m.Media == nil:
		return fmt.Errorf("%w: no template", ErrMalformed)
	case m.Kind == Verification && (m.SealedCode == "" || m.CodeDigest == "" || m.Purpose == ""):
		return fmt.Errorf("%w: verification message without code or purpose", ErrMalformed)
	case m.Attempt < 0:
		return fmt.Errorf("%w: negative attempt", ErrMalformed)
	}
	return nil
}

func (m *Message) validateBatch() error {
	switch {
	case m.Channel != "wecom" || m.Robot:
		return fmt.Errorf("%w: only WeCom application messages carry several recipients", ErrMalformed)
	case m.Recipient != "":
		return fmt.Errorf("%w: both recipient and recipients", ErrMalformed)
	case len(m.Recipients) > MaxRecipients:
		return fmt.Errorf("%w: %d recipients, at most %d", ErrMalformed, len(m.Recipients), MaxRecipients)
	case m.Kind != Notification:
		return fmt.Errorf("%w: a batch of verification codes", ErrMalformed)
	}
	for _, r := range m.Recipients {
		if r.TaskID == "" || r.Recipient == "" || strings.IndexFunc(r.Recipient, unicode.IsControl) >= 0 || strings.Contains(r.Recipient, "|") {
			return fmt.Errorf("%w: batch recipient %q without taskId, empty or with a separator or control character", ErrMalformed, r.Recipient)
		}
	}
	return nil
}

// Encode returns the JSON body.
func Encode(m *Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m)
}

// Decode parses and validates a body. Unknown fields are refused: a body
// from a newer schema that kept the version number is a bug to surface, not
// to half-understand.
func Decode(body []byte) (*Message, error) {
	// JSON is UTF-8 (RFC 8259), and encoding/json would silently turn
	// invalid bytes into U+FFFD: text garbled on its way to a recipient.
	if !utf8.Valid(body) {
		return nil, fmt.Errorf("%w: body is not valid UTF-8", ErrMalformed)
	}
	var m Message
	if !decodeFast(body, &m) {
		m = Message{}
		if err := decodeJSON(body, &m); err != nil {
			return nil, err
		}
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodeJSON is Decode's parse by encoding/json, for every body
// decodeFast leaves to it.
func decodeJSON(body []byte, m *Message) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(m); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: trailing data after the JSON body", ErrMalformed)
	}
	return nil
}

// Expired reports whether the message is past its deadline at now.
func (m *Message) Expired(now time.Time) bool {
	return m.Deadline != nil && !now.Before(*m.Deadline)
}

// Publishing returns the AMQP message for m: persistent, message id =
// taskId, typed by kind, with the schema version and deadline as headers.
//
// It carries no AMQP priority, whatever m.Priority says: a priority picks
// a level, and levels are queues. On a RabbitMQ 4.x quorum queue a
// message priority splits the queue in two (5-9 served about 2:1 ahead of
// 0-4), and TTL expiry and drop-head then look at the head of the high
// half only, so a normal message could outlive its TTL behind newer urgent
// ones; without one, every queue is first in, first out, on every version
// and type.
func Publishing(m *Message) (amqp.Publishing, error) {
	body, err := Encode(m)
	if err != nil {
		return amqp.Publishing{}, err
	}
	h := amqp.Table{HeaderSchema: int32(m.Version)}
	if m.Deadline != nil {
		h[HeaderDeadline] = m.Deadline.UnixMilli()
	}
	return amqp.Publishing{
		ContentType:  ContentType,
		DeliveryMode: amqp.Persistent,
		MessageId:    m.TaskID,
		Type:         string(m.Kind),
		Timestamp:    m.CreatedAt,
		AppId:        "msgpulse",
		Headers:      h,
		Body:         body,
	}, nil
}

// HeaderInt reads an integer header whatever AMQP type carried it.
func HeaderInt(h amqp.Table, key string) (int64, bool) {
	switch v := h[key].(type) {
	case int64:
		return v, true
	case int32:
		return int64(v), true
	case int16:
		return int64(v), true
	case int8:
		return int64(v), true
	case int:
		return int64(v), true
	case uint8:
		return int64(v), true
	case uint16:
		return int64(v), true
	case uint32:
		return int64(v), true
	case float64:
		return int64(v), true
	case string:
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	return 0, false
}

// HeaderTime reads a unix-ms header as a time.
func HeaderTime(h amqp.Table, key string) (time.Time, bool) {
	ms, ok := HeaderInt(h, key)
	if !ok {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}
