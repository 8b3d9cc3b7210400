package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/suppression"
)

// The suppression list as the API enforces and serves it. A send to a
// suppressed recipient is refused inside the limiter's one script
// (ratelimit.Suppress): 422 naming the entry, nothing counted or written.
// GET, POST and DELETE /api/suppressions read and edit a tenant's list:
// reading needs read (the admin scope reads every tenant's), adding and
// removing need send, as a tenant manages its own list the way it sends;
// only a key that also has admin may name another tenant.

// SuppressionInput is the body of POST /api/suppressions.
type SuppressionInput struct {
	Channel   string `json:"channel"`
	Recipient string `json:"recipient"`
	// Reason is one of the reasons; "" is manual.
	Reason string `json:"reason,omitempty"`
	Code   string `json:"code,omitempty"`
	// Tenant is whose list; "" is the key's own. Only an admin key may
	// name another.
	Tenant string `json:"tenant,omitempty"`
}

// suppressionTenant is the tenant a suppression request acts on: the
// key's own, or the one it names when the key has the admin scope.
// Another tenant named by a key without admin is ok=false.
func suppressionTenant(c *echo.Context, named string) (string, bool) {
	k := Caller(c)
	if named == "" || named == k.Tenant {
		return k.Tenant, true
	}
	return named, k.Scopes.Has(apikey.Admin)
}

func (s *Server) suppressionStore() (*suppression.Store, *apiError) {
	if s.d.Suppression == nil {
		return nil, &apiError{Status: http.StatusNotImplemented, Msg: "this API keeps no suppression list"}
	}
	return s.d.Suppression, nil
}

func (s *Server) listSuppressions(c *echo.Context) error {
	st, e := s.suppressionStore()
	if e != nil {
		return e
	}
	q := c.Request().URL.Query()
	f := suppression.Filter{Channel: q.Get("channel"), Cursor: q.Get("cursor")}
	if f.Channel != "" {
		if e := checkChannel(f.Channel); e != nil {
			return e
		}
	}
	if r := q.Get("recipient"); r != "" {
		f.Recipient = r
		if f.Channel != "" {
			rec, e := normalizeRecipient(f.Channel, r)
			if e != nil {
				return e
			}
			f.Recipient = rec
		}
	}
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 1000 {
			return badRequest("limit must be a number from 1 to 1000")
		}
		f.Limit = n
	}
	k := Caller(c)
	if t := q.Get("tenant"); t != "" && !tenantRE.MatchString(t) {
		return badRequest("tenant must be a tenant's name, as API_KEYS gives it")
	}
	switch t := q.Get("tenant"); {
	case k.Scopes.Has(apikey.Admin):
		f.Tenant = t // "" is every tenant's
	case t != "" && t != k.Tenant:
		return &apiError{Status: http.StatusForbidden, Msg: "a key without the admin scope lists its own tenant's suppressions only"}
	default:
		f.Tenant = k.Tenant
	}
	p, err := st.List(c.Request().Context(), f)
	if errors.Is(err, suppression.ErrCursor) {
		return badRequest("cursor is not one this list gave (give the next of the page before, with the same filters)")
	}
	if err != nil {
		return unavailable(err, "the suppression list is unavailable (Redis); try again")
	}
	return reply(c, http.StatusOK, "ok", p)
}

func (s *Server) addSuppression(c *echo.Context) error {
	st, e := s.suppressionStore()
	if e != nil {
		return e
	}
	if e := checkContentType(c.Request()); e != nil {
		return e
	}
	var in SuppressionInput
	if e := decodeJSON(c.Request().Body, s.opts.BodyLimit, &in); e != nil {
		return e
	}
	if e := checkChannel(in.Channel); e != nil {
		return e
	}
	rec, e := normalizeRecipient(in.Channel, in.Recipient)
	if e != nil {
		return e
	}
	reason := suppression.Reason(in.Reason)
	if reason == "" {
		reason = suppression.Manual
	}
	if !reason.Valid() {
		return badRequest("reason must be one of hard_bounce, complaint, opt_out, unreachable, unsubscribe, manual (or left out: manual)")
	}
	if e := noControl("code", in.Code); e != nil || len(in.Code) > 32 {
		return badRequest("code must be a short status code such as 5.1.1 or 21610")
	}
	if in.Tenant != "" && !tenantRE.MatchString(in.Tenant) {
		return badRequest("tenant must be a tenant's name, as API_KEYS gives it")
	}
	tenant, ok := suppressionTenant(c, in.Tenant)
	if !ok {
		return &apiError{Status: http.StatusForbidden, Msg: "a key without the admin scope adds to its own tenant's list only"}
	}
	ctx := c.Request().Context()
	err := st.Add(ctx, suppression.Entry{Tenant: tenant, Channel: in.Channel, Recipient: rec, Reason: reason, Code: in.Code, At: s.now()})
	if err != nil {
		return unavailable(err, "the suppression list is unavailable (Redis); try again")
	}
	// The entry as it is now: an earlier one stays unless it was an
	// unsubscribe and this one stops codes too.
	got, found, err := st.Get(ctx, tenant, in.Channel, rec)
	if err != nil || !found {
		return unavailable(err, "the suppression list is unavailable (Redis); try again")
	}
	s.log.Info("suppression added by hand", zap.String("tenant", tenant), zap.String("channel", in.Channel),
		zap.String("reason", string(got.Reason)), zap.String("api_key", Caller(c).Name))
	return reply(c, http.StatusCreated, "recipient suppressed", got)
}

func (s *Server) deleteSuppression(c *echo.Context) error {
	st, e := s.suppressionStore()
	if e != nil {
		return e
	}
	channel, recipient := c.Param("channel"), c.Param("recipient")
	if r, err := url.PathUnescape(recipient); err == nil {
		recipient = r
	}
	if e := checkChannel(channel); e != nil {
		return e
	}
	rec, e := normalizeRecipient(channel, recipient)
	if e != nil {
		return e
	}
	if t := c.QueryParam("tenant"); t != "" && !tenantRE.MatchString(t) {
		return badRequest("tenant must be a tenant's name, as API_KEYS gives it")
	}
	tenant, ok := suppressionTenant(c, c.QueryParam("tenant"))
	none := notFound("%s %s is not on tenant %s's suppression list", channel, rec, tenant)
	if !ok {
		// Another tenant's entry reads as one that does not exist, so
		// that a key can neither remove nor probe its neighbours'.
		return none
	}
	removed, err := st.Remove(c.Request().Context(), tenant, channel, rec)
	if err != nil {
		return unavailable(err, "the suppression list is unavailable (Redis); try again")
	}
	if !removed {
		return none
	}
	s.log.Info("suppression removed", zap.String("tenant", tenant), zap.String("channel", channel), zap.String("api_key", Caller(c).Name))
	return reply(c, http.StatusOK, "suppression removed", nil)
}
