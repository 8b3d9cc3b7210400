package api

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Issue 36: what tenants share (a global rate-limit config, the channel's
// global cap) keeps its last fifth for codes: notices of every tenant and
// priority stop below it, and a code after them is still accepted.
func TestNoticesLeaveCodesTheirShareOfSharedLimits(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	r := h.do("POST", "/api/rate-limits", map[string]any{"id": "global-tight", "provider": nil, "requestsPerMinute": 10, "isEnabled": true}, "X-API-Key", adminKey)
	require.Equal(t, http.StatusCreated, r.Status, r.Msg)
	testenv.WaitFor(t, 5*time.Second, "the limit in force", func() bool { return len(h.srv.d.RateLimits.Rules("")) == 1 })
	accepted := 0
	for i := range 12 {
		key := shopKey
		if i%2 == 1 {
			key = blogKey
		}
		body := notice(fmt.Sprintf("n%d@example.com", i))
		body["priority"] = 9
		r := h.send(key, body)
		switch r.Status {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			require.Contains(t, r.Msg, "less the reserve for codes")
		default:
			t.Fatalf("notice %d: %d %s", i, r.Status, r.Msg)
		}
	}
	require.Equal(t, 8, accepted, "notices stop at 8 of 10")
	for i := range 2 {
		r := h.do("POST", "/api/verification-codes", codeRequest(fmt.Sprintf("c%d@example.com", i), "login"), "X-API-Key", shopKey)
		require.Equal(t, http.StatusAccepted, r.Status, "code %d: %s", i, r.Msg)
	}
	r = h.do("POST", "/api/verification-codes", codeRequest("c3@example.com", "login"), "X-API-Key", blogKey)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "codes too stop at the limit itself")
}

// Issue 36: one tenant's urgent notices are held to
// LIMIT_HIGH_PER_TENANT_PER_MINUTE, so a campaign marked urgent cannot
// fill the urgent queue others share; another tenant's urgent notices,
// and the first tenant's other notices, are not counted against it.
func TestUrgentNoticesAreLimitedPerTenant(t *testing.T) {
	limits := defaultLimits()
	limits.HighPerTenantMinute = 3
	h := setup(t, options{limits: limits, keys: tenantKeys(t)})
	urgent := func(key, rcpt string) response {
		body := notice(rcpt)
		body["priority"] = "high"
		return h.send(key, body)
	}
	for i := range 3 {
		require.Equal(t, http.StatusAccepted, urgent(shopKey, fmt.Sprintf("s%d@example.com", i)).Status)
	}
	r := urgent(shopKey, "s3@example.com")
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Msg)
	require.Contains(t, r.Msg, "urgent notices per tenant")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	require.Equal(t, http.StatusAccepted, urgent(blogKey, "b0@example.com").Status, "another tenant's room is its own")
	require.Equal(t, http.StatusAccepted, h.send(shopKey, notice("s4@example.com")).Status, "a normal notice is not counted")
	require.Equal(t, 4, h.depth("queue.mail.high"), "the urgent notices' own queue")
	require.Zero(t, h.depth("queue.mail"), "none in the codes' queue")
}
