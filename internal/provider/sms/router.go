package sms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// Router sends through a primary vendor and, while the primary's breaker is
// open, through an optional fallback. It never sends one message twice: a
// failure is returned to the dispatcher, which owns retries; the breakers
// only decide where the next attempt goes.
type Router struct {
	primary  route
	fallback *route
}

type route struct {
	sender provider.SMSSender
	br     *breaker.Breaker
}

// NewRouter puts a breaker built from bc in front of primary and, if not
// nil, fallback. now is the breakers' clock (nil means time.Now).
func NewRouter(primary, fallback provider.SMSSender, bc breaker.Config, now func() time.Time) (*Router, error) {
	if primary == nil {
		return nil, errors.New("sms router: primary sender is nil")
	}
	if err := bc.Validate(); err != nil {
		return nil, fmt.Errorf("sms router: %w", err)
	}
	r := &Router{primary: route{sender: primary, br: breaker.New(bc, now)}}
	if fallback != nil {
		if fallback.Name() == primary.Name() {
			return nil, fmt.Errorf("sms router: fallback %q is the primary", fallback.Name())
		}
		r.fallback = &route{sender: fallback, br: breaker.New(bc, now)}
	}
	return r, nil
}

// FromConfig validates cfg and builds the Router the consumer uses: the
// primary cfg.Provider and, if set, the fallback cfg.Fallback.
func FromConfig(cfg Config, log *zap.Logger, out io.Writer) (*Router, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	primary, err := New(cfg.Provider, cfg, log, out)
	if err != nil {
		return nil, err
	}
	var fallback provider.SMSSender
	if cfg.Fallback != "" {
		if fallback, err = New(cfg.Fallback, cfg, log, out); err != nil {
			return nil, err
		}
	}
	return NewRouter(primary, fallback, cfg.Breaker, nil)
}

// Name is the primary's name, or "primary>fallback".
func (r *Router) Name() string {
	if r.fallback == nil {
		return r.primary.sender.Name()
	}
	return r.primary.sender.Name() + ">" + r.fallback.sender.Name()
}

// SendSMS sends m through the primary if its breaker allows, else through
// the fallback if there is one and its breaker allows, else fails with a
// transient "circuit_open" error whose RetryAfter is when a breaker will
// next let a call through. Receipt.Provider names the vendor that sent.
func (r *Router) SendSMS(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	ok, retryIn := r.primary.br.Allow()
	if ok {
		return r.primary.send(ctx, m)
	}
	msg := r.primary.sender.Name() + " circuit open"
	if r.fallback != nil {
		fok, fretry := r.fallback.br.Allow()
		if fok {
			return r.fallback.send(ctx, m)
		}
		retryIn = min(retryIn, fretry)
		msg += ", fallback " + r.fallback.sender.Name() + " circuit open"
	}
	return provider.Receipt{}, &provider.Error{
		Provider:   r.primary.sender.Name(),
		Class:      provider.Transient,
		Code:       "circuit_open",
		Message:    msg,
		RetryAfter: retryIn,
		Err:        breaker.ErrOpen,
	}
}

// send calls the vendor and tells its breaker how the vendor is: only a
// transient failure (5xx, timeout, connection error, unclassified error)
// counts against it. A throttled or permanent answer means the vendor is up
// and judged this message, so it counts as healthy. A call the caller
// cancelled says nothing about the vendor and is not recorded.
func (rt *route) send(ctx context.Context, m provider.SMS) (provider.Receipt, error) {
	rc, err := rt.sender.SendSMS(ctx, m)
	switch {
	case err == nil:
		rt.br.Success()
		if rc.Provider == "" {
			rc.Provider = rt.sender.Name()
		}
	case errors.Is(ctx.Err(), context.Canceled):
	case provider.Classify(err) == provider.Transient:
		rt.br.Failure()
	default:
		rt.br.Success()
	}
	return rc, err
}

// States reports each vendor's breaker state by provider name, for metrics.
func (r *Router) States() map[string]breaker.State {
	out := map[string]breaker.State{r.primary.sender.Name(): r.primary.br.State()}
	if r.fallback != nil {
		out[r.fallback.sender.Name()] = r.fallback.br.State()
	}
	return out
}

// Close closes the senders that hold connections.
func (r *Router) Close() error {
	var errs []error
	for _, rt := range []*route{&r.primary, r.fallback} {
		if rt == nil {
			continue
		}
		if c, ok := rt.sender.(provider.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
