package api

import (
	"fmt"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/apikey"
)

const ctxCaller = "msgpulse.caller"

// Authenticate is the middleware of every /api route (and of anything else
// that takes X-API-Key): a missing or unknown key is 401; otherwise the
// key, with its tenant and scopes, is the request's Caller.
func (s *Server) Authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if s.opts.AuthDisabled {
			c.Set(ctxCaller, apikey.Anonymous)
			return next(c)
		}
		got := c.Request().Header.Get("X-API-Key")
		if got == "" {
			return &apiError{Status: http.StatusUnauthorized, Msg: "missing X-API-Key header"}
		}
		key, ok := s.keys.Lookup(got)
		if !ok {
			return &apiError{Status: http.StatusUnauthorized, Msg: "unknown API key"}
		}
		c.Set(ctxCaller, key)
		return next(c)
	}
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

// Caller is the authenticated key of the request; the zero Key (no
// scopes, no tenant) outside Authenticate.
func Caller(c *echo.Context) apikey.Key {
	k, _ := c.Get(ctxCaller).(apikey.Key)
	return k
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
