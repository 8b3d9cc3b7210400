package status

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// What a record is: its fields, and how it is kept as a Redis
// hash (the field names, fields and parse) and checked before it is.

// Record is the status of one message. Times have millisecond precision.
type Record struct {
	TaskID      string     `json:"taskId"`
	Status      State      `json:"status"`
	Channel     string     `json:"channel"`             // "email", "sms", "wecom" or "wecom_robot"
	Recipient   string     `json:"recipient,omitempty"` // masked by the caller
	Kind        string     `json:"kind,omitempty"`
	Template    string     `json:"template,omitempty"`
	Attempts    int        `json:"attempts"`
	CreatedAt   time.Time  `json:"createdAt"`
	UpdatedAt   time.Time  `json:"updatedAt"`
	ScheduledAt *time.Time `json:"scheduledAt,omitempty"`
	SentAt      *time.Time `json:"sentAt,omitempty"`
	LastError   string     `json:"lastError,omitempty"`
	ErrorClass  string     `json:"errorClass,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	Provider    string     `json:"provider,omitempty"`
	// Tenant owns the message (the API key's tenant); "" on records written
	// before tenants existed, which belong to the default tenant.
	Tenant string `json:"tenant,omitempty"`
	// Priority is the traffic level the message was queued at: high,
	// normal or low.
	Priority string `json:"priority,omitempty"`
	// TraceID is the trace of the request that created the record (hex),
	// when tracing was on: the console shows it so on-call can open the
	// message's trace.
	TraceID string `json:"traceId,omitempty"`

	// What the last receipt that changed the status said (ApplyReceipt):
	// its code ("5.1.1", Twilio's "30003"), its detail (redacted), where it
	// came from ("dsn", "twilio", ...). DeliveredAt is when the handset or
	// mailbox took it, by the report's own clock (delivered only).
	ReceiptCode   string     `json:"receiptCode,omitempty"`
	ReceiptDetail string     `json:"receiptDetail,omitempty"`
	ReceiptSource string     `json:"receiptSource,omitempty"`
	DeliveredAt   *time.Time `json:"deliveredAt,omitempty"`
	// Events are the last MaxEvents receipts, oldest first, including
	// those that changed nothing (a delay notice, a vendor's "accepted",
	// a late report): on-call reads the message's story here.
	Events []Event `json:"events,omitempty"`

	// CallbackURL is the message's callbackUrl, kept so that a receipt's
	// callback can be sent; its path and query may be secrets, so it is
	// never in JSON (GET /api/messages, a callback, the console).
	CallbackURL string `json:"-"`
	// RecipientDigest is a keyed digest of the normalised recipient
	// (DigestRecipient), never the recipient: a receipt that names a
	// recipient is applied only when it matches.
	RecipientDigest string `json:"-"`
}

// Event is one receipt kept on a record.
type Event struct {
	Kind   string    `json:"kind"` // a receipt.Kind: delivered, bounced, delayed, accepted, ...
	Code   string    `json:"code,omitempty"`
	Detail string    `json:"detail,omitempty"` // redacted
	At     time.Time `json:"at"`               // the report's time, or when it was applied
	Source string    `json:"source,omitempty"`
}

// Hash fields are the JSON names; times are unix milliseconds.
const (
	fTaskID      = "taskId"
	fStatus      = "status"
	fChannel     = "channel"
	fRecipient   = "recipient"
	fKind        = "kind"
	fTemplate    = "template"
	fAttempts    = "attempts"
	fCreatedAt   = "createdAt"
	fUpdatedAt   = "updatedAt"
	fScheduledAt = "scheduledAt"
	fSentAt      = "sentAt"
	fLastError   = "lastError"
	fErrorClass  = "errorClass"
	fReason      = "reason"
	fProvider    = "provider"
	fTenant      = "tenant"
	fPriority    = "priority"
	fTraceID     = "traceId"

	fReceiptCode     = "receiptCode"
	fReceiptDetail   = "receiptDetail"
	fReceiptSource   = "receiptSource"
	fDeliveredAt     = "deliveredAt"
	fEvents          = "events" // a JSON array (eventJSON), written by the receipt script
	fCallbackURL     = "callbackUrl"
	fRecipientDigest = "recipientDigest"
)

func ms(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

func msPtr(t *time.Time) string {
	if t == nil {
		return ""
	}
	return ms(*t)
}

// fields are r's hash fields as name/value pairs; an empty value means
// "not stored" (the create script leaves it out, or stamps Redis time for
// createdAt and updatedAt).
func fields(r Record) []any {
	kv := []any{
		fTaskID, r.TaskID,
		fStatus, string(r.Status),
		fChannel, r.Channel,
		fRecipient, r.Recipient,
		fKind, r.Kind,
		fTemplate, r.Template,
		fAttempts, strconv.Itoa(r.Attempts),
		fCreatedAt, ms(r.CreatedAt),
		fUpdatedAt, ms(r.UpdatedAt),
		fScheduledAt, msPtr(r.ScheduledAt),
		fSentAt, msPtr(r.SentAt),
		fErrorClass, r.ErrorClass,
		fReason, r.Reason,
		fProvider, r.Provider,
		fTenant, r.Tenant,
		fPriority, r.Priority,
		fTraceID, r.TraceID,
		fReceiptCode, r.ReceiptCode,
		fReceiptSource, r.ReceiptSource,
		fDeliveredAt, msPtr(r.DeliveredAt),
		fCallbackURL, r.CallbackURL,
		fRecipientDigest, r.RecipientDigest,
	}
	// The texts a provider or a receipt wrote: never a secret they quoted.
	return append(kv, fLastError, redact.Text(r.LastError), fReceiptDetail, redact.Text(r.ReceiptDetail))
}

func validateRecord(r Record) error {
	if r.TaskID == "" {
		return errors.New("status: TaskID is required")
	}
	if !r.Status.Valid() {
		return fmt.Errorf("status: unknown status %q", r.Status)
	}
	if _, ok := topology.ByAPI(r.Channel); !ok {
		return fmt.Errorf("status: channel %q: must be one of %s", r.Channel, strings.Join(topology.APINames(), ", "))
	}
	if r.Attempts < 0 {
		return fmt.Errorf("status: attempts %d: must not be negative", r.Attempts)
	}
	return nil
}

// parseReply is parse of a script's HGETALL reply (field, value, ...).
func parseReply(reply any) (Record, error) {
	flat, _ := reply.([]any)
	m := make(map[string]string, len(flat)/2)
	for i := 0; i+1 < len(flat); i += 2 {
		k, _ := flat[i].(string)
		v, _ := flat[i+1].(string)
		m[k] = v
	}
	return parse(m)
}

func parse(m map[string]string) (Record, error) {
	r := Record{
		TaskID:     m[fTaskID],
		Status:     State(m[fStatus]),
		Channel:    m[fChannel],
		Recipient:  m[fRecipient],
		Kind:       m[fKind],
		Template:   m[fTemplate],
		LastError:  m[fLastError],
		ErrorClass: m[fErrorClass],
		Reason:     m[fReason],
		Provider:   m[fProvider],
		Tenant:     m[fTenant],
		Priority:   m[fPriority],
		TraceID:    m[fTraceID],

		ReceiptCode:     m[fReceiptCode],
		ReceiptDetail:   redact.Text(m[fReceiptDetail]),
		ReceiptSource:   m[fReceiptSource],
		Events:          parseEvents(m[fEvents]),
		CallbackURL:     m[fCallbackURL],
		RecipientDigest: m[fRecipientDigest],
	}
	// Again on the way out: a record written before lastError was
	// scrubbed on its way in shows no secret either.
	r.LastError = redact.Text(r.LastError)
	var err error
	num := func(f string) int64 {
		v, ok := m[f]
		if !ok || v == "" || err != nil {
			return 0
		}
		var n int64
		n, err = strconv.ParseInt(v, 10, 64)
		if err != nil {
			err = fmt.Errorf("status: record %q: field %s: %w", r.TaskID, f, err)
		}
		return n
	}
	at := func(f string) *time.Time {
		if _, ok := m[f]; !ok {
			return nil
		}
		t := time.UnixMilli(num(f)).UTC()
		return &t
	}
	r.Attempts = int(num(fAttempts))
	if t := at(fCreatedAt); t != nil {
		r.CreatedAt = *t
	}
	if t := at(fUpdatedAt); t != nil {
		r.UpdatedAt = *t
	}
	r.ScheduledAt = at(fScheduledAt)
	r.SentAt = at(fSentAt)
	r.DeliveredAt = at(fDeliveredAt)
	if err != nil {
		return Record{}, err
	}
	return r, nil
}

// Reasons the consumer records on a record when it dead-letters a message.
// The DLQ tool reads them to say why a rejected message died.
const (
	ReasonMalformed = "malformed"         // body unreadable or of an unknown schema version
	ReasonDeadline  = "deadline"          // past its deadline (an expired code): not sent
	ReasonPermanent = "permanent"         // the provider refused it for good, or it cannot be rendered
	ReasonExhausted = "retries_exhausted" // transient failures, MAX_RETRIES used up
	ReasonPanic     = "panic"             // the handler panicked
	// ReasonRefused: the provider refused the recipient for good during
	// the send (receipt.RefusedError) and no receipt could be applied; the
	// message was acked, not dead-lettered.
	ReasonRefused = "refused"
)

// Reasons RabbitMQ gives (x-death) for what it dead-letters by itself, with
// no code of ours running; the consumers record them from the DLQs' status
// queues (topology.RoleDeadLetterStatus).
const (
	ReasonExpired       = "expired"        // it waited in its queue past the queue's message TTL
	ReasonMaxLen        = "maxlen"         // its queue was full and dropped it (drop-head)
	ReasonDeliveryLimit = "delivery_limit" // a quorum queue handed it out its delivery limit's times
)

// InsertCommands are the plain writes (HSET, PEXPIRE) that store a new
// record without Create's check for an existing one: for a caller that has
// just minted the task ID, on the request path, where a script of its own
// would cost Redis several times the writes. CreatedAt and UpdatedAt must
// be set. Run them in a pipeline (rdb.Command.Do) or inside another
// package's script (ratelimit.Request.Then).
func (s *Store) InsertCommands(r Record) ([]rdb.Command, error) {
	key, kv, err := s.insertFields(r)
	if err != nil {
		return nil, err
	}
	hset := append(rdb.Command{"HSET", key}, kv...)
	return []rdb.Command{hset, {"PEXPIRE", key, s.cfg.TTL.Milliseconds()}}, nil
}

// insertFields checks a new record and returns its key and the field/value
// pairs to store (the empty ones left out).
func (s *Store) insertFields(r Record) (string, []any, error) {
	if r.Status == "" {
		r.Status = Queued
	}
	if err := validateRecord(r); err != nil {
		return "", nil, err
	}
	if r.CreatedAt.IsZero() || r.UpdatedAt.IsZero() {
		return "", nil, errors.New("status: insert needs CreatedAt and UpdatedAt")
	}
	all := fields(r)
	kv := make([]any, 0, len(all))
	for i := 0; i+1 < len(all); i += 2 {
		if v, _ := all[i+1].(string); v != "" {
			kv = append(kv, all[i], v)
		}
	}
	return s.key(r.TaskID), kv, nil
}

// QueueDelete is Delete queued on p, for a caller that undoes many things
// in one round trip (a failed batch); the returned function reports the
// outcome once p has run (ErrNotFound as Delete does).
func (s *Store) QueueDelete(ctx context.Context, p redis.Pipeliner, taskID string) func() error {
	cmd := p.Del(ctx, s.key(taskID))
	return func() error {
		n, err := cmd.Result()
		if err != nil {
			return fmt.Errorf("status: delete %q: %w", taskID, err)
		}
		if n == 0 {
			return fmt.Errorf("%w: %q", ErrNotFound, taskID)
		}
		return nil
	}
}
