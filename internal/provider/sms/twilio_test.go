package sms

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

const (
	twilioSID   = "ACaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	twilioToken = "your_auth_token"
	twilioFrom  = "+15005550006"
)

// twilioServer is a fake api.twilio.com Messages endpoint.
type twilioServer struct {
	mu    sync.Mutex
	last  url.Values
	calls int
}

func twilioError(status, code int, msg string, headers ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = fmt.Fprintf(w, `{"code":%d,"message":%q,"more_info":"https://www.twilio.com/docs/errors/%d","status":%d}`, code, msg, code, status)
	}
}

func (s *twilioServer) handler(reply func(http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.calls++
		s.mu.Unlock()
		user, pass, hasAuth := r.BasicAuth()
		if !hasAuth || subtle.ConstantTimeCompare([]byte(user+":"+pass), []byte(twilioSID+":"+twilioToken)) != 1 {
			twilioError(401, 20003, "Authenticate")(w)
			return
		}
		if r.Method != http.MethodPost || r.URL.Path != "/2010-04-01/Accounts/"+twilioSID+"/Messages.json" {
			twilioError(404, 20404, "The requested resource was not found")(w)
			return
		}
		if r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || r.ParseForm() != nil {
			twilioError(400, 21610, "bad form")(w)
			return
		}
		f := r.PostForm
		switch {
		case f.Get("To") == "":
			twilioError(400, 21604, "A 'To' phone number is required.")(w)
			return
		case f.Get("Body") == "":
			twilioError(400, 21602, "Message body is required.")(w)
			return
		case (f.Get("From") == "") == (f.Get("MessagingServiceSid") == ""):
			twilioError(400, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message.")(w)
			return
		case f.Has("StatusCallback") && !validCallback(f.Get("StatusCallback")):
			twilioError(400, 21609, "Invalid 'StatusCallback'")(w)
			return
		}
		s.mu.Lock()
		s.last = f
		s.mu.Unlock()
		reply(w)
	}
}

// validCallback is Twilio's check of a StatusCallback: a fully qualified
// http(s) URL of at most 4000 characters whose host has no underscore.
func validCallback(v string) bool {
	u, err := url.Parse(v)
	return err == nil && len(v) <= 4000 && (u.Scheme == "https" || u.Scheme == "http") && u.Host != "" && !strings.Contains(u.Host, "_")
}

func setupTwilio(t *testing.T, cfg TwilioConfig, reply func(http.ResponseWriter)) (provider.SMSSender, *twilioServer) {
	t.Helper()
	fs := &twilioServer{}
	srv := httptest.NewServer(fs.handler(reply))
	t.Cleanup(srv.Close)
	if cfg.AccountSID == "" {
		cfg.AccountSID = twilioSID
	}
	if cfg.AuthToken == "" {
		cfg.AuthToken = twilioToken
	}
	if cfg.From == "" && cfg.MessagingServiceSID == "" {
		cfg.From = twilioFrom
	}
	cfg.BaseURL = srv.URL + "/"
	s, err := New(NameTwilio, Config{Twilio: cfg}, zap.NewNop(), nil)
	require.NoError(t, err)
	return s, fs
}

func TestTwilioSend(t *testing.T) {
	t.Parallel()
	created := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = fmt.Fprintf(w, `{"account_sid":%q,"api_version":"2010-04-01","body":"...","direction":"outbound-api","from":%q,"sid":"SM1f0e8ae6ade43cb3c0ce4525424e404f","status":"queued","to":"+8613900001234"}`, twilioSID, twilioFrom)
	}
	for _, tc := range []struct {
		name      string
		cfg       TwilioConfig
		msg       func(provider.SMS) provider.SMS
		reply     func(http.ResponseWriter)
		wantID    string
		wantForm  url.Values
		wantErr   *wantErr
		wantCalls int
	}{
		{name: "created with From", reply: created, wantID: "SM1f0e8ae6ade43cb3c0ce4525424e404f",
			wantForm: url.Values{"To": {testTo}, "From": {twilioFrom}, "Body": {verifySMS().Text}}},
		{name: "created with messaging service", cfg: TwilioConfig{MessagingServiceSID: "MG9752274e9e519418a7406176694466fa", From: twilioFrom}, reply: created,
			wantID: "SM1f0e8ae6ade43cb3c0ce4525424e404f", wantForm: url.Values{"To": {testTo}, "MessagingServiceSid": {"MG9752274e9e519418a7406176694466fa"}, "Body": {verifySMS().Text}}},
		{name: "StatusCallback when PUBLIC_BASE_URL is set", cfg: TwilioConfig{StatusCallback: "https://msg.example.com/hooks/sms/twilio"}, reply: created,
			wantID: "SM1f0e8ae6ade43cb3c0ce4525424e404f", wantForm: url.Values{"To": {testTo}, "From": {twilioFrom}, "Body": {verifySMS().Text}, "StatusCallback": {"https://msg.example.com/hooks/sms/twilio"}}},
		{name: "2xx without sid is still accepted", reply: respond(201, "not json"), wantID: ""},
		{name: "invalid To: message echoes the number", reply: twilioError(400, 21211, "The 'To' number +8613900001234 is not a valid phone number."),
			wantErr: &wantErr{class: provider.Permanent, code: "21211"}},
		{name: "not a mobile number", reply: twilioError(400, 21614, "'To' number is not a valid mobile number"), wantErr: &wantErr{class: provider.Permanent, code: "21614"}},
		{name: "geo permission", reply: twilioError(400, 21408, "Permission to send an SMS has not been enabled for the region indicated by the 'To' number"), wantErr: &wantErr{class: provider.Permanent, code: "21408"}},
		{name: "trial unverified", reply: twilioError(400, 21608, "The number is unverified. Trial accounts cannot send messages to unverified numbers"), wantErr: &wantErr{class: provider.Permanent, code: "21608"}},
		{name: "too many requests", reply: twilioError(429, 20429, "Too Many Requests", "Retry-After", "3"), wantErr: &wantErr{class: provider.Throttled, code: "20429", retry: 3 * time.Second}},
		{name: "bare 429", reply: respond(429, ""), wantErr: &wantErr{class: provider.Throttled, code: "429"}},
		{name: "internal error", reply: twilioError(500, 20500, "Internal Server Error"), wantErr: &wantErr{class: provider.Transient, code: "20500"}},
		{name: "503 without body", reply: respond(503, ""), wantErr: &wantErr{class: provider.Transient, code: "503"}},
		{name: "unknown 4xx code", reply: twilioError(400, 21999, "new"), wantErr: &wantErr{class: provider.Permanent, code: "21999"}},
		// Proves the fake checks credentials.
		{name: "wrong token", cfg: TwilioConfig{AuthToken: "wrong"}, reply: created, wantErr: &wantErr{class: provider.Permanent, code: "20003"}},
		{name: "wrong account", cfg: TwilioConfig{AccountSID: "ACbbbb", AuthToken: twilioToken}, reply: created, wantErr: &wantErr{class: provider.Permanent, code: "20003"}},
		{name: "empty text", msg: func(m provider.SMS) provider.SMS { m.Text = " "; return m }, reply: created,
			wantErr: &wantErr{class: provider.Permanent, code: "empty_text"}, wantCalls: -1},
		{name: "not E.164", msg: func(m provider.SMS) provider.SMS { m.To = "+0123"; return m }, reply: created,
			wantErr: &wantErr{class: provider.Permanent, code: "invalid_recipient"}, wantCalls: -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, fs := setupTwilio(t, tc.cfg, tc.reply)
			m := verifySMS()
			if tc.msg != nil {
				m = tc.msg(m)
			}
			rc, err := s.SendSMS(context.Background(), m)
			fs.mu.Lock()
			defer fs.mu.Unlock()
			if tc.wantCalls < 0 {
				require.Zero(t, fs.calls, "nothing must be sent")
			} else {
				require.Equal(t, 1, fs.calls)
			}
			if tc.wantErr != nil {
				_ = requireProviderError(t, err, NameTwilio, *tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: NameTwilio, MessageID: tc.wantID}, rc)
			if tc.wantForm != nil {
				require.Equal(t, tc.wantForm, fs.last)
			}
		})
	}
}

// 21610 at send (the number replied STOP) is a receipt in itself: a
// RefusedError that suppresses the number as opted out, and, to what only
// classifies, a permanent failure.
func TestTwilioOptedOutIsRefused(t *testing.T) {
	t.Parallel()
	s, fs := setupTwilio(t, TwilioConfig{}, twilioError(400, 21610, "Attempt to send to unsubscribed recipient"))
	_, err := s.SendSMS(context.Background(), verifySMS())
	fs.mu.Lock()
	require.Equal(t, 1, fs.calls)
	fs.mu.Unlock()
	var re *receipt.RefusedError
	require.ErrorAs(t, err, &re)
	re.Receipt.Detail = ""
	require.Equal(t, receipt.Receipt{Channel: "sms", Kind: receipt.Undelivered, Code: "21610", Source: "twilio",
		Recipient: testTo, Suppress: receipt.SuppressOptOut}, re.Receipt)
	_ = requireProviderError(t, err, NameTwilio, wantErr{class: provider.Permanent, code: "21610"})
	require.Equal(t, provider.Permanent, provider.Classify(err))
}

// The router hands the refusal on as it is, and counts it as a healthy
// vendor's answer.
func TestRouterPassesARefusalOn(t *testing.T) {
	t.Parallel()
	s, _ := setupTwilio(t, TwilioConfig{}, twilioError(400, 21610, "Attempt to send to unsubscribed recipient"))
	r, err := NewRouter(s, nil, breaker.Config{FailureThreshold: 1, OpenFor: time.Minute}, nil)
	require.NoError(t, err)
	_, err = r.SendSMS(context.Background(), verifySMS())
	var re *receipt.RefusedError
	require.ErrorAs(t, err, &re)
	require.Equal(t, breaker.Closed, r.States()[NameTwilio])
}

// Without PUBLIC_BASE_URL a send carries no StatusCallback.
func TestTwilioNoStatusCallbackByDefault(t *testing.T) {
	t.Parallel()
	s, fs := setupTwilio(t, TwilioConfig{}, respond(201, `{"sid":"SM1"}`))
	_, err := s.SendSMS(context.Background(), verifySMS())
	require.NoError(t, err)
	fs.mu.Lock()
	defer fs.mu.Unlock()
	require.False(t, fs.last.Has("StatusCallback"))
}
