package api

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

func smsCode(recipient, purpose string) map[string]any {
	return map[string]any{"channel": "sms", "recipient": recipient, "purpose": purpose}
}

// recipientOf reads the recipient of the next message in queue.
func (h *harness) recipientIn(queue string) string {
	h.t.Helper()
	m, err := envelope.Decode(h.get(queue).Body)
	require.NoError(h.t, err)
	return m.Recipient
}

// Numbers are parsed: one that its country does not assign is 400 naming
// why, a code to a premium-rate (or toll-free...) number is 400 naming its
// type, a notice gets the validity check only, and a number is one
// recipient however it is spaced.
func TestSMSNumbersAreParsed(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		name, path string
		body       map[string]any
		status     int
		msg        string
	}{
		{"UK premium rate", "/api/verification-codes", smsCode("+44 909 879 0000", "login"), 400, "premium-rate number of GB"},
		{"UK toll free", "/api/verification-codes", smsCode("+448001234567", "login"), 400, "toll-free"},
		{"UK personal", "/api/verification-codes", smsCode("+447012345678", "login"), 400, "personal"},
		{"Chinese, too short", "/api/verification-codes", smsCode("+86 12345678", "login"), 400, "is not a number CN (+86) assigns"},
		{"no such area code", "/api/verification-codes", smsCode("+15551234567", "login"), 400, "not a number US (+1) assigns"},
		{"notice to an invalid number", "/api/messages/send", noticeBody("SMS", func(m map[string]any) { m["recipient"] = "+8612345678" }), 400, "not a number CN"},
		{"verify an invalid number", "/api/verification-codes/verify", map[string]any{"channel": "sms", "recipient": "+8612345678", "purpose": "login", "code": "123456"}, 400, "not a number CN"},
		{"notice to a premium-rate number", "/api/messages/send", noticeBody("SMS", func(m map[string]any) { m["recipient"] = "+449098790000" }), 202, ""},
	} {
		r := h.do("POST", tc.path, tc.body)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Msg)
		require.Contains(t, r.Msg, tc.msg, tc.name)
	}
	q := h.queue("sms")
	require.Equal(t, "+449098790000", h.recipientIn(q+".normal"))
	require.Zero(t, h.depth(q), "no code was queued")

	r := h.do("POST", "/api/verification-codes", smsCode("+44 (7400) 123-456", "login"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	require.Equal(t, "+447400123456", h.recipientIn(q), "sent in E.164")
	r = h.do("POST", "/api/verification-codes", smsCode("+447400123456", "login"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, "one number, one cooldown: %s", r.Msg)
	require.Contains(t, r.Msg, "resend cooldown")
}

// VERIFY_SMS_COUNTRIES holds for every tenant, and a tenant named in
// VERIFY_SMS_COUNTRIES_BY_TENANT gets its own list, and only that tenant.
func TestSMSCodeGeoPermissions(t *testing.T) {
	all, err := phone.ParseCountries("CN+HK+SG")
	require.NoError(t, err)
	by, err := fraud.ParseByTenant([]string{"shop=GB+CN"})
	require.NoError(t, err)
	h := setup(t, options{keys: tenantKeys(t), smsCodes: fraud.Policy{Types: fraud.DefaultTypes, Countries: all, ByTenant: by}})
	for _, tc := range []struct {
		key, number string
		status      int
		msg         string
	}{
		{blogKey, "+447400123456", 403, "verification codes to GB are not allowed for tenant blog: it may send them to CN+HK+SG only (VERIFY_SMS_COUNTRIES)"},
		{blogKey, "+8613812345678", 202, ""},
		{blogKey, "+6591234567", 202, ""},
		{shopKey, "+447400123456", 202, ""},
		{shopKey, "+6591234567", 403, "verification codes to SG are not allowed for tenant shop: it may send them to CN+GB only (VERIFY_SMS_COUNTRIES_BY_TENANT)"},
	} {
		r := h.do("POST", "/api/verification-codes", smsCode(tc.number, "login"), "X-API-Key", tc.key)
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.number, r.Msg)
		require.Contains(t, r.Msg, tc.msg)
	}
	require.Equal(t, 3, h.depth(h.queue("sms")))
	requireMetric(t, h, `msgpulse_fraud_refused_codes_total{reason="country"} 2`)
}

// alice+1@ and alice+2@ are alice's mailbox: one cooldown, one daily
// limit; each mail goes to the address as given. Gmail's dots and
// googlemail.com are one mailbox too.
func TestEmailTagsShareTheLimits(t *testing.T) {
	lim := defaultLimits()
	lim.PerRecipientDay = 2
	h := setup(t, options{limits: lim})
	for _, tc := range []struct {
		rcpt, purpose string
		status        int
		msg           string
	}{
		{"alice+1@example.com", "login", 202, ""},
		{"alice+2@example.com", "login", 429, "resend cooldown"},
		{"alice+2@example.com", "reset", 202, ""},
		{"alice+3@example.com", "signup", 429, "per recipient: over the per-day limit (2)"},
		{"alice@example.com", "signup", 429, "per recipient: over the per-day limit (2)"},
		{"bob+1@example.com", "signup", 202, ""},
		{"j.doe@gmail.com", "login", 202, ""},
		{"jdoe+x@googlemail.com", "login", 429, "resend cooldown"},
	} {
		r := h.do("POST", "/api/verification-codes", codeRequest(tc.rcpt, tc.purpose))
		require.Equal(t, tc.status, r.Status, "%s %s: %s", tc.rcpt, tc.purpose, r.Msg)
		require.Contains(t, r.Msg, tc.msg)
	}
	for _, want := range []string{"alice+1@example.com", "alice+2@example.com", "bob+1@example.com", "j.doe@gmail.com"} {
		require.Equal(t, want, h.recipientIn("queue.mail"), "sent to the address as given")
	}
	// The code is the address's own: it verifies there.
	r := h.do("POST", "/api/verification-codes", codeRequest("carol+a@example.com", "login"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	code := h.code(h.get("queue.mail"))
	r = h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "carol+a@example.com", "purpose": "login", "code": code})
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	var v VerifyResult
	r.data(t, &v)
	require.True(t, v.Valid)
}

func TestEmailIdentity(t *testing.T) {
	for in, want := range map[string]string{
		"alice@example.com":      "alice@example.com",
		"alice+tag@example.com":  "alice@example.com",
		"alice+a+b@example.com":  "alice@example.com",
		"+tag@example.com":       "+tag@example.com",
		"a.l.i.c.e@gmail.com":    "alice@gmail.com",
		"alice+x@googlemail.com": "alice@gmail.com",
		"a.lice@example.com":     "a.lice@example.com",
		"...@gmail.com":          "...@gmail.com",
	} {
		require.Equal(t, want, emailIdentity(in), in)
	}
}

// 40 wrong keys from 40 addresses of one IPv6 /64 end in 429, as from one
// address; another /64 is not affected.
func TestWrongKeysFromOneIPv6Subnet(t *testing.T) {
	_, loopback, err := net.ParseCIDR("127.0.0.1/32")
	require.NoError(t, err)
	h := setup(t, options{authFailures: 30, trustedProxies: []*net.IPNet{loopback}})
	var statuses []int
	for i := range 40 {
		r := h.do("GET", "/api/rate-limits", nil, "X-API-Key", "wrong-key-0123456789abcdefgh", "X-Forwarded-For", fmt.Sprintf("2001:db8:1:2:%x::1", i+1))
		statuses = append(statuses, r.Status)
	}
	require.Equal(t, http.StatusUnauthorized, statuses[29], "the 30th is counted and answered")
	require.Equal(t, http.StatusTooManyRequests, statuses[30], "the 31st is over the limit")
	require.Equal(t, http.StatusTooManyRequests, statuses[39])
	r := h.do("GET", "/api/rate-limits", nil, "X-Forwarded-For", "2001:db8:1:2:ffff::7")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "a right key from the /64 is refused too")
	r = h.do("GET", "/api/rate-limits", nil, "X-Forwarded-For", "2001:db8:1:3::7")
	require.Equal(t, http.StatusOK, r.Status, "the next /64 is another subscriber")
}

// When Redis cannot count a wrong key, the address is refused (503), a
// right key from it too, for the pace the limit allows; other addresses
// are served.
func TestWrongKeyThatCannotBeCountedIsRefused(t *testing.T) {
	_, loopback, err := net.ParseCIDR("127.0.0.1/32")
	require.NoError(t, err)
	h := setup(t, options{authFailures: 30, trustedProxies: []*net.IPNet{loopback}})
	dead, err := rdb.Open(rdb.Single, "redis://127.0.0.1:18699/0", rdb.FailFast(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dead.Close() })
	h.srv.authFailures = ratelimit.NewFailures(dead, h.redis.Prefix, 30, time.Minute)

	r := h.do("GET", "/api/rate-limits", nil, "X-API-Key", "wrong-key-0123456789abcdefgh", "X-Forwarded-For", "203.0.113.50")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	require.Contains(t, r.Msg, "cannot be counted")
	require.Equal(t, "2", r.Header.Get("Retry-After"))
	r = h.do("GET", "/api/rate-limits", nil, "X-Forwarded-For", "203.0.113.50")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, "a right key from the address is refused: %s", r.Msg)
	r = h.do("GET", "/api/rate-limits", nil, "X-Forwarded-For", "203.0.113.51")
	require.Equal(t, http.StatusOK, r.Status, "another address is served")
}

// ukNumber is the i-th number of the UK mobile block +44 7400 12xxxx.
func ukNumber(i int) string { return fmt.Sprintf("+4474001%05d", 20000+i) }

// Codes to one prefix that are never verified are refused once the guard
// (at its defaults) has seen enough: 429 naming the prefix and "suspected
// SMS pumping", with Retry-After. The block is visible to its tenant and
// the admin, not to a neighbour, who can neither lift it; its tenant
// lifts it, and the next code goes through at once on another replica.
func TestFraudGuardBlocksAPumpedPrefix(t *testing.T) {
	keys := tenantKeys(t, "ops/lift:"+"opslift-key-0123456789abcdefgh"+":send+admin")
	a := setup(t, options{keys: keys})
	b := setup(t, options{keys: keys, share: a})
	var refused response
	sent := 0
	for i := range 80 {
		body := smsCode(ukNumber(i), "login")
		body["clientIp"] = fmt.Sprintf("198.51.100.%d", i)
		r := a.do("POST", "/api/verification-codes", body, "X-API-Key", shopKey)
		if r.Status != http.StatusAccepted {
			refused = r
			break
		}
		sent++
	}
	require.Equal(t, 50, sent, "FRAUD_GUARD=standard: 50 unverified codes in the hour")
	require.Equal(t, http.StatusTooManyRequests, refused.Status, refused.Msg)
	require.Contains(t, refused.Msg, "suspected SMS pumping to +44740012 (GB)")
	require.Contains(t, refused.Msg, "50 codes sent to it in the last hour, 0 verified")
	require.Contains(t, refused.Msg, "DELETE /api/fraud/blocks/shop/+44740012")
	require.Equal(t, "3600", refused.Header.Get("Retry-After"))
	r := b.do("POST", "/api/verification-codes", smsCode(ukNumber(100), "login"), "X-API-Key", shopKey)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "blocked on every replica: %s", r.Msg)
	r = b.do("POST", "/api/verification-codes", smsCode(ukNumber(101), "login"), "X-API-Key", blogKey)
	require.Equal(t, http.StatusAccepted, r.Status, "another tenant's traffic to the prefix is its own: %s", r.Msg)
	requireMetric(t, a, `msgpulse_fraud_refused_codes_total{reason="pumping"} 1`)
	requireMetric(t, a, `msgpulse_fraud_blocked_prefixes 1`)

	blocks := func(h *harness, key string) []fraud.Block {
		t.Helper()
		r := h.do("GET", "/api/fraud/blocks", nil, "X-API-Key", key)
		require.Equal(t, http.StatusOK, r.Status, r.Msg)
		var out []fraud.Block
		r.data(t, &out)
		return out
	}
	mine := blocks(b, shopKey)
	require.Len(t, mine, 1)
	require.Equal(t, fraud.Block{Tenant: "shop", Prefix: "+44740012", Country: "GB", Reason: "unverified", Sent: 50,
		Since: mine[0].Since, Until: mine[0].Since.Add(time.Hour)}, mine[0])
	require.Empty(t, blocks(b, blogKey), "the neighbour sees none of shop's blocks")
	require.Len(t, blocks(b, adminKey), 1, "the admin sees every tenant's")

	lift := "/api/fraud/blocks/shop/" + url.PathEscape("+44740012")
	r = b.do("DELETE", lift, nil, "X-API-Key", blogKey)
	require.Equal(t, http.StatusNotFound, r.Status, "the neighbour cannot lift it: %s", r.Msg)
	r = b.do("DELETE", "/api/fraud/blocks/shop/+44740099", nil, "X-API-Key", shopKey)
	require.Equal(t, http.StatusNotFound, r.Status, r.Msg)
	require.Equal(t, "tenant shop has no fraud guard block of +44740099", r.Msg)
	r = b.do("DELETE", lift, nil, "X-API-Key", readKey)
	require.Equal(t, http.StatusForbidden, r.Status, "lifting needs send: %s", r.Msg)
	require.Len(t, blocks(a, shopKey), 1, "still blocked")

	r = b.do("DELETE", lift, nil, "X-API-Key", shopKey)
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	start := time.Now()
	r = a.do("POST", "/api/verification-codes", smsCode(ukNumber(200), "login"), "X-API-Key", shopKey)
	took := time.Since(start)
	require.Equal(t, http.StatusAccepted, r.Status, "lifted on b, the next code goes through a: %s", r.Msg)
	require.Less(t, took, time.Second)
	require.Empty(t, blocks(a, shopKey))
	requireMetric(t, a, `msgpulse_fraud_blocked_prefixes 0`)
	// An admin key with send lifts any tenant's; the prefix may be
	// written without its + too.
	for i := range 60 {
		a.do("POST", "/api/verification-codes", smsCode(ukNumber(300+i), "login"), "X-API-Key", blogKey)
	}
	require.Len(t, blocks(a, blogKey), 1)
	r = a.do("DELETE", "/api/fraud/blocks/blog/44740012", nil, "X-API-Key", "opslift-key-0123456789abcdefgh")
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	for _, bad := range []string{"/api/fraud/blocks/shop/+44x", "/api/fraud/blocks/sh{op}/+4474"} {
		r = a.do("DELETE", bad, nil, "X-API-Key", shopKey)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", bad, r.Msg)
	}
}

// FRAUD_GUARD_LIFT=admin: a tenant can no longer lift its own blocks
// again and again (issue 43); its DELETE is 403, whether the block exists
// or not, and an admin key lifts it.
func TestFraudGuardLiftAdminOnly(t *testing.T) {
	keys := tenantKeys(t, "ops/lift:"+"opslift-key-0123456789abcdefgh"+":send+admin")
	h := setup(t, options{keys: keys, fraud: fraud.Config{Lift: fraud.LiftAdmin}})
	for i := range 60 {
		h.do("POST", "/api/verification-codes", smsCode(ukNumber(i), "login"), "X-API-Key", shopKey)
	}
	lift := "/api/fraud/blocks/shop/" + url.PathEscape("+44740012")
	for _, path := range []string{lift, "/api/fraud/blocks/shop/+44740099", "/api/fraud/blocks/blog/+44740012"} {
		r := h.do("DELETE", path, nil, "X-API-Key", shopKey)
		require.Equal(t, http.StatusForbidden, r.Status, "%s: %s", path, r.Msg)
		require.Contains(t, r.Msg, "FRAUD_GUARD_LIFT=admin")
	}
	r := h.do("POST", "/api/verification-codes", smsCode(ukNumber(100), "login"), "X-API-Key", shopKey)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "still blocked: %s", r.Msg)
	r = h.do("DELETE", lift, nil, "X-API-Key", "opslift-key-0123456789abcdefgh")
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	r = h.do("POST", "/api/verification-codes", smsCode(ukNumber(101), "login"), "X-API-Key", shopKey)
	require.Equal(t, http.StatusAccepted, r.Status, "lifted by the admin: %s", r.Msg)
}

// Verified codes keep a prefix open: the verify endpoint tallies them for
// the guard, whichever replica checks them.
func TestVerifiedCodesKeepAPrefixOpen(t *testing.T) {
	a := setup(t, options{})
	b := setup(t, options{share: a})
	q := a.queue("sms")
	for i := range 120 {
		n := fmt.Sprintf("+4474001%05d", 30000+i)
		r := a.do("POST", "/api/verification-codes", smsCode(n, "login"))
		require.Equal(t, http.StatusAccepted, r.Status, "code %d: %s", i, r.Msg)
		code := a.code(a.get(q))
		r = b.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "sms", "recipient": n, "purpose": "login", "code": code})
		require.Equal(t, http.StatusOK, r.Status, r.Msg)
	}
}

// requireMetric fails unless the server's /metrics holds line.
func requireMetric(t *testing.T, h *harness, line string) {
	t.Helper()
	resp, err := http.Get(h.http.URL + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Contains(t, readAll(t, resp), line+"\n")
}
