package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

const (
	twilioSID   = "AC0123456789abcdef0123456789abcdef"
	twilioToken = "e2e-twilio-auth-token-0123456789"
	twilioFrom  = "+15005550006"
)

// twilioFake is Twilio's Messages API as msgpulse's provider meets it: it
// checks the account's Basic auth, the form's To, From and Body and a
// StatusCallback that must be an absolute URL (Twilio's 21609), refuses
// the numbers in optedOut with 21610 as Twilio does after a STOP, and
// remembers each accepted message's sid and callback by number.
type twilioFake struct {
	*httptest.Server
	optedOut map[string]bool
	mu       sync.Mutex
	sent     map[string]url.Values // To → the form, with the sid it got as "Sid"
}

func newTwilioFake(t *testing.T, optedOut ...string) *twilioFake {
	f := &twilioFake{optedOut: map[string]bool{}, sent: map[string]url.Values{}}
	for _, n := range optedOut {
		f.optedOut[n] = true
	}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

func (f *twilioFake) serve(w http.ResponseWriter, r *http.Request) {
	fail := func(status, code int, msg string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": code, "message": msg, "status": status})
	}
	user, pass, ok := r.BasicAuth()
	if !ok || user != twilioSID || pass != twilioToken {
		fail(http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+twilioSID+"/Messages.json" {
		fail(http.StatusNotFound, 20404, "The requested resource was not found")
		return
	}
	if err := r.ParseForm(); err != nil {
		fail(http.StatusBadRequest, 21602, "Message body is required")
		return
	}
	to, body := r.PostForm.Get("To"), r.PostForm.Get("Body")
	switch {
	case to == "":
		fail(http.StatusBadRequest, 21604, "A 'To' phone number is required")
		return
	case body == "":
		fail(http.StatusBadRequest, 21602, "Message body is required")
		return
	case r.PostForm.Get("From") == "" && r.PostForm.Get("MessagingServiceSid") == "":
		fail(http.StatusBadRequest, 21603, "A 'From' phone number is required")
		return
	}
	if cb := r.PostForm.Get("StatusCallback"); cb != "" {
		if u, err := url.Parse(cb); err != nil || !u.IsAbs() {
			fail(http.StatusBadRequest, 21609, "Invalid StatusCallback")
			return
		}
	}
	if f.optedOut[to] {
		fail(http.StatusBadRequest, 21610, "Attempt to send to unsubscribed recipient")
		return
	}
	f.mu.Lock()
	sid := "SM" + strconv.Itoa(100000+len(f.sent))
	form := r.PostForm
	form.Set("Sid", sid)
	f.sent[to] = form
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(map[string]any{"sid": sid, "status": "queued", "to": to})
}

func (f *twilioFake) form(to string) url.Values {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent[to]
}

// receipt posts a Twilio status callback for the SMS sent to `to`, signed
// as Twilio signs it (sign = false: with a wrong signature); alter, when
// set, changes the form after signing.
func (f *twilioFake) receipt(t *testing.T, to string, fields map[string]string, sign bool, alter func(url.Values)) int {
	t.Helper()
	sent := f.form(to)
	require.NotNil(t, sent, "an SMS to %s reached Twilio", to)
	cb := sent.Get("StatusCallback")
	form := url.Values{"MessageSid": {sent.Get("Sid")}, "AccountSid": {twilioSID}, "To": {to}, "From": {twilioFrom}}
	for k, v := range fields {
		form.Set(k, v)
	}
	sig := smshook.TwilioSignature(twilioToken, cb, form)
	if !sign {
		sig = smshook.TwilioSignature("not-the-auth-token-0123456789", cb, form)
	}
	if alter != nil {
		alter(form)
	}
	req, err := http.NewRequest(http.MethodPost, cb, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-Twilio-Signature", sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	return resp.StatusCode
}

// Twilio's delivery reports through the real binaries: a send carries
// StatusCallback under PUBLIC_BASE_URL; signed reports move sent to
// delivered or undelivered (30003 named); a wrong signature or a body
// changed after signing is 403 and changes nothing; a late "sent" leaves
// delivered; a send Twilio refuses with 21610 suppresses the number.
func TestTwilioReceiptsThroughTheBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: runs the binaries")
	}
	const delivered, unreachable, stopped = "+12015550123", "+12015550124", "+12015550125"
	tw := newTwilioFake(t, stopped)
	addr := testenv.FreeAddr(t)
	s := newSystem(t, "SMS_PROVIDER=twilio", "TWILIO_ACCOUNT_SID="+twilioSID, "TWILIO_AUTH_TOKEN="+twilioToken, "TWILIO_FROM="+twilioFrom,
		"TWILIO_BASE_URL="+tw.URL, "PUBLIC_BASE_URL=http://"+addr, "RECEIPT_SECRET="+e2eReceiptSecret)
	_, c := s.api("HTTP_ADDR=" + addr)
	s.consumer("c1")
	ctx := testenv.Context(t, 2*time.Minute)
	code := func(to string) (*client.VerificationCode, error) {
		return c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: to, Purpose: "login"})
	}
	sentCode := func(to string) string {
		t.Helper()
		vc, err := code(to)
		require.NoError(t, err)
		testenv.WaitFor(t, 20*time.Second, "sent to "+to, func() bool { return statusOf(ctx, c, vc.TaskID) == client.StatusSent })
		require.Equal(t, "http://"+addr+"/hooks/sms/twilio", tw.form(to).Get("StatusCallback"))
		return vc.TaskID
	}

	id := sentCode(delivered)
	require.Equal(t, http.StatusForbidden, tw.receipt(t, delivered, map[string]string{"MessageStatus": "delivered"}, false, nil), "a wrong signature")
	require.Equal(t, http.StatusForbidden, tw.receipt(t, delivered, map[string]string{"MessageStatus": "undelivered", "ErrorCode": "30003"}, true,
		func(f url.Values) { f.Set("ErrorCode", "30005") }), "a body changed after signing")
	require.Equal(t, client.StatusSent, statusOf(ctx, c, id), "a refused report changes nothing")
	require.Less(t, tw.receipt(t, delivered, map[string]string{"MessageStatus": "delivered"}, true, nil), 300)
	testenv.WaitFor(t, 10*time.Second, "delivered", func() bool { return statusOf(ctx, c, id) == client.StatusDelivered })
	require.Less(t, tw.receipt(t, delivered, map[string]string{"MessageStatus": "sent"}, true, nil), 300, "a late sent")
	require.Equal(t, client.StatusDelivered, statusOf(ctx, c, id), "a late sent never undoes delivered")

	id = sentCode(unreachable)
	require.Less(t, tw.receipt(t, unreachable, map[string]string{"MessageStatus": "undelivered", "ErrorCode": "30003"}, true, nil), 300)
	testenv.WaitFor(t, 10*time.Second, "undelivered", func() bool { return statusOf(ctx, c, id) == client.StatusUndelivered })
	m, err := c.GetMessage(ctx, id)
	require.NoError(t, err)
	require.Equal(t, "30003", m.ReceiptCode)

	vc, err := code(stopped)
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "the number's suppression", func() bool {
		page, err := c.ListSuppressions(context.Background(), client.SuppressionFilter{Channel: "sms", Recipient: stopped})
		return err == nil && len(page.Entries) == 1 && page.Entries[0].Reason == "opt_out"
	})
	require.NotEqual(t, client.StatusSent, statusOf(ctx, c, vc.TaskID))
	_, err = c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageSMS, TemplateCode: "notice", Recipient: stopped,
		Variables: map[string]string{"title": "t", "content": "c"}})
	refusedAs(t, err, "recipient is suppressed: opted out 21610")
}
