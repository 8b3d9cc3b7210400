package smshook_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

const (
	publicBase   = "https://msg.example.com"
	twilioToken  = "twilio-auth-token-0123456789abcdef"
	aliyunToken  = "aliyun-hook-token-0123456789"
	tencentToken = "tencent-hook-token-0123456789"
	number       = "+8613900001234"
	usNumber     = "+14155550100"
)

// recorder is a receipt.Applier that records what it is given and answers
// err (the real one is engineer F's internal/receipt/applier).
type recorder struct {
	mu   sync.Mutex
	got  []receipt.Receipt
	errs error
}

func (r *recorder) Apply(_ context.Context, rc receipt.Receipt) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := rc.Validate(); err != nil {
		return err
	}
	r.got = append(r.got, rc)
	return r.errs
}

func (r *recorder) receipts() []receipt.Receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt.Receipt(nil), r.got...)
}

type env struct {
	url     string // the test server's: what the request really goes to
	applier *recorder
	lookup  *smslookup.Store
	now     time.Time
}

type opts struct {
	cfg    *smshook.Config // nil: every hook on
	deadDB bool            // the lookup's Redis is unreachable
}

func setup(t *testing.T, o opts) *env {
	t.Helper()
	r := testenv.NewRedis(t)
	lookup := smslookup.New(r.Client, r.Prefix)
	ctx := testenv.Context(t, 5*time.Second)
	for _, e := range []struct{ vendor, id, task, to string }{
		{"twilio", "SM0123456789abcdef0123456789abcdef", "task-tw", usNumber},
		{"aliyun", "900619767661^4112412416219", "task-ali", number},
		{"aliyun", "900619767661^4112412416220", "task-ali-us", usNumber},
		{"tencent", "2019:6512963862795239", "task-tc", number},
	} {
		require.NoError(t, lookup.Put(ctx, e.vendor, e.id, smslookup.Entry{TaskID: e.task, Recipient: e.to}))
	}
	var l smshook.Lookup = lookup
	if o.deadDB {
		dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = dead.Close() })
		l = smslookup.New(dead, r.Prefix)
	}
	cfg := smshook.Config{PublicBaseURL: publicBase, TwilioAuthToken: twilioToken, AliyunToken: aliyunToken, TencentToken: tencentToken}
	if o.cfg != nil {
		cfg = *o.cfg
	}
	a := &recorder{}
	h, err := smshook.New(cfg, a, l, nil)
	require.NoError(t, err)
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	smshook.SetNow(h, func() time.Time { return now })
	e := echo.New()
	for _, rt := range h.Routes() {
		e.Any(rt.Path, rt.Handler)
	}
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return &env{url: srv.URL, applier: a, lookup: lookup, now: now}
}

func post(t *testing.T, u, contentType, body string, header http.Header) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), http.MethodPost, u, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", contentType)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// twilioForm is a status callback as Twilio posts it.
func twilioForm(status, errorCode string) url.Values {
	f := url.Values{
		"MessageSid": {"SM0123456789abcdef0123456789abcdef"}, "SmsSid": {"SM0123456789abcdef0123456789abcdef"},
		"MessageStatus": {status}, "SmsStatus": {status}, "AccountSid": {"ACaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
		"To": {usNumber}, "From": {"+15005550006"}, "ApiVersion": {"2010-04-01"},
	}
	if errorCode != "" {
		f.Set("ErrorCode", errorCode)
	}
	return f
}

// twilioSend posts form to the hook as Twilio would, signed over signURL
// (Twilio signs the URL it requested: the StatusCallback, PUBLIC_BASE_URL's);
// tamper changes the body after it was signed.
func (e *env) twilioSend(t *testing.T, form url.Values, signURL string, tamper func(url.Values), sig *string) (int, string) {
	t.Helper()
	s := smshook.TwilioSignature(twilioToken, signURL, form)
	if sig != nil {
		s = *sig
	}
	if tamper != nil {
		tamper(form)
	}
	h := http.Header{}
	if s != "" {
		h.Set("X-Twilio-Signature", s)
	}
	return post(t, e.url+smshook.TwilioPath, "application/x-www-form-urlencoded", form.Encode(), h)
}

func TestTwilioStatusCallback(t *testing.T) {
	done := time.Date(2026, 11, 29, 11, 58, 0, 0, time.UTC)
	empty := ""
	wrong := smshook.TwilioSignature("another-token", publicBase+smshook.TwilioPath, twilioForm("delivered", ""))
	for _, tc := range []struct {
		name    string
		form    url.Values
		signURL string // "" = PUBLIC_BASE_URL's
		tamper  func(url.Values)
		sig     *string
		applier error
		status  int
		want    []receipt.Receipt
	}{
		{name: "delivered, dated by the carrier's receipt", form: withParam(twilioForm("delivered", ""), "RawDlrDoneDate", "2611291158"), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Delivered, Source: "twilio", Recipient: usNumber, At: done}}},
		{name: "delivered without a date: now", form: twilioForm("delivered", ""), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Delivered, Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}},
		{name: "undelivered 30003 is named and suppresses nobody", form: twilioForm("undelivered", "30003"), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Undelivered, Code: "30003", Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}},
		{name: "undelivered 30006 (landline) suppresses the number", form: twilioForm("undelivered", "30006"), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Undelivered, Code: "30006", Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Suppress: receipt.SuppressUnreachable}}},
		{name: "failed 21610 is an opt-out", form: twilioForm("failed", "21610"), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Undelivered, Code: "21610", Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC), Suppress: receipt.SuppressOptOut}}},
		{name: "sent is an accepted event", form: twilioForm("sent", ""), status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Accepted, Code: "sent", Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}},
		{name: "wrong signature: 403", form: twilioForm("delivered", ""), sig: &wrong, status: 403},
		{name: "no signature: 403", form: twilioForm("delivered", ""), sig: &empty, status: 403},
		{name: "body changed after signing: 403", form: twilioForm("delivered", ""), tamper: func(f url.Values) { f.Set("MessageStatus", "undelivered"); f.Set("ErrorCode", "30006") }, status: 403},
		{name: "parameter added after signing: 403", form: twilioForm("undelivered", "30003"), tamper: func(f url.Values) { f.Set("ErrorCode", "30006") }, status: 403},
		{name: "signed over the Host the request reached, not PUBLIC_BASE_URL: 403", form: twilioForm("delivered", ""), signURL: "host", status: 403},
		{name: "unknown MessageSid: answered, not applied", form: withParam(twilioForm("delivered", ""), "MessageSid", "SMffffffffffffffffffffffffffffffff"), status: 204},
		{name: "another number than the message's: not applied", form: withParam(twilioForm("delivered", ""), "To", "+14155550199"), status: 204},
		{name: "an inbound message's status: nothing to apply", form: twilioForm("received", ""), status: 204},
		{name: "the applier knows no such message: answered", form: twilioForm("delivered", ""), applier: receipt.ErrUnknownMessage, status: 204,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Delivered, Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}},
		{name: "the applier cannot store it: 5xx, Twilio retries", form: twilioForm("delivered", ""), applier: errors.New("redis: connection refused"), status: 503,
			want: []receipt.Receipt{{TaskID: "task-tw", Channel: "sms", Kind: receipt.Delivered, Source: "twilio", Recipient: usNumber, At: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, opts{})
			e.applier.errs = tc.applier
			signURL := publicBase + smshook.TwilioPath
			if tc.signURL == "host" {
				signURL = e.url + smshook.TwilioPath
			}
			status, _ := e.twilioSend(t, tc.form, signURL, tc.tamper, tc.sig)
			require.Equal(t, tc.status, status)
			require.Equal(t, tc.want, e.applier.receipts())
		})
	}
}

// The request reaches the server at its own address (Host 127.0.0.1:port),
// and the signature is checked over PUBLIC_BASE_URL all the same; a Host
// header naming PUBLIC_BASE_URL's host changes nothing either.
func TestTwilioSignatureIsOverPublicBaseURLWhateverTheHost(t *testing.T) {
	e := setup(t, opts{})
	form := twilioForm("delivered", "")
	for _, host := range []string{"", "msg.example.com", "evil.example.net"} {
		h := http.Header{"X-Twilio-Signature": {smshook.TwilioSignature(twilioToken, publicBase+smshook.TwilioPath, form)}}
		req, err := http.NewRequestWithContext(testenv.Context(t, 5*time.Second), http.MethodPost, e.url+smshook.TwilioPath, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header = h
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if host != "" {
			req.Host = host
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode, "Host %q", host)
	}
	require.Len(t, e.applier.receipts(), 3)
}

func TestLookupDownIs5xx(t *testing.T) {
	e := setup(t, opts{deadDB: true})
	status, _ := e.twilioSend(t, twilioForm("delivered", ""), publicBase+smshook.TwilioPath, nil, nil)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, body := post(t, e.url+"/hooks/sms/aliyun/"+aliyunToken, "application/json",
		`[{"phone_number":"13900001234","report_time":"2026-11-29 19:58:00","success":true,"err_code":"DELIVERED","biz_id":"900619767661^4112412416219"}]`, nil)
	require.Equal(t, http.StatusServiceUnavailable, status, body)
	require.Empty(t, e.applier.receipts())
}

func TestHooksOffAre404(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  smshook.Config
		path string
	}{
		{"twilio without PUBLIC_BASE_URL", smshook.Config{TwilioAuthToken: twilioToken}, smshook.TwilioPath},
		{"twilio without its token", smshook.Config{PublicBaseURL: publicBase}, smshook.TwilioPath},
		{"aliyun without its token", smshook.Config{}, "/hooks/sms/aliyun/" + aliyunToken},
		{"tencent without its token", smshook.Config{}, "/hooks/sms/tencent/" + tencentToken},
		{"no such hook", smshook.Config{AliyunToken: aliyunToken}, "/hooks/sms/other/" + aliyunToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t, opts{cfg: &tc.cfg})
			status, body := post(t, e.url+tc.path, "application/json", `[]`, nil)
			require.Equal(t, http.StatusNotFound, status)
			require.NotContains(t, body, "token", "a 404 never echoes the path")
		})
	}
}

func withParam(f url.Values, k, v string) url.Values {
	f.Set(k, v)
	return f
}
