package sms

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/provider"
)

const hookSecret = "whsec_test"

// hookReceiver is a webhook endpoint that checks requests the way a
// receiver following our documentation would, with its own HMAC code.
type hookReceiver struct {
	mu   sync.Mutex
	last map[string]any
	hdr  http.Header
}

func (h *hookReceiver) handler(reply func(w http.ResponseWriter)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get("X-Msgpulse-Timestamp")
		mac := hmac.New(sha256.New, []byte(hookSecret))
		mac.Write([]byte(ts + "." + string(body)))
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		var payload map[string]any
		unix, tsErr := strconv.ParseInt(ts, 10, 64)
		switch {
		case r.Method != http.MethodPost, r.Header.Get("Content-Type") != "application/json":
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		case tsErr != nil || time.Since(time.Unix(unix, 0)).Abs() > 5*time.Minute:
			http.Error(w, "stale", http.StatusUnauthorized)
			return
		case !hmac.Equal([]byte(r.Header.Get("X-Msgpulse-Signature")), []byte(want)):
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		case json.Unmarshal(body, &payload) != nil, payload["to"] == nil, payload["text"] == nil, payload["taskId"] == nil,
			payload["timestamp"] != float64(unix):
			http.Error(w, "bad payload", http.StatusUnprocessableEntity)
			return
		}
		h.mu.Lock()
		h.last, h.hdr = payload, r.Header.Clone()
		h.mu.Unlock()
		reply(w)
	}
}

func setupWebhook(t *testing.T, secret string, reply func(w http.ResponseWriter)) (provider.SMSSender, *hookReceiver) {
	t.Helper()
	h := &hookReceiver{}
	srv := httptest.NewServer(h.handler(reply))
	t.Cleanup(srv.Close)
	s, err := New(NameWebhook, Config{Webhook: WebhookConfig{URL: srv.URL + "/sms", Secret: secret}}, zap.NewNop(), nil)
	require.NoError(t, err)
	return s, h
}

func respond(status int, body string, headers ...string) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(headers); i += 2 {
			w.Header().Set(headers[i], headers[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
}

func TestWebhookSend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		secret  string
		reply   func(http.ResponseWriter)
		wantID  string
		wantErr *wantErr
	}{
		{name: "200 with messageId", reply: respond(200, `{"messageId":"hook-42"}`), wantID: "hook-42"},
		{name: "202 without body", reply: respond(202, ""), wantID: ""},
		{name: "200 with non-JSON body", reply: respond(200, "ok"), wantID: ""},
		{name: "429 honours Retry-After", reply: respond(429, "slow down", "Retry-After", "7"),
			wantErr: &wantErr{class: provider.Throttled, code: "429", retry: 7 * time.Second}},
		{name: "429 without Retry-After", reply: respond(429, ""), wantErr: &wantErr{class: provider.Throttled, code: "429"}},
		{name: "500", reply: respond(500, "boom"), wantErr: &wantErr{class: provider.Transient, code: "500"}},
		{name: "503", reply: respond(503, ""), wantErr: &wantErr{class: provider.Transient, code: "503"}},
		{name: "408", reply: respond(408, ""), wantErr: &wantErr{class: provider.Transient, code: "408"}},
		{name: "400", reply: respond(400, `{"error":"bad number"}`), wantErr: &wantErr{class: provider.Permanent, code: "400"}},
		{name: "404", reply: respond(404, ""), wantErr: &wantErr{class: provider.Permanent, code: "404"}},
		{name: "redirect is not followed", reply: respond(301, "", "Location", "http://elsewhere.invalid/"),
			wantErr: &wantErr{class: provider.Permanent, code: "301"}},
		// The receiver's body echoes the message: the error must not.
		{name: "echoing receiver is scrubbed", reply: respond(400, `rejected: to=+8613900001234 code=`+testCode),
			wantErr: &wantErr{class: provider.Permanent, code: "400"}},
		// Proves the receiver really checks: a wrong key is refused.
		{name: "wrong secret is rejected", secret: "not-the-secret", reply: respond(200, ""),
			wantErr: &wantErr{class: provider.Permanent, code: "401"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			secret := hookSecret
			if tc.secret != "" {
				secret = tc.secret
			}
			s, h := setupWebhook(t, secret, tc.reply)
			m := verifySMS()
			rc, err := s.SendSMS(context.Background(), m)
			if tc.wantErr != nil {
				_ = requireProviderError(t, err, NameWebhook, *tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: NameWebhook, MessageID: tc.wantID}, rc)
			h.mu.Lock()
			defer h.mu.Unlock()
			require.Equal(t, m.To, h.last["to"])
			require.Equal(t, m.Text, h.last["text"])
			require.Equal(t, m.TaskID, h.last["taskId"])
			require.Equal(t, m.Template, h.last["template"])
			require.Equal(t, map[string]any{"code": testCode, "ttlMinutes": "5"}, h.last["params"])
			require.Equal(t, m.TaskID, h.hdr.Get("Idempotency-Key"))
		})
	}
}

func TestVerifyWebhookSignature(t *testing.T) {
	t.Parallel()
	// Computed independently: HMAC-SHA256("whsec_test", "1700000000." + body).
	body := []byte(`{"to":"+8613900001234","text":"hi","taskId":"t1","timestamp":1700000000}`)
	const sig = "sha256=4242731bce4b74edec94679aabca03539674a04bfd2c239f53afd96281bfa799"
	at := time.Unix(1700000000, 0)
	for _, tc := range []struct {
		name    string
		now     time.Time
		secret  string
		ts      string
		body    []byte
		header  string
		wantErr error
	}{
		{"known vector", at, hookSecret, "1700000000", body, sig, nil},
		{"within skew", at.Add(WebhookMaxSkew), hookSecret, "1700000000", body, sig, nil},
		{"within skew, receiver clock behind", at.Add(-WebhookMaxSkew), hookSecret, "1700000000", body, sig, nil},
		{"too old", at.Add(WebhookMaxSkew + time.Second), hookSecret, "1700000000", body, sig, ErrWebhookTimestamp},
		{"too far ahead", at.Add(-WebhookMaxSkew - time.Second), hookSecret, "1700000000", body, sig, ErrWebhookTimestamp},
		{"timestamp not a number", at, hookSecret, "yesterday", body, sig, ErrWebhookTimestamp},
		{"other timestamp", at, hookSecret, "1700000001", body, sig, ErrWebhookSignature},
		{"tampered body", at, hookSecret, "1700000000", append([]byte(" "), body...), sig, ErrWebhookSignature},
		{"wrong secret", at, "other", "1700000000", body, sig, ErrWebhookSignature},
		{"missing prefix", at, hookSecret, "1700000000", body, sig[len("sha256="):], ErrWebhookSignature},
		{"not hex", at, hookSecret, "1700000000", body, "sha256=zz", ErrWebhookSignature},
		{"empty", at, hookSecret, "1700000000", body, "", ErrWebhookSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := verifyWebhookAt(tc.now, tc.secret, tc.ts, tc.body, tc.header)
			if tc.wantErr == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, tc.wantErr)
		})
	}
	// The exported form uses the real clock.
	now := strconv.FormatInt(time.Now().Unix(), 10)
	require.NoError(t, VerifyWebhookSignature(hookSecret, now, body, signWebhook([]byte(hookSecret), now, body)))
	require.ErrorIs(t, VerifyWebhookSignature(hookSecret, "1700000000", body, sig), ErrWebhookTimestamp)
}
