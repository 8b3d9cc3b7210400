package api

import (
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/fraud"
)

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
