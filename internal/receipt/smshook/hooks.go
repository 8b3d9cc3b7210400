// Package smshook receives the SMS vendors' delivery reports on the API's
// HTTP server: Twilio's status callbacks (signed with X-Twilio-Signature),
// Aliyun's SmsReport push and Tencent's status callback (unsigned, so each
// hook's path carries a secret token of its own). Each report is matched
// to its message through the vendor message id lookup
// (internal/receipt/smslookup), turned into a receipt.Receipt and handed to
// a receipt.Applier, which owns the status, the callback and the
// suppression list.
//
// The vendor calls these hooks, so they take no X-API-Key: the signature
// or the path token is their authentication, checked in constant time
// before anything is read or changed.
//
// What it must never do: log, return or store a hook's token, a signature
// or a report's full number (logging.Mask); trust the Host header (Twilio's
// signature is checked over PUBLIC_BASE_URL); apply a report whose vendor
// id was not sent by us to that number; fail the vendor's request for a
// report it cannot match (the vendor would retry it for days): only a
// failure of ours (Redis) is a 5xx, so that the vendor retries.
package smshook

import (
	"context"
	"crypto/subtle"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
)

// The hooks' paths, under PUBLIC_BASE_URL. The vendors' names are the SMS
// providers' (sms.NameTwilio, …) and the lookup's vendor keys.
const (
	TwilioPath  = "/hooks/sms/twilio"
	AliyunPath  = "/hooks/sms/aliyun/:token"
	TencentPath = "/hooks/sms/tencent/:token"
	// anyPath answers what matches no hook 404 without echoing the path:
	// a path here may hold a token.
	anyPath = "/hooks/sms/*"
)

// Bounds on what a vendor may send: a Twilio callback is a form of a
// few hundred bytes; Aliyun and Tencent push arrays of reports, each a few
// hundred bytes, and batch them (Aliyun's docs: "a single request may
// contain multiple reports").
const (
	maxTwilioBody = 64 << 10
	maxPushBody   = 1 << 20
	maxReports    = 1000
)

// Lookup finds the message a vendor's id names (smslookup.Store).
type Lookup interface {
	Get(ctx context.Context, vendor, id string) (smslookup.Entry, bool, error)
}

// Config says which hooks are on.
type Config struct {
	// PublicBaseURL is PUBLIC_BASE_URL: Twilio's signature is computed
	// over it + TwilioPath. The Twilio hook is on when it and
	// TwilioAuthToken are set.
	PublicBaseURL   string
	TwilioAuthToken string
	// AliyunToken and TencentToken are the hooks' path tokens ("" = off).
	AliyunToken, TencentToken string
}

// On reports whether any hook is on.
func (c Config) On() bool {
	return c.twilioOn() || c.AliyunToken != "" || c.TencentToken != ""
}

func (c Config) twilioOn() bool { return c.PublicBaseURL != "" && c.TwilioAuthToken != "" }

// Hooks serves the vendors' reports.
type Hooks struct {
	cfg     Config
	applier receipt.Applier
	lookup  Lookup
	log     *zap.Logger
	now     func() time.Time
}

// New returns the hooks of cfg, applying through a and matching through l.
func New(cfg Config, a receipt.Applier, l Lookup, log *zap.Logger) (*Hooks, error) {
	if a == nil || l == nil {
		return nil, errors.New("smshook: an Applier and a Lookup are required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Hooks{cfg: cfg, applier: a, lookup: l, log: log, now: time.Now}, nil
}

// Route is one route of the hooks, for the API's route table.
type Route struct {
	Path    string
	Handler echo.HandlerFunc
}

// Routes are the hooks' routes, every method each (a handler answers a
// method other than POST itself, without echoing the path). A hook that
// is off answers 404, as a path of no hook does.
func (h *Hooks) Routes() []Route {
	return []Route{
		{TwilioPath, h.post(h.cfg.twilioOn(), h.twilio)},
		{AliyunPath, h.post(h.cfg.AliyunToken != "", h.token(h.cfg.AliyunToken, h.aliyun))},
		{TencentPath, h.post(h.cfg.TencentToken != "", h.token(h.cfg.TencentToken, h.tencent))},
		{anyPath, func(c *echo.Context) error { return c.NoContent(http.StatusNotFound) }},
	}
}

// post answers 404 when the hook is off and 405 to a method but POST.
func (h *Hooks) post(on bool, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		switch {
		case !on:
			return c.NoContent(http.StatusNotFound)
		case c.Request().Method != http.MethodPost:
			c.Response().Header().Set("Allow", http.MethodPost)
			return c.NoContent(http.StatusMethodNotAllowed)
		}
		return next(c)
	}
}

// token checks the path token in constant time: 403 when it is wrong.
func (h *Hooks) token(want string, next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if subtle.ConstantTimeCompare([]byte(c.Param("token")), []byte(want)) != 1 {
			return c.NoContent(http.StatusForbidden)
		}
		return next(c)
	}
}

// outcome is what applying a request's reports came to.
type outcome struct {
	applied, unmatched int
	err                error // ours (Redis): the vendor must retry
}

// apply matches one report's vendor id and number and applies it. A report
// whose id is unknown (not ours, or older than the lookup's TTL) or whose
// number is not the message's is counted and left: nothing changes, and
// the vendor is answered as for any other.
func (h *Hooks) apply(ctx context.Context, o *outcome, vendor, id string, match func(smslookup.Entry) (string, bool), r receipt.Receipt) {
	e, ok, err := h.lookup.Get(ctx, vendor, id)
	if err != nil {
		o.err = errors.Join(o.err, err)
		return
	}
	if !ok {
		o.unmatched++
		return
	}
	number, same := match(e)
	if !same {
		o.unmatched++
		return
	}
	r.TaskID, r.Channel, r.Source, r.Recipient = e.TaskID, "sms", vendor, number
	if r.At.IsZero() {
		r.At = h.now()
	}
	switch err := h.applier.Apply(ctx, r); {
	case err == nil:
		o.applied++
	case errors.Is(err, receipt.ErrUnknownMessage), errors.Is(err, receipt.ErrInvalid):
		o.unmatched++
	default:
		o.err = errors.Join(o.err, err)
	}
}

// done logs what a request came to; a failure of ours is logged at warn,
// with nothing of the request but its vendor.
func (h *Hooks) done(vendor string, o outcome) {
	if o.err != nil {
		h.log.Warn("could not apply SMS delivery reports; the vendor will retry", zap.String("vendor", vendor),
			zap.Int("applied", o.applied), zap.Error(o.err))
		return
	}
	if o.unmatched > 0 {
		h.log.Info("SMS delivery reports matched no message sent to their number; left", zap.String("vendor", vendor),
			zap.Int("applied", o.applied), zap.Int("unmatched", o.unmatched))
	}
}
