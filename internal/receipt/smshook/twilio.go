package smshook

import (
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Twilio's signature is HMAC-SHA1; HMAC-SHA1 is not broken as a MAC
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
)

// vendorTwilio is the SMS provider's name (sms.NameTwilio), the lookup's
// vendor key.
const vendorTwilio = "twilio"

// TwilioSignature is X-Twilio-Signature of a POST of form to fullURL:
// base64 of HMAC-SHA1, keyed with the auth token, over the URL followed by
// each parameter's name and value, sorted by name (and a name's values
// sorted), as Twilio's own validators compute it.
// https://www.twilio.com/docs/usage/security#validating-requests
func TwilioSignature(authToken, fullURL string, form url.Values) string {
	names := make([]string, 0, len(form))
	for k := range form {
		names = append(names, k)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(fullURL)
	for _, k := range names {
		vs := append([]string(nil), form[k]...)
		sort.Strings(vs)
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(v)
		}
	}
	mac := hmac.New(sha1.New, []byte(authToken))
	mac.Write([]byte(b.String()))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// twilioURL is the URL Twilio requested, as it signed it: PUBLIC_BASE_URL
// and the hook's path, never the Host header (a proxy in front may rewrite
// it, and a forger controls it), with the query string if there was one.
func (h *Hooks) twilioURL(r *http.Request) string {
	u := h.cfg.PublicBaseURL + TwilioPath
	if r.URL.RawQuery != "" {
		u += "?" + r.URL.RawQuery
	}
	return u
}

// twilio is Twilio's status callback: one form per status change of one
// message. https://www.twilio.com/docs/messaging/guides/track-outbound-message-status
func (h *Hooks) twilio(c *echo.Context) error {
	r := c.Request()
	body, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, maxTwilioBody))
	if err != nil {
		return c.NoContent(http.StatusRequestEntityTooLarge)
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return c.NoContent(http.StatusBadRequest)
	}
	got, err := base64.StdEncoding.DecodeString(r.Header.Get("X-Twilio-Signature"))
	want, _ := base64.StdEncoding.DecodeString(TwilioSignature(h.cfg.TwilioAuthToken, h.twilioURL(r), form))
	if err != nil || !hmac.Equal(got, want) {
		return c.NoContent(http.StatusForbidden)
	}
	rc, ok := twilioReceipt(form, h.now())
	id := form.Get("MessageSid")
	if id == "" {
		id = form.Get("SmsSid")
	}
	if !ok || id == "" {
		// A status we do not read (an inbound message's, "canceled"):
		// signed, so Twilio's, and nothing to apply.
		return c.NoContent(http.StatusNoContent)
	}
	var o outcome
	h.apply(r.Context(), &o, vendorTwilio, id, sameNumber(form.Get("To")), rc)
	h.done(vendorTwilio, o)
	if o.err != nil {
		return c.NoContent(http.StatusServiceUnavailable)
	}
	return c.NoContent(http.StatusNoContent)
}

// twilioReceipt reads a status callback: its kind, code and time. ok is
// false for a status that is not about an outbound message's delivery.
func twilioReceipt(form url.Values, now time.Time) (receipt.Receipt, bool) {
	st := form.Get("MessageStatus")
	if st == "" {
		st = form.Get("SmsStatus")
	}
	var r receipt.Receipt
	switch st {
	case "delivered", "read":
		r.Kind = receipt.Delivered
		r.At = twilioDoneDate(form.Get("RawDlrDoneDate"), now)
	case "undelivered", "failed":
		r.Kind = receipt.Undelivered
		r.Code = form.Get("ErrorCode")
		r.Detail = form.Get("ErrorMessage")
		r.Suppress = TwilioSuppress(r.Code)
		r.At = twilioDoneDate(form.Get("RawDlrDoneDate"), now)
	case "queued", "accepted", "scheduled", "sending", "sent":
		r.Kind = receipt.Accepted
		r.Code = st
	default:
		return receipt.Receipt{}, false
	}
	return r, true
}

// twilioDoneDate reads RawDlrDoneDate, the carrier's delivery receipt's
// done date (YYMMDDhhmm, to the minute, in no stated zone: taken as UTC,
// as most carriers send it). Absent, unreadable or later than now: zero,
// and the receipt is dated when applied.
func twilioDoneDate(v string, now time.Time) time.Time {
	if v == "" {
		return time.Time{}
	}
	t, err := time.ParseInLocation("0601021504", v, time.UTC)
	if err != nil || t.After(now) {
		return time.Time{}
	}
	return t
}

// TwilioSuppress says which Twilio error codes put the number on the
// suppression list, and why (docs/receipts.md has the table):
//
//   - 21610 (the recipient replied STOP): opted out.
//   - 30005 (unknown destination handset: the number does not exist) and
//     30006 (landline or unreachable carrier: it can never take an SMS):
//     unreachable.
//
// Everything else is not suppressed: 30003 (handset off or out of
// coverage) and 30008 (unknown error) pass with time, 30004 (blocked),
// 30007 (carrier filtering) and the A2P registration errors (30032–30034)
// are about the sender or the content, not the number.
func TwilioSuppress(code string) receipt.Suppress {
	switch code {
	case "21610":
		return receipt.SuppressOptOut
	case "30005", "30006":
		return receipt.SuppressUnreachable
	}
	return receipt.SuppressNone
}

// sameNumber matches a report's number, already E.164 (Twilio's To), to
// the message's: Twilio always sends To, so an empty one does not match.
func sameNumber(to string) func(smslookup.Entry) (string, bool) {
	return func(e smslookup.Entry) (string, bool) {
		return e.Recipient, to != "" && to == e.Recipient
	}
}
