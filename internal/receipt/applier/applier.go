// Package applier applies receipts (receipt.Applier): it moves a message's
// status record by the ordering rules (status.ApplyReceipt), fires the
// tenant's callback when the status changed, puts the recipient on the
// tenant's suppression list when the receipt says so, and counts
// msgpulse_receipts_total. Every receiver (the bounce SMTP server, the SMS
// vendors' hooks) and the consumer (a refusal during the send) hand their
// receipts to one of these.
//
// It must never take a tenant from a receipt (a receipt names a message;
// the message names its tenant), never apply a receipt whose recipient is
// not the message's, never answer ErrUnknownMessage when Redis failed (the
// sender must try again, not give up), and never log a recipient or a
// callback URL in clear.
package applier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
)

// Suppressor adds an entry to a tenant's suppression list; Add is
// idempotent (an entry added again stays one entry). *suppression.Store
// is one.
type Suppressor interface {
	Add(ctx context.Context, e suppression.Entry) error
}

// Callbacks sends a record's status to its callback URL, signed with its
// tenant's key, without blocking. *callback.Sender is one.
type Callbacks interface {
	Send(ctx context.Context, url, tenant string, rec status.Record)
}

// MaxTenantLabels bounds the tenant label of msgpulse_receipts_total: the
// tenants come from records, which only the API writes for its keys'
// tenants, but a bound that does not rest on that costs nothing. Past it,
// a tenant is counted as "other".
const MaxTenantLabels = 1000

// Metrics counts receipts.
type Metrics struct {
	// Receipts is msgpulse_receipts_total{tenant,kind}: every receipt
	// applied to a known message once (a duplicate is not counted again),
	// whether it changed the status or was kept as an event.
	Receipts *prometheus.CounterVec

	mu      sync.Mutex
	tenants map[string]bool
}

// NewMetrics creates the metrics and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Receipts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_receipts_total",
			Help: "Receipts applied to a known message, once each, by the message's tenant and the receipt's kind (delivered, undelivered, bounced, complained, delayed, accepted)."},
			[]string{"tenant", "kind"}),
		tenants: map[string]bool{},
	}
	if reg != nil {
		reg.MustRegister(m.Receipts)
	}
	return m
}

// Zero starts every kind's series of each tenant at 0, so that a rate
// over them (the complaint and bounce alerts) exists before the first
// receipt: the API zeroes the tenants of its keys.
func (m *Metrics) Zero(tenants []string) {
	for _, t := range tenants {
		label := m.tenant(t)
		for _, k := range []receipt.Kind{receipt.Delivered, receipt.Undelivered, receipt.Bounced, receipt.Complained, receipt.Delayed, receipt.Accepted} {
			m.Receipts.WithLabelValues(label, string(k))
		}
	}
}

// tenant is the label of tenant, "other" past MaxTenantLabels.
func (m *Metrics) tenant(tenant string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tenants[tenant] {
		return tenant
	}
	if len(m.tenants) >= MaxTenantLabels {
		return "other"
	}
	m.tenants[tenant] = true
	return tenant
}

// Config wires an Applier.
type Config struct {
	Status *status.Store
	// Keys digest a receipt's recipient to match it against the record's
	// (status.DigestRecipient): the CODE_SECRET keys, which the API and the
	// consumer share.
	Keys *seal.Keys
	// Callbacks sends the callback of a receipt that changed the status;
	// nil = none.
	Callbacks Callbacks
	// Suppressor takes the entries of receipts that suppress; nil = none
	// (logged: a receipt that should suppress then suppresses nobody).
	Suppressor Suppressor
	Metrics    *Metrics // nil = not registered anywhere
	Logger     *zap.Logger
	// Now is the clock of a suppression entry whose receipt has no time;
	// default time.Now.
	Now func() time.Time
}

// Applier applies receipts; it is safe for concurrent use.
type Applier struct{ cfg Config }

var _ receipt.Applier = (*Applier)(nil)

// New checks cfg and returns an Applier.
func New(cfg Config) (*Applier, error) {
	if cfg.Status == nil || cfg.Keys == nil {
		return nil, errors.New("applier: Status and Keys are required")
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Applier{cfg: cfg}, nil
}

// Apply applies r. It returns an error wrapping receipt.ErrInvalid for a
// malformed receipt, receipt.ErrUnknownMessage when r names no message
// the store knows, or a recipient or channel other than its message's
// (nothing changed), and any other error when Redis failed: the receiver
// then asks its sender to try again (an SMTP 4xx, an HTTP 5xx), and a
// receipt applied twice changes nothing more.
//
// The suppression entry is added on every Apply of a receipt that
// suppresses, a duplicate included: when Redis failed between the status
// and the entry, the sender's retry adds it.
func (a *Applier) Apply(ctx context.Context, r receipt.Receipt) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Suppress != receipt.SuppressNone && !suppression.Reason(r.Suppress).Valid() {
		return errors.Join(receipt.ErrInvalid, fmt.Errorf("receipt: unknown suppression reason %q", r.Suppress))
	}
	u := status.ReceiptUpdate{Kind: string(r.Kind), Channel: r.Channel, Code: r.Code, Detail: r.Detail, Source: r.Source, At: r.At}
	if r.Recipient != "" {
		u.RecipientDigest = status.DigestRecipient(a.cfg.Keys, r.Channel, r.Recipient)
	}
	rec, outcome, err := a.cfg.Status.ApplyReceipt(ctx, r.TaskID, u)
	switch {
	case errors.Is(err, status.ErrNotFound), errors.Is(err, status.ErrRecipientMismatch):
		a.cfg.Logger.Info("receipt for no known message; ignored", zap.String("task_id", r.TaskID), zap.String("kind", string(r.Kind)),
			zap.String("source", r.Source), zap.String("recipient", logging.Mask(r.Recipient)), zap.String("why", err.Error()))
		return fmt.Errorf("%w: %w", receipt.ErrUnknownMessage, err)
	case errors.Is(err, status.ErrInvalidReceipt):
		return errors.Join(receipt.ErrInvalid, err)
	case err != nil:
		return fmt.Errorf("receipt: apply: %w", err)
	}
	tenant := rec.Tenant
	if tenant == "" {
		tenant = apikey.DefaultTenant
	}
	if outcome != status.Duplicate {
		a.cfg.Metrics.Receipts.WithLabelValues(a.cfg.Metrics.tenant(tenant), string(r.Kind)).Inc()
	}
	if outcome == status.Changed && a.cfg.Callbacks != nil && rec.CallbackURL != "" {
		a.cfg.Callbacks.Send(ctx, rec.CallbackURL, rec.Tenant, rec) // queues; best effort, as the consumer's
	}
	if err := a.suppress(ctx, r, tenant); err != nil {
		return err
	}
	if outcome != status.Duplicate {
		a.cfg.Logger.Info("receipt applied", zap.String("task_id", r.TaskID), zap.String("kind", string(r.Kind)), zap.String("code", r.Code),
			zap.String("source", r.Source), zap.String("status", string(rec.Status)), zap.Bool("changed", outcome == status.Changed))
	}
	return nil
}

// suppress adds r's suppression entry, if it asks for one.
func (a *Applier) suppress(ctx context.Context, r receipt.Receipt, tenant string) error {
	if r.Suppress == receipt.SuppressNone {
		return nil
	}
	log := a.cfg.Logger.With(zap.String("task_id", r.TaskID), zap.String("reason", string(r.Suppress)))
	switch {
	case a.cfg.Suppressor == nil:
		log.Warn("receipt asks to suppress its recipient, but this process has no suppression list")
		return nil
	case r.Recipient == "":
		// The record keeps only a masked recipient and a digest: a receipt
		// that names nobody cannot say whom to suppress.
		log.Warn("receipt asks to suppress its recipient but names none; nobody suppressed")
		return nil
	}
	at := r.At
	if at.IsZero() {
		at = a.cfg.Now()
	}
	e := suppression.Entry{Tenant: tenant, Channel: r.Channel, Recipient: r.Recipient, Reason: suppression.Reason(r.Suppress),
		Code: r.Code, TaskID: r.TaskID, At: at.UTC()}
	if err := e.Validate(); err != nil {
		return errors.Join(receipt.ErrInvalid, err)
	}
	if err := a.cfg.Suppressor.Add(ctx, e); err != nil {
		return fmt.Errorf("receipt: suppress: %w", err)
	}
	log.Info("recipient suppressed", zap.String("channel", r.Channel), zap.String("recipient", logging.Mask(r.Recipient)))
	return nil
}
