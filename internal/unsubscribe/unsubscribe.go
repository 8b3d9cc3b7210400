package unsubscribe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"mime"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/suppression"
)

// Suppressor adds an entry to the suppression list; *suppression.Store
// is one. An error means nothing was stored (the reader may press again).
type Suppressor interface {
	Add(ctx context.Context, e suppression.Entry) error
}

// Route is the path the handler serves, as echo names it.
const Route = unsub.Path + ":token"

// MaxBody bounds a POST's body: RFC 8058's one field, with room for a
// multipart envelope around it.
const MaxBody = 4 << 10

// oneClick is the field and value RFC 8058 has a mail client POST.
const (
	oneClickField = "List-Unsubscribe"
	oneClickValue = "One-Click"
)

// Handler serves GET and POST /unsubscribe/{token}.
type Handler struct {
	signer *unsub.Signer
	store  Suppressor
	log    *zap.Logger
	// Now stamps the entries (time.Now).
	Now func() time.Time
	// Timeout bounds the store's call, so a reader whose Redis hangs gets
	// 503 and a page saying to press again, not a spinner.
	Timeout time.Duration
}

// New returns a Handler that checks tokens with signer and stores entries
// in store.
func New(signer *unsub.Signer, store Suppressor, log *zap.Logger) (*Handler, error) {
	if signer == nil || store == nil {
		return nil, errors.New("unsubscribe: a signer and a store are required")
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Handler{signer: signer, store: store, log: log, Now: time.Now, Timeout: 2 * time.Second}, nil
}

// Register adds the two routes to e, with no authentication of their own:
// the token is the reader's credential.
func (h *Handler) Register(e *echo.Echo) {
	e.GET(Route, h.page)
	// Link checkers ask HEAD first; it is the page without its body.
	e.Add(http.MethodHead, Route, h.page)
	e.POST(Route, h.oneClick)
}

// page is GET: the button, and nothing changed.
func (h *Handler) page(c *echo.Context) error {
	tok, err := h.signer.Verify(c.Param("token"))
	if err != nil {
		return render(c, http.StatusNotFound, invalidPage, nil)
	}
	return render(c, http.StatusOK, confirmPage, view{Recipient: logging.Mask(tok.Recipient), Tenant: tok.Tenant})
}

// oneClick is POST: the token checked first (404: nothing is learned about
// a forged token from its body), then the body RFC 8058 asks for (400),
// then the entry stored (200), or 503 when it could not be.
func (h *Handler) oneClick(c *echo.Context) error {
	tok, err := h.signer.Verify(c.Param("token"))
	if err != nil {
		return render(c, http.StatusNotFound, invalidPage, nil)
	}
	if code := readOneClick(c); code != http.StatusOK {
		return render(c, code, badRequestPage, nil)
	}
	ctx, cancel := context.WithTimeout(c.Request().Context(), h.Timeout)
	defer cancel()
	e := suppression.Entry{Tenant: tok.Tenant, Channel: suppression.ChannelEmail, Recipient: tok.Recipient,
		Reason: suppression.Unsubscribe, At: h.Now().UTC()}
	if err := h.store.Add(ctx, e); err != nil {
		h.log.Warn("unsubscribe not stored; the reader is asked to press again",
			zap.String("tenant", tok.Tenant), zap.String("to", logging.Mask(tok.Recipient)), zap.Error(err))
		c.Response().Header().Set("Retry-After", "5")
		return render(c, http.StatusServiceUnavailable, retryPage, nil)
	}
	h.log.Info("unsubscribed", zap.String("tenant", tok.Tenant), zap.String("to", logging.Mask(tok.Recipient)))
	return render(c, http.StatusOK, donePage, view{Recipient: logging.Mask(tok.Recipient), Tenant: tok.Tenant})
}

// readOneClick reads a bounded form body and says whether it is RFC 8058's
// List-Unsubscribe=One-Click: 200 when it is, 413 when it is too large,
// 415 for a body that is not a form, 400 otherwise.
func readOneClick(c *echo.Context) int {
	r := c.Request()
	r.Body = http.MaxBytesReader(c.Response(), r.Body, MaxBody)
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var err error
	switch mt {
	case "application/x-www-form-urlencoded":
		err = r.ParseForm()
	case "multipart/form-data":
		err = r.ParseMultipartForm(MaxBody)
	default:
		return http.StatusUnsupportedMediaType
	}
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case err != nil:
		return http.StatusBadRequest
	case r.PostForm.Get(oneClickField) != oneClickValue:
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// view is what a page shows: never the token, and the address masked
// (a forwarded mail's link shows its reader no more than they need).
type view struct{ Recipient, Tenant string }

func render(c *echo.Context, code int, t *template.Template, v any) error {
	h := c.Response().Header()
	// The token is in the URL: no cache keeps the page, no Referer carries
	// it on, no other site frames the button (a click it tricks out), and
	// the page loads nothing at all.
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Robots-Tag", "noindex")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	var b bytes.Buffer
	if err := t.Execute(&b, v); err != nil {
		return fmt.Errorf("unsubscribe page: %w", err)
	}
	return c.HTMLBlob(code, b.Bytes())
}

// FromConfig returns the Handler for the API's settings, or nil when
// PUBLIC_BASE_URL is unset (no link is ever handed out, so no route is
// served).
func FromConfig(r config.Receipts, store Suppressor, log *zap.Logger) (*Handler, error) {
	if r.PublicBaseURL == "" {
		return nil, nil
	}
	signer, err := unsub.New(r.Secret)
	if err != nil {
		return nil, fmt.Errorf("RECEIPT_SECRET: %w", err)
	}
	return New(signer, store, log)
}
