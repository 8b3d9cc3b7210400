package sms

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// fakeSender answers with whatever outcome it is told to give next.
type fakeSender struct {
	name string
	mu   sync.Mutex
	next error
	sent int
}

func (f *fakeSender) Name() string { return f.name }

func (f *fakeSender) SendSMS(ctx context.Context, _ provider.SMS) (provider.Receipt, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	if f.next != nil {
		return provider.Receipt{}, f.next
	}
	return provider.Receipt{Provider: f.name, MessageID: f.name + "-id"}, nil
}

func (f *fakeSender) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next = err
}

func (f *fakeSender) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

var (
	errVendorDown = &provider.Error{Provider: "p", Class: provider.Transient, Code: "503"}
	errThrottled  = &provider.Error{Provider: "p", Class: provider.Throttled, Code: "isv.BUSINESS_LIMIT_CONTROL"}
	errRejected   = &provider.Error{Provider: "p", Class: provider.Permanent, Code: "isv.MOBILE_NUMBER_ILLEGAL"}
	errPlain      = errors.New("unclassified")
)

var routerBreaker = breaker.Config{FailureThreshold: 2, OpenFor: 30 * time.Second, HalfOpenProbes: 1}

func setupRouter(t *testing.T, withFallback bool) (*Router, *fakeSender, *fakeSender, *clock) {
	t.Helper()
	clk := &clock{t: time.Date(2025, 5, 1, 0, 0, 0, 0, time.UTC)}
	primary := &fakeSender{name: "aliyun"}
	var fb *fakeSender
	var fallback provider.SMSSender
	if withFallback {
		fb = &fakeSender{name: "tencent"}
		fallback = fb
	}
	r, err := NewRouter(primary, fallback, routerBreaker, clk.now)
	require.NoError(t, err)
	return r, primary, fb, clk
}

func TestRouter(t *testing.T) {
	t.Parallel()
	type env struct {
		r    *Router
		p, f *fakeSender
		clk  *clock
	}
	send := func(t *testing.T, e env) (provider.Receipt, error) {
		t.Helper()
		return e.r.SendSMS(context.Background(), verifySMS())
	}
	for _, tc := range []struct {
		name     string
		fallback bool
		run      func(t *testing.T, e env)
	}{
		{"primary healthy", true, func(t *testing.T, e env) {
			rc, err := send(t, e)
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: "aliyun", MessageID: "aliyun-id"}, rc)
			require.Zero(t, e.f.count())
		}},
		{"transient failure is returned, not retried elsewhere", true, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			_, err := send(t, e)
			require.ErrorIs(t, err, errVendorDown)
			require.Equal(t, 1, e.p.count())
			require.Zero(t, e.f.count())
			require.Equal(t, breaker.Closed, e.r.States()["aliyun"])
		}},
		{"falls back once the primary breaker opens", true, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			for range 2 {
				_, err := send(t, e)
				require.Error(t, err)
			}
			require.Equal(t, map[string]breaker.State{"aliyun": breaker.Open, "tencent": breaker.Closed}, e.r.States())
			rc, err := send(t, e)
			require.NoError(t, err)
			require.Equal(t, "tencent", rc.Provider)
			require.Equal(t, 2, e.p.count(), "the open primary is not called")
		}},
		{"unclassified errors count as failures", true, func(t *testing.T, e env) {
			e.p.set(errPlain)
			for range 2 {
				_, _ = send(t, e)
			}
			require.Equal(t, breaker.Open, e.r.States()["aliyun"])
		}},
		{"throttled and permanent do not open the breaker", true, func(t *testing.T, e env) {
			for _, err := range []error{errThrottled, errRejected, errThrottled, errRejected, errThrottled} {
				e.p.set(err)
				_, got := send(t, e)
				require.ErrorIs(t, got, err)
			}
			require.Equal(t, breaker.Closed, e.r.States()["aliyun"])
			require.Zero(t, e.f.count())
		}},
		{"throttled resets the consecutive count: the vendor is alive", true, func(t *testing.T, e env) {
			for _, err := range []error{errVendorDown, errThrottled, errVendorDown} {
				e.p.set(err)
				_, _ = send(t, e)
			}
			require.Equal(t, breaker.Closed, e.r.States()["aliyun"])
		}},
		{"circuit_open without fallback", false, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			for range 2 {
				_, _ = send(t, e)
			}
			e.clk.advance(10 * time.Second)
			_, err := send(t, e)
			pe := requireProviderError(t, err, "aliyun", wantErr{class: provider.Transient, code: "circuit_open", retry: 20 * time.Second})
			require.ErrorIs(t, err, breaker.ErrOpen)
			require.ErrorIs(t, err, provider.ErrTransient)
			require.Contains(t, pe.Message, "aliyun circuit open")
			require.Equal(t, 2, e.p.count())
			require.Equal(t, map[string]breaker.State{"aliyun": breaker.Open}, e.r.States())
		}},
		{"circuit_open when both are open: earliest retry", true, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			e.f.set(errVendorDown)
			for range 2 {
				_, _ = send(t, e)
			}
			e.clk.advance(5 * time.Second)
			for range 2 {
				_, _ = send(t, e) // go to the fallback, and open it
			}
			require.Equal(t, 2, e.f.count())
			_, err := send(t, e)
			_ = requireProviderError(t, err, "aliyun", wantErr{class: provider.Transient, code: "circuit_open", retry: 25 * time.Second})
		}},
		{"half-open probe recovers the primary", true, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			for range 2 {
				_, _ = send(t, e)
			}
			e.clk.advance(30 * time.Second)
			require.Equal(t, breaker.HalfOpen, e.r.States()["aliyun"])
			e.p.set(nil)
			rc, err := send(t, e)
			require.NoError(t, err)
			require.Equal(t, "aliyun", rc.Provider)
			require.Equal(t, breaker.Closed, e.r.States()["aliyun"])
		}},
		{"failed probe re-opens", false, func(t *testing.T, e env) {
			e.p.set(errVendorDown)
			for range 2 {
				_, _ = send(t, e)
			}
			e.clk.advance(30 * time.Second)
			_, err := send(t, e)
			require.ErrorIs(t, err, errVendorDown)
			_, err = send(t, e)
			_ = requireProviderError(t, err, "aliyun", wantErr{class: provider.Transient, code: "circuit_open", retry: 30 * time.Second})
			require.Equal(t, 3, e.p.count())
		}},
		{"caller cancellation is not held against the vendor", false, func(t *testing.T, e env) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			e.p.set(&provider.Error{Provider: "aliyun", Class: provider.Transient, Code: "canceled", Err: context.Canceled})
			for range 3 {
				_, err := e.r.SendSMS(ctx, verifySMS())
				require.Error(t, err)
			}
			require.Equal(t, breaker.Closed, e.r.States()["aliyun"])
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r, p, f, clk := setupRouter(t, tc.fallback)
			tc.run(t, env{r: r, p: p, f: f, clk: clk})
		})
	}
}

func TestNewRouterRejects(t *testing.T) {
	t.Parallel()
	a := &fakeSender{name: "aliyun"}
	for _, tc := range []struct {
		name              string
		primary, fallback provider.SMSSender
		cfg               breaker.Config
		want              string
	}{
		{"nil primary", nil, nil, breaker.Config{}, "primary sender is nil"},
		{"same vendor twice", a, &fakeSender{name: "aliyun"}, breaker.Config{}, "is the primary"},
		{"bad breaker", a, nil, breaker.Config{OpenFor: -time.Second}, "OpenFor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewRouter(tc.primary, tc.fallback, tc.cfg, nil)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

// End to end through real senders: a webhook primary answering 503 opens
// its breaker, and Twilio takes over.
func TestFromConfigFallsBackToRealVendor(t *testing.T) {
	t.Parallel()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "maintenance", http.StatusServiceUnavailable)
	}))
	t.Cleanup(down.Close)
	tw := &twilioServer{}
	twSrv := httptest.NewServer(tw.handler(func(w http.ResponseWriter) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"sid":"SMfallback","status":"queued"}`))
	}))
	t.Cleanup(twSrv.Close)

	r, err := FromConfig(Config{
		Provider: NameWebhook, Fallback: NameTwilio,
		Breaker: breaker.Config{FailureThreshold: 2},
		Webhook: WebhookConfig{URL: down.URL, Secret: hookSecret},
		Twilio:  TwilioConfig{AccountSID: twilioSID, AuthToken: twilioToken, From: twilioFrom, BaseURL: twSrv.URL},
	}, zap.NewNop(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	require.Equal(t, "webhook>twilio", r.Name())

	for range 2 {
		_, err := r.SendSMS(context.Background(), verifySMS())
		_ = requireProviderError(t, err, NameWebhook, wantErr{class: provider.Transient, code: "503"})
	}
	rc, err := r.SendSMS(context.Background(), verifySMS())
	require.NoError(t, err)
	require.Equal(t, provider.Receipt{Provider: NameTwilio, MessageID: "SMfallback"}, rc)
	require.Equal(t, map[string]breaker.State{NameWebhook: breaker.Open, NameTwilio: breaker.Closed}, r.States())
}

func TestFromConfigValidates(t *testing.T) {
	t.Parallel()
	_, err := FromConfig(Config{Provider: NameAliyun}, zap.NewNop(), nil)
	require.ErrorContains(t, err, "ALIYUN_ACCESS_KEY_ID")
	r, err := FromConfig(Config{}, zap.NewNop(), &syncBuffer{})
	require.NoError(t, err)
	require.Equal(t, NameLog, r.Name())
}
