package api

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/suppression"
)

// rootKey is an admin that may also send: it may add and remove other
// tenants' entries.
const rootKey = "root-key-0123456789abcdefgh"

// bouncedOn is when the tests' entries were made.
var bouncedOn = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

// setupSuppressed is a harness with tenantKeys (and rootKey) where shop's
// list holds a hard bounce, an unsubscribe and an opted-out number.
func setupSuppressed(t *testing.T) *harness {
	t.Helper()
	h := setup(t, options{keys: tenantKeys(t, "ops/root:"+rootKey+":send+read+admin")})
	for _, e := range []suppression.Entry{
		{Channel: "email", Recipient: "bounce@example.com", Reason: suppression.HardBounce, Code: "5.1.1", TaskID: "t-bounce"},
		{Channel: "email", Recipient: "unsub@example.com", Reason: suppression.Unsubscribe},
		{Channel: "sms", Recipient: "+14155550100", Reason: suppression.OptOut, Code: "21610"},
	} {
		e.Tenant, e.At = "shop", bouncedOn
		require.NoError(t, h.suppression.Add(context.Background(), e))
	}
	return h
}

func smsNotice(recipient string) map[string]any {
	return map[string]any{"messageType": "SMS", "templateCode": "notice", "recipient": recipient,
		"variables": map[string]string{"title": "t", "content": "c"}}
}

// A code or a notice to a suppressed recipient is 422 naming the entry,
// and leaves nothing behind: no message, status record, code, count or
// Idempotency-Key entry. A code goes to a recipient who only
// unsubscribed; the list is the tenant's own.
func TestSuppressedRecipientIsRefused(t *testing.T) {
	tests := []struct {
		name, key, path string
		body            map[string]any
		want            int
		msg             string
	}{
		{"code to a bounced mailbox", shopKey, "/api/verification-codes", codeRequest("Bounce@Example.com", "login"), 422,
			"recipient is suppressed: hard bounce 5.1.1 on 2026-11-29"},
		{"notice to a bounced mailbox", shopKey, "/api/messages/send", notice("bounce@example.com"), 422,
			"recipient is suppressed: hard bounce 5.1.1 on 2026-11-29"},
		{"notice to an unsubscribed reader", shopKey, "/api/messages/send", notice("unsub@example.com"), 422,
			"recipient is suppressed: unsubscribed on 2026-11-29"},
		{"code to an unsubscribed reader", shopKey, "/api/verification-codes", codeRequest("unsub@example.com", "login"), 202, ""},
		{"code to an opted-out number", shopKey, "/api/verification-codes", map[string]any{"channel": "sms", "recipient": "+1 415 555 0100", "purpose": "login"}, 422,
			"recipient is suppressed: opted out 21610 on 2026-11-29"},
		{"notice to an opted-out number", shopKey, "/api/messages/send", smsNotice("+14155550100"), 422,
			"recipient is suppressed: opted out 21610 on 2026-11-29"},
		{"another tenant's list is not this one's", blogKey, "/api/messages/send", notice("bounce@example.com"), 202, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := setupSuppressed(t)
			r := h.do("POST", tc.path, tc.body, "X-API-Key", tc.key, "Idempotency-Key", "k-"+tc.name)
			require.Equal(t, tc.want, r.Status, r.Msg)
			if tc.want != 422 {
				return
			}
			require.Equal(t, tc.msg, r.Msg)
			channel := "mail"
			if strings.Contains(tc.name, "number") {
				channel = "sms"
			}
			h.nothingKept(channel)
			require.Empty(t, h.keysMatching("verify:*"), "no code")
			require.Empty(t, h.keysMatching("idem:*"), "no Idempotency-Key entry")
		})
	}
}

// After DELETE the recipient gets notices again; the same
// Idempotency-Key as the refused request is a new request.
func TestDeleteSuppressionLetsSendsThrough(t *testing.T) {
	h := setupSuppressed(t)
	send := func() response {
		return h.do("POST", "/api/messages/send", notice("bounce@example.com"), "X-API-Key", shopKey, "Idempotency-Key", "same")
	}
	require.Equal(t, 422, send().Status)
	r := h.do("DELETE", "/api/suppressions/email/"+url.PathEscape("Bounce@example.com"), nil, "X-API-Key", shopKey)
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	require.Equal(t, http.StatusAccepted, send().Status)
	r = h.do("DELETE", "/api/suppressions/email/bounce@example.com", nil, "X-API-Key", shopKey)
	require.Equal(t, http.StatusNotFound, r.Status, r.Msg)
}

// A batch lists a suppressed recipient under rejected with the 422 a
// single send would get, and sends the others: with an Idempotency-Key
// (the recipients go one by one until its entry is held) and without
// (they go together).
func TestBatchRejectsSuppressedRecipients(t *testing.T) {
	for _, key := range []string{"", "batch-key"} {
		t.Run("idempotency key "+key, func(t *testing.T) {
			h := setupSuppressed(t)
			body := map[string]any{"messageType": "EMAIL", "templateCode": "notice", "variables": map[string]string{"title": "t", "content": "c"},
				"recipients": []string{"bounce@example.com", "a@example.com", "UNSUB@example.com", "b@example.com"}}
			r := h.do("POST", "/api/messages/batch", body, "X-API-Key", shopKey, "Idempotency-Key", key)
			require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
			var res BatchResult
			r.data(t, &res)
			var accepted []string
			for _, a := range res.Accepted {
				accepted = append(accepted, a.Recipient)
			}
			require.Equal(t, []string{"a@example.com", "b@example.com"}, accepted)
			require.Equal(t, []BatchRejected{
				{Recipient: "bounce@example.com", Code: 422, Msg: "recipient is suppressed: hard bounce 5.1.1 on 2026-11-29"},
				{Recipient: "unsub@example.com", Code: 422, Msg: "recipient is suppressed: unsubscribed on 2026-11-29"},
			}, res.Rejected)
			require.Equal(t, 2, h.depth(h.queue("mail")+".normal"))
		})
	}
	// Every recipient suppressed: the batch is what a single send gets.
	h := setupSuppressed(t)
	body := map[string]any{"messageType": "EMAIL", "templateCode": "notice", "variables": map[string]string{"title": "t", "content": "c"},
		"recipients": []string{"bounce@example.com", "unsub@example.com"}}
	r := h.do("POST", "/api/messages/batch", body, "X-API-Key", shopKey)
	require.Equal(t, 422, r.Status, r.Msg)
	h.nothingKept("mail")
}

func (h *harness) listSuppressions(key, query string) (suppression.Page, response) {
	h.t.Helper()
	r := h.do("GET", "/api/suppressions"+query, nil, "X-API-Key", key)
	var p suppression.Page
	if r.Status == http.StatusOK {
		r.data(h.t, &p)
	}
	return p, r
}

func recipients(p suppression.Page) []string {
	var out []string
	for _, e := range p.Entries {
		out = append(out, e.Tenant+"/"+e.Channel+":"+e.Recipient)
	}
	return out
}

// A tenant lists, adds and removes its own entries only, whatever its
// neighbour tries; an admin lists every tenant's, and with send may edit
// them by naming the tenant.
func TestSuppressionEndpointsKeepTenantsApart(t *testing.T) {
	h := setupSuppressed(t)
	shopList := []string{"shop/email:bounce@example.com", "shop/email:unsub@example.com", "shop/sms:+14155550100"}

	// blog adds its own by hand: reason manual, normalised.
	r := h.do("POST", "/api/suppressions", map[string]any{"channel": "email", "recipient": "Mallory@Example.com"}, "X-API-Key", blogKey)
	require.Equal(t, http.StatusCreated, r.Status, r.Msg)
	var added suppression.Entry
	r.data(t, &added)
	require.Equal(t, "blog", added.Tenant)
	require.Equal(t, "mallory@example.com", added.Recipient)
	require.Equal(t, suppression.Manual, added.Reason)

	// blog misbehaves: it cannot list, add to or remove from shop's.
	p, r := h.listSuppressions(blogKey, "")
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	require.Equal(t, []string{"blog/email:mallory@example.com"}, recipients(p))
	_, r = h.listSuppressions(blogKey, "?tenant=shop")
	require.Equal(t, http.StatusForbidden, r.Status, r.Msg)
	r = h.do("POST", "/api/suppressions", map[string]any{"channel": "email", "recipient": "x@example.com", "tenant": "shop"}, "X-API-Key", blogKey)
	require.Equal(t, http.StatusForbidden, r.Status, r.Msg)
	for _, path := range []string{"/api/suppressions/email/bounce@example.com", "/api/suppressions/email/bounce@example.com?tenant=shop"} {
		r = h.do("DELETE", path, nil, "X-API-Key", blogKey)
		require.Equal(t, http.StatusNotFound, r.Status, r.Msg)
	}
	p, _ = h.listSuppressions(shopKey, "")
	require.Equal(t, shopList, recipients(p), "shop's list is as it was")

	// A read-only key reads and does not edit.
	p, r = h.listSuppressions(readKey, "?channel=sms")
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	require.Equal(t, []string{"shop/sms:+14155550100"}, recipients(p))
	r = h.do("DELETE", "/api/suppressions/sms/"+url.PathEscape("+14155550100"), nil, "X-API-Key", readKey)
	require.Equal(t, http.StatusForbidden, r.Status, r.Msg)

	// The admin lists every tenant's, or one's; with send it removes
	// another tenant's entry by naming it.
	p, _ = h.listSuppressions(adminKey, "")
	require.Equal(t, append([]string{"blog/email:mallory@example.com"}, shopList...), recipients(p))
	p, _ = h.listSuppressions(adminKey, "?tenant=shop&recipient=BOUNCE@example.com")
	require.Equal(t, []string{"shop/email:bounce@example.com"}, recipients(p))
	r = h.do("DELETE", "/api/suppressions/sms/%2B14155550100?tenant=shop", nil, "X-API-Key", rootKey)
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	r = h.do("POST", "/api/suppressions", map[string]any{"channel": "sms", "recipient": "+1 415 555 0100", "tenant": "shop", "reason": "unreachable", "code": "30005"}, "X-API-Key", rootKey)
	require.Equal(t, http.StatusCreated, r.Status, r.Msg)
	got, ok, err := h.suppression.Get(context.Background(), "shop", "sms", "+14155550100")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, suppression.Unreachable, got.Reason)
}

// Pages are bounded and follow their cursor; bad input is 400.
func TestListSuppressionsPagesAndValidates(t *testing.T) {
	h := setupSuppressed(t)
	var all []string
	query := "?limit=2"
	for range 5 {
		p, r := h.listSuppressions(shopKey, query)
		require.Equal(t, http.StatusOK, r.Status, r.Msg)
		require.LessOrEqual(t, len(p.Entries), 2)
		all = append(all, recipients(p)...)
		if p.Next == "" {
			break
		}
		query = "?limit=2&cursor=" + url.QueryEscape(p.Next)
	}
	require.Equal(t, []string{"shop/email:bounce@example.com", "shop/email:unsub@example.com", "shop/sms:+14155550100"}, all)
	for _, q := range []string{"?limit=0", "?limit=5000", "?channel=wecom", "?cursor=zzz", "?channel=email&recipient=not-an-address"} {
		_, r := h.listSuppressions(shopKey, q)
		require.Equal(t, http.StatusBadRequest, r.Status, "%s: %s", q, r.Msg)
	}
	for _, body := range []map[string]any{
		{"channel": "wecom", "recipient": "zhangsan"},
		{"channel": "email", "recipient": "not-an-address"},
		{"channel": "email", "recipient": "a@example.com", "reason": "bored"},
	} {
		r := h.do("POST", "/api/suppressions", body, "X-API-Key", shopKey)
		require.Equal(t, http.StatusBadRequest, r.Status, "%v: %s", body, r.Msg)
	}
	r := h.do("DELETE", "/api/suppressions/wecom/zhangsan", nil, "X-API-Key", shopKey)
	require.Equal(t, http.StatusBadRequest, r.Status, r.Msg)
}
