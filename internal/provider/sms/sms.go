package sms

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// maxBody bounds how much of a vendor reply is read: replies are a few
// hundred bytes, and a misbehaving proxy must not cost us memory.
const maxBody = 64 << 10

// New builds the sender called name from cfg (defaults filled in, the
// vendor's settings validated). log receives only operational lines; out is
// where the log sender prints messages (the consumer passes os.Stdout).
func New(name string, cfg Config, log *zap.Logger, out io.Writer) (provider.SMSSender, error) {
	cfg = cfg.WithDefaults()
	if log == nil {
		log = zap.NewNop()
	}
	if err := validateTimeout(cfg.Timeout); err != nil {
		return nil, err
	}
	if ps := cfg.vendorProblems(name); len(ps) > 0 {
		errs := make([]error, len(ps))
		for i, p := range ps {
			errs[i] = p
		}
		return nil, fmt.Errorf("sms provider %s: %w", name, errors.Join(errs...))
	}
	switch name {
	case NameLog:
		return newLogSender(log, out)
	case NameWebhook:
		return newWebhook(cfg.Webhook, cfg.Timeout), nil
	case NameAliyun:
		return newAliyun(cfg.Aliyun, cfg.Timeout), nil
	case NameTencent:
		return newTencent(cfg.Tencent, cfg.Timeout)
	case NameTwilio:
		return newTwilio(cfg.Twilio, cfg.Timeout), nil
	}
	return nil, fmt.Errorf("sms provider %q: unknown; want one of %s", name, strings.Join(Names, ", "))
}

func validateTimeout(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("sms: timeout %s must be positive", d)
	}
	return nil
}

// httpSender is what every HTTP vendor shares.
type httpSender struct {
	name   string
	client *http.Client
	now    func() time.Time // overridden in tests
}

func newHTTPSender(name string, timeout time.Duration) httpSender {
	return httpSender{name: name, client: provider.NewHTTPClient(timeout), now: time.Now}
}

func (s *httpSender) Name() string { return s.name }

// Close drops idle keep-alive connections.
func (s *httpSender) Close() error {
	s.client.CloseIdleConnections()
	return nil
}

// reply is a vendor's HTTP answer, body already read.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// do sends req and reads the reply. A transport failure comes back as a
// classified *provider.Error whose text holds no URL: Aliyun's request URL
// carries the recipient and the template parameters (the code).
func (s *httpSender) do(req *http.Request) (reply, error) {
	resp, err := s.client.Do(req) //nolint:gosec // the vendor endpoint comes from configuration, not from a caller
	if err != nil {
		return reply{}, s.transportError(req.Context(), err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return reply{}, s.transportError(req.Context(), err)
	}
	// Drain what is left (bounded) so the connection can be reused.
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	return reply{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

func (s *httpSender) transportError(ctx context.Context, err error) *provider.Error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	code := "connection"
	var ne net.Error
	switch {
	case errors.Is(err, context.Canceled) && ctx.Err() != nil:
		code = "canceled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		code = "timeout"
	}
	return &provider.Error{Provider: s.name, Class: provider.Transient, Code: code, Err: err}
}

// newErr builds a classified failure with the vendor's message scrubbed.
func (s *httpSender) newErr(class provider.Class, code, msg string, m provider.SMS) *provider.Error {
	return &provider.Error{Provider: s.name, Class: class, Code: code, Message: scrub(msg, m)}
}

// classifyStatus is the fallback when a reply carries no vendor code we
// know: 429 is throttling, 408 and 5xx may pass, other 4xx and 3xx will
// not.
func classifyStatus(status int) provider.Class {
	switch {
	case status == http.StatusTooManyRequests:
		return provider.Throttled
	case status == http.StatusRequestTimeout, status >= 500:
		return provider.Transient
	case status >= 400:
		return provider.Permanent
	case status >= 300:
		// Redirects are not followed (see provider.NewHTTPClient): the configured
		// URL is wrong, and retrying will not fix it.
		return provider.Permanent
	}
	// A 1xx/3xx or an unparsable 2xx: unknown, so retried (bounded), per
	// provider.Classify's stance on unknown failures.
	return provider.Transient
}

// retryAfter reads a Retry-After header (seconds or HTTP date).
func retryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// e164 accepts "+" then 7 to 15 digits, the first not 0.
func e164(to string) bool {
	if len(to) < 8 || len(to) > 16 || to[0] != '+' || to[1] == '0' {
		return false
	}
	for _, c := range to[1:] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func badRecipient(name, to string) *provider.Error {
	return &provider.Error{Provider: name, Class: provider.Permanent, Code: "invalid_recipient",
		Message: "recipient " + logging.Mask(to) + " is not an E.164 number (+ and 7 to 15 digits)"}
}

// scrub makes a vendor's message safe to log: vendors echo the number back
// ("The 'To' number +15005550001 is not a valid phone number") and could
// echo content. It masks the recipient in the forms vendors use, hides the
// text and every parameter value long enough to be a code, and trims.
func scrub(msg string, m provider.SMS) string {
	msg = strings.TrimSpace(msg)
	if msg == "" {
		return ""
	}
	hide := func(secret, with string) {
		if len(secret) >= 4 {
			msg = strings.ReplaceAll(msg, secret, with)
		}
	}
	hide(m.Text, "[text]")
	for _, v := range m.Params {
		hide(v, "***")
	}
	if m.To != "" {
		mask := logging.Mask(m.To)
		hide(m.To, mask)
		digits := strings.TrimPrefix(m.To, "+")
		if len(digits) >= 7 {
			hide(digits, mask)
		}
		if national, ok := strings.CutPrefix(m.To, "+86"); ok && len(national) >= 7 {
			hide(national, mask)
		}
	}
	const limit = 300
	if len(msg) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + "…"
	}
	return msg
}
