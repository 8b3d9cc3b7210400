package sms

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// vendorAt builds the named HTTP vendor, fully configured, against base.
func vendorAt(t *testing.T, name, base string, timeout time.Duration) provider.SMSSender {
	t.Helper()
	cfg := Config{
		Timeout: timeout,
		Webhook: WebhookConfig{URL: base + "/hook", Secret: hookSecret},
		Aliyun:  AliyunConfig{AccessKeyID: aliyunKeyID, AccessKeySecret: aliyunSecret, SignName: "s", Templates: map[string]string{"verify_code": "SMS_1"}, Endpoint: base + "/"},
		Tencent: TencentConfig{SecretID: tencentID, SecretKey: tencentKey, SdkAppID: tencentAppID, SignName: "s",
			Templates: map[string]TencentTemplate{"verify_code": {ID: "1", Params: []string{"code"}}}, Endpoint: base + "/"},
		Twilio: TwilioConfig{AccountSID: twilioSID, AuthToken: twilioToken, From: twilioFrom, BaseURL: base},
	}
	s, err := New(name, cfg, zap.NewNop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.(provider.Closer).Close()) })
	return s
}

var httpVendors = []string{NameWebhook, NameAliyun, NameTencent, NameTwilio}

func TestTransportFailuresAreTransient(t *testing.T) {
	t.Parallel()
	// A vendor that accepts the request and never answers.
	// The body is read first: only then does net/http watch for the client
	// hanging up. release frees handlers before Close waits for them.
	release := make(chan struct{})
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(stall.Close)
	t.Cleanup(func() { close(release) })
	// An address nothing listens on.
	gone := httptest.NewServer(http.NotFoundHandler())
	goneURL := gone.URL
	gone.Close()

	for _, name := range httpVendors {
		for _, tc := range []struct {
			name    string
			base    string
			timeout time.Duration
			ctx     func(t *testing.T) context.Context
			want    string
		}{
			{"client timeout", stall.URL, 150 * time.Millisecond, nil, "timeout"},
			{"caller deadline", stall.URL, time.Minute, func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			}, "timeout"},
			{"caller cancel", stall.URL, time.Minute, func(t *testing.T) context.Context {
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				return ctx
			}, "canceled"},
			{"connection refused", goneURL, time.Minute, nil, "connection"},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				s := vendorAt(t, name, tc.base, tc.timeout)
				ctx := context.Background()
				if tc.ctx != nil {
					ctx = tc.ctx(t)
				}
				_, err := s.SendSMS(ctx, verifySMS())
				pe := requireProviderError(t, err, name, wantErr{class: provider.Transient, code: tc.want})
				require.ErrorIs(t, err, provider.ErrTransient)
				// Aliyun's URL carries the number and the code: no URL in errors.
				require.NotContains(t, err.Error(), "http://")
				require.NotContains(t, err.Error(), "Signature")
				require.NotNil(t, pe.Err)
			})
		}
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"7", 7 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"-3", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
	} {
		h := http.Header{}
		if tc.in != "" {
			h.Set("Retry-After", tc.in)
		}
		require.Equal(t, tc.want, retryAfter(h, now), tc.in)
	}
}

func TestE164(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]bool{
		"+8613900001234": true, "+15005550006": true, "+4420": false, "+1234567": true,
		"8613900001234": false, "+0861390000": false, "+86 139 0000 1234": false, "+": false, "": false,
		"+1234567890123456": false, "+123456789012345": true,
	} {
		require.Equal(t, want, e164(in), in)
	}
}

func TestScrub(t *testing.T) {
	t.Parallel()
	m := verifySMS()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"  plain  ", "plain"},
		{"The 'To' number +8613900001234 is not valid", "The 'To' number +86*******1234 is not valid"},
		{"PhoneNumbers=8613900001234", "PhoneNumbers=+86*******1234"},
		{"mobile 13900001234 blocked", "mobile +86*******1234 blocked"},
		{"param code=482915 rejected", "param code=*** rejected"},
		{"content: " + m.Text, "content: [text]"},
		{"ttl 5 stays", "ttl 5 stays"}, // too short to be a code, and harmless
	} {
		require.Equal(t, tc.want, scrub(tc.in, m), tc.in)
	}
	long := scrub(string(make([]byte, 1000)), m)
	require.LessOrEqual(t, len(long), 304)
}
