package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// checkNumber applies the SMS code policy to n: 400 for a number type
// codes do not go to, 403 for a country the tenant may not send codes to.
func (s *Server) checkNumber(tenant string, n phone.Number) *apiError {
	err := s.opts.SMSCodes.Check(tenant, n)
	var te *fraud.TypeError
	var ce *fraud.CountryError
	switch {
	case errors.As(err, &te):
		s.fraud.Refused.WithLabelValues(fraud.RefusedNumberType).Inc()
		return &apiError{Status: http.StatusBadRequest, Msg: te.Error()}
	case errors.As(err, &ce):
		s.fraud.Refused.WithLabelValues(fraud.RefusedCountry).Inc()
		return &apiError{Status: http.StatusForbidden, Msg: ce.Error()}
	}
	return nil
}

// pumping is the 429 for a code refused by the fraud guard: it names the
// prefix, why, for how long, and how to lift the block, and lists the
// block for GET /api/fraud/blocks.
func (s *Server) pumping(ctx context.Context, tenant string, n phone.Number, ge *ratelimit.GuardError) *apiError {
	cfg := s.d.Fraud.Config()
	prefix := cfg.Prefix(n)
	s.fraud.Refused.WithLabelValues(fraud.RefusedPumping).Inc()
	if lb := ge.LeftBehind; lb != nil {
		s.logLeftBehind(ctx, lb)
	}
	if ge.Started {
		s.log.Warn("fraud guard: prefix blocked for suspected SMS pumping", zap.String("tenant", tenant), zap.String("prefix", prefix),
			zap.String("country", n.Region), zap.Stringer("reason", ge.Reason), zap.Int("sent", ge.Sent), zap.Int("verified", ge.Verified),
			zap.Duration("for", ge.RetryAfter))
	}
	// Listed even when the caller hung up: the block exists either way.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.d.Fraud.Refused(lctx, tenant, prefix, ge); err != nil {
		// Every refused code tries again, so under a flood this would be a
		// line per request: held back as the refusals' own lines are.
		const msg = "fraud guard: could not list a block (the next refusal lists it)"
		if s.quiet.Allow(msg, zapcore.WarnLevel, zap.String("of", msg)) {
			s.log.Warn(msg, zap.Error(err))
		}
	}
	why := fmt.Sprintf("%d codes sent to it in the last %s, %d verified", ge.Sent, windowWords(cfg.Window), ge.Verified)
	if ge.Reason == ratelimit.GuardSpike {
		why = fmt.Sprintf("%d codes sent to it in the last %s, far above its usual traffic", ge.Sent, windowWords(cfg.Window))
	}
	return &apiError{Status: http.StatusTooManyRequests, RetryAfter: ge.RetryAfter, Limit: "fraud guard", cause: ge,
		Msg: fmt.Sprintf("suspected SMS pumping to %s (%s): codes to this prefix are refused for %s (%s; FRAUD_GUARD=%s); if this traffic is legitimate, lift the block with DELETE /api/fraud/blocks/%s/%s",
			prefix, n.Region, ge.RetryAfter.Round(time.Second), why, cfg.Level, tenant, url.PathEscape(prefix))}
}

func windowWords(d time.Duration) string {
	if d == time.Hour {
		return "hour"
	}
	return d.String()
}

func (s *Server) listFraudBlocks(c *echo.Context) error {
	k := Caller(c)
	tenant := k.Tenant
	if k.Scopes.Has(apikey.Admin) {
		tenant = "" // every tenant's
	}
	if s.d.Fraud == nil {
		return reply(c, http.StatusOK, "ok", []fraud.Block{})
	}
	bs, err := s.d.Fraud.Blocks(c.Request().Context(), tenant)
	if err != nil {
		return unavailable(err, "fraud guard blocks are unavailable (Redis); try again")
	}
	return reply(c, http.StatusOK, "ok", bs)
}

var (
	prefixRE = regexp.MustCompile(`^\+[1-9][0-9]{0,16}$`)
	tenantRE = regexp.MustCompile(`^[^:{}/\s]{1,128}$`)
)

// liftFraudBlock ends a block at once, on every replica. Another tenant's
// block is answered as a block that does not exist (404), so that a key
// can neither lift nor probe its neighbours' blocks.
func (s *Server) liftFraudBlock(c *echo.Context) error {
	tenant, prefix := c.Param("tenant"), c.Param("prefix")
	if p, err := url.PathUnescape(prefix); err == nil {
		prefix = p
	}
	if !strings.HasPrefix(prefix, "+") {
		prefix = "+" + prefix
	}
	if !tenantRE.MatchString(tenant) {
		return badRequest("tenant must be a tenant's name, as API_KEYS gives it")
	}
	if !prefixRE.MatchString(prefix) {
		return badRequest("prefix must be a prefix as GET /api/fraud/blocks lists it, such as +44740012")
	}
	// Before anything is looked up: a 403 says the same whether the block
	// exists or not, so it tells a tenant nothing of its neighbours'.
	if s.d.Fraud != nil && s.d.Fraud.Lifter() == fraud.LiftAdmin && !Caller(c).Scopes.Allows(apikey.Admin) {
		return &apiError{Status: http.StatusForbidden, Msg: "only an admin key may lift a fraud guard block here (FRAUD_GUARD_LIFT=admin)"}
	}
	none := notFound("tenant %s has no fraud guard block of %s", tenant, prefix)
	if !Visible(c, tenant) || s.d.Fraud == nil {
		return none
	}
	err := s.d.Fraud.Lift(c.Request().Context(), tenant, prefix)
	if errors.Is(err, fraud.ErrNoBlock) {
		return none
	}
	if err != nil {
		return unavailable(err, "the block could not be lifted (Redis); try again")
	}
	k := Caller(c)
	s.log.Info("fraud guard block lifted", zap.String("tenant", tenant), zap.String("prefix", prefix), zap.String("api_key", k.Name))
	return reply(c, http.StatusOK, "fraud guard block lifted", nil)
}
