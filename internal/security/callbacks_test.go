package security

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// A receiver of one tenant's callbacks: it keeps each POST with its
// headers, for the test to verify with any key.
type receiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	posts []received
}

type received struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T) *receiver {
	rc := &receiver{}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.posts = append(rc.posts, received{r.Header.Clone(), body})
		rc.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.posts...)
}

// Two tenants, each with its own CALLBACK_SECRETS entry, and an operator,
// through the real api and consumer on a real broker and Redis: each
// tenant's callback verifies with its own key and not with the other's
// (nor with CODE_SECRET), and a callback target that answers 302 to
// another host gets no second POST there.
func TestCallbacksAreSignedPerTenantAndRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	const (
		keyA, keyB, keyOps = "shopA-key-0123456789abcdefgh", "shopB-key-0123456789abcdefgh", "ops-key-0123456789abcdefgh"
		keyC               = "shopC-key-0123456789abcdefgh"
		secretA, secretB   = "shopA-callback-secret-4f3e2d1c", "shopB-callback-secret-9a8b7c6d"
		attempts           = 2
	)
	b, r := testenv.NewBroker(t), testenv.NewRedis(t)
	recvA, recvB := newReceiver(t), newReceiver(t)
	var elsewhere, redirected atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(other.Close)
	redirector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		redirected.Add(1)
		http.Redirect(w, req, other.URL+"/stolen", http.StatusFound)
	}))
	t.Cleanup(redirector.Close)

	env := map[string]string{
		"AMQP_URL": b.URL, "REDIS_URL": r.URL, "REDIS_PREFIX": r.Prefix, "RABBITMQ_MANAGEMENT_URL": testenv.ManagementURL,
		"LOG_LEVEL": "info", "CODE_SECRET": codeSecret, "HTTP_ADDR": "127.0.0.1:0",
		"CALLBACK_ALLOW_HTTP": "true", "CALLBACK_ALLOW_PRIVATE": "true",
		// Tenants' backends without scopes (send+read) and one operator.
		"API_KEYS":          "shopA/backend:" + keyA + ",shopB/backend:" + keyB + ",shopC/backend:" + keyC + ",ops:" + keyOps + ":admin",
		"CALLBACK_SECRETS":  "shopA=" + secretA + ",shopB=" + secretB,
		"CALLBACK_ATTEMPTS": "2",
		"CHANNELS":          "sms", "SMS_PROVIDER": "log", "METRICS_ADDR": "off", "CONSUMER_ID": "callbacks-c1",
	}
	apiCfg, l := config.LoadAPI(envconf.FromMap(env))
	require.NoError(t, l.Err())
	conCfg, l := config.LoadConsumer(envconf.FromMap(env))
	require.NoError(t, l.Err())
	model, err := topology.Build(apiCfg.Model, "")
	require.NoError(t, err)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	require.NoError(t, broker.Declare(conn, model))
	require.NoError(t, conn.Close())

	core, observed := observer.New(zapcore.InfoLevel)
	logger := zap.New(core)
	ctx, cancel := context.WithCancel(context.Background())
	apiDone, conDone := make(chan error, 1), make(chan error, 1)
	go func() { apiDone <- api.Run(ctx, apiCfg, logger.Named("api")) }()
	go func() {
		conDone <- dispatch.Run(ctx, conCfg, logger.Named("consumer"), dispatch.WithOutput(io.Discard))
	}()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-apiDone)
		require.NoError(t, <-conDone)
	})
	var base string
	testenv.WaitFor(t, 15*time.Second, "api listening", func() bool {
		for _, e := range observed.FilterMessage("api listening").All() {
			if addr, ok := e.ContextMap()["addr"].(string); ok {
				base = "http://" + addr
				return true
			}
		}
		return false
	})
	admins := observed.FilterMessageSnippet("admin scope").All()
	require.Len(t, admins, 1, "the API names its admin keys once at start")
	require.Equal(t, []any{"ops"}, admins[0].ContextMap()["admin_keys"])

	send := func(key, callbackURL string) (int, string, string) {
		t.Helper()
		body, err := json.Marshal(map[string]any{"messageType": "SMS", "templateCode": "notice", "recipient": "+8613900001234",
			"variables": map[string]string{"title": "t", "content": "c"}, "callbackUrl": callbackURL})
		require.NoError(t, err)
		var status int
		var out struct {
			Msg  string `json:"msg"`
			Data struct {
				TaskID string `json:"taskId"`
			} `json:"data"`
		}
		testenv.WaitFor(t, 30*time.Second, "an answer other than 503", func() bool {
			req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), "POST", base+"/api/messages/send", bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("X-API-Key", key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return false
			}
			defer func() { _ = resp.Body.Close() }()
			status = resp.StatusCode
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return status != http.StatusServiceUnavailable
		})
		return status, out.Data.TaskID, out.Msg
	}
	urlA, urlB := recvA.srv.URL+"/msgpulse/status?tenant=a", recvB.srv.URL+"/hooks/b"
	st, taskA, msg := send(keyA, urlA)
	require.Equal(t, http.StatusAccepted, st, msg)
	st, taskB, msg := send(keyB, urlB)
	require.Equal(t, http.StatusAccepted, st, msg)
	st, _, msg = send(keyA, redirector.URL+"/cb")
	require.Equal(t, http.StatusAccepted, st, msg)
	st, _, msg = send(keyC, urlA)
	require.Equal(t, http.StatusBadRequest, st, "shopC has no callback key: refused, never signed with another's")
	require.Contains(t, msg, "CALLBACK_SECRETS")

	for _, tc := range []struct {
		name, tenant, task, url string
		rc                      *receiver
		own, other              string
	}{
		{"shopA", "shopA", taskA, urlA, recvA, secretA, secretB},
		{"shopB", "shopB", taskB, urlB, recvB, secretB, secretA},
	} {
		testenv.WaitFor(t, 30*time.Second, tc.name+"'s callback", func() bool { return len(tc.rc.got()) > 0 })
		posts := tc.rc.got()
		require.Len(t, posts, 1, tc.name)
		p := posts[0]
		var cb dispatch.Callback
		require.NoError(t, json.Unmarshal(p.body, &cb))
		require.Equal(t, tc.task, cb.TaskID)
		require.Equal(t, tc.tenant, p.header.Get(callbackkey.TenantHeader))
		verify := func(key string) error {
			return callbackkey.Verify(key, p.header.Get(callbackkey.SignatureHeader), p.header.Get(callbackkey.TimestampHeader),
				p.header.Get(callbackkey.TenantHeader), tc.tenant, tc.url, p.body, time.Now())
		}
		require.NoError(t, verify(tc.own), "%s's callback verifies with its own key", tc.name)
		require.ErrorIs(t, verify(tc.other), callbackkey.ErrBadSignature, "%s's callback does not verify with the other tenant's key", tc.name)
		require.ErrorIs(t, verify(codeSecret), callbackkey.ErrBadSignature, "nor with CODE_SECRET")
	}
	testenv.WaitFor(t, 30*time.Second, "every attempt at the redirecting target", func() bool { return redirected.Load() == attempts })
	testenv.WaitFor(t, 10*time.Second, "the failure logged", func() bool {
		return observed.FilterMessage("callback failed").Len() == 1
	})
	require.EqualValues(t, 0, elsewhere.Load(), "the host the 302 named got no POST")
	require.Contains(t, observed.FilterMessage("callback failed").All()[0].ContextMap()["error"], "302")
	t.Logf("shopA: 1 callback, shopB: 1 callback; redirecting target: %d attempts, redirect host: %d POSTs", redirected.Load(), elsewhere.Load())
}
