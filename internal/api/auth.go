package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

const ctxCaller = "msgpulse.caller"

// Authenticate is the middleware of every /api route (and of anything else
// that takes X-API-Key): a missing or unknown key is 401; otherwise the
// key, with its tenant and scopes, is the request's Caller.
//
// Failed checks are limited per source address (echo's RealIP, which
// believes X-Forwarded-For only from TRUSTED_PROXIES): each wrong key is
// counted in Redis before it is answered, the AUTH_FAILURES_PER_MINUTE+1th
// in a minute is 429, and while the address is over the limit every
// request from it is 429, even one with a right key, so that a flood of
// guesses cannot tell a right one by its answer. An IPv6 address counts
// as its /64 (ratelimit.Source). A wrong key that Redis cannot count is
// refused with 503, and so is every request from its address for a
// while (fail closed): guesses must not go uncounted.
func (s *Server) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if s.opts.AuthDisabled {
			c.Set(ctxCaller, apikey.Anonymous)
			return next(c)
		}
		addr := c.RealIP()
		if b, blocked := s.authFailures.Blocked(addr); blocked {
			if b.Uncounted {
				return authUncounted(b.Left, nil)
			}
			return s.authLimited(b.Left)
		}
		got := c.Request().Header.Get("X-API-Key")
		if got == "" { // not a guess: not counted
			return &apiError{Status: http.StatusUnauthorized, Msg: "missing X-API-Key header"}
		}
		key, ok := s.keys.Lookup(got)
		if !ok {
			if err := s.authFailures.Fail(c.Request().Context(), addr); err != nil {
				var le *ratelimit.LimitError
				if errors.As(err, &le) {
					return s.authLimited(le.RetryAfter)
				}
				var ue *ratelimit.UncountedError
				if errors.As(err, &ue) {
					s.log.Warn("could not count a failed X-API-Key check (Redis): refusing the address for a while", zap.String("ip", addr), zap.Error(err))
					return authUncounted(ue.RetryAfter, err)
				}
			}
			return &apiError{Status: http.StatusUnauthorized, Msg: "unknown API key"}
		}
		c.Set(ctxCaller, key)
		return next(c)
	}
}

// authUncounted is the 503 of an address whose wrong key Redis could not
// count: no request from it is served until the wait is over.
func authUncounted(retry time.Duration, cause error) *apiError {
	return &apiError{Status: http.StatusServiceUnavailable, RetryAfter: retry, cause: cause,
		Msg: "failed API key checks from this address cannot be counted (Redis is unavailable), so its requests are refused for now; try again"}
}

func (s *Server) authLimited(retry time.Duration) *apiError {
	return &apiError{Status: http.StatusTooManyRequests, RetryAfter: retry, Limit: "auth failures per address",
		Msg: fmt.Sprintf("too many failed API key checks from this address: over the per-minute limit (%d, AUTH_FAILURES_PER_MINUTE)", s.authFailures.Limit())}
}

// Require is the middleware that lets through only a Caller holding scope
// (after Authenticate): otherwise 403 naming the missing scope. Every /api
// route names its scope in the route table in New. (The on-call console
// cannot use it: a browser sends no X-API-Key, so the console checks the
// key's admin scope itself at login, console.Allowed.)
func Require(scope apikey.Scope) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			if k := Caller(c); !k.Scopes.Allows(scope) {
				return &apiError{Status: http.StatusForbidden,
					Msg: fmt.Sprintf("API key %s lacks the %s scope (it has %s)", k.Name, scope, scopesText(k.Scopes))}
			}
			return next(c)
		}
	}
}

func scopesText(s apikey.Scopes) string {
	if s == 0 {
		return "none"
	}
	return s.String()
}

// Visible reports whether the caller may see a record owned by tenant: its
// own tenant's, or any with the admin scope. A record stored before tenants
// existed (owner "") belongs to the default tenant. A handler answers an
// invisible record exactly as an unknown id (404), so that a key cannot
// probe for other tenants' ids; GET /api/messages/{taskId} and any other
// per-tenant read (batches) must go through here.
func Visible(c *echo.Context, tenant string) bool {
	k := Caller(c)
	if tenant == "" {
		tenant = apikey.DefaultTenant
	}
	return k.Scopes.Has(apikey.Admin) || k.Tenant == tenant
}
