package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/internal/unsubscribe"
	"github.com/msgpulse/msgpulse/internal/verify"
)

const testKey = "test-key-0123456789abcdefgh"

// harness is one API instance on a vhost and Redis prefix of its own.
type harness struct {
	t       *testing.T
	srv     *Server
	http    *httptest.Server
	broker  *testenv.Broker
	redis   *testenv.Redis
	model   *topology.Model
	session *broker.Session
	stopBus context.CancelFunc
	keys    *seal.Keys
	conn    *amqp.Connection
	ch      *amqp.Channel
	logs    *observer.ObservedLogs
	gauge   *broker.Gauge // with options.admitFill
	limiter *ratelimit.Limiter
	guard   *fraud.Guard
	// applied records what the SMS hooks applied (options.smsHooks)
	applied *recordingApplier
	// suppression is the API's list (Deps.Suppression)
	suppression *suppression.Store
	// apiRedis is the client the API uses: redis.Client, or one through
	// options.redisVia
	apiRedis redis.UniversalClient
}

type options struct {
	limits config.Limits
	model  func(*topology.Config)
	// share another harness's broker and Redis (a second API replica)
	share *harness
	// keys replace the one "tests" key (testKey, every scope)
	keys []apikey.Key
	// egress is the callbackUrl policy; the zero value refuses internal
	// addresses, resolving names with the system resolver
	egress egress.Policy
	// callbackKeys sign callbacks; nil: every tenant's key derived from
	// one CALLBACK_SECRET (a callbackUrl is accepted)
	callbackKeys *callbackkey.Keys
	// authFailures is AUTH_FAILURES_PER_MINUTE (0 = unlimited)
	authFailures int
	// batchMaxBytes is BATCH_MAX_BYTES; 0 = the default
	batchMaxBytes int64
	// robots is WECOM_ROBOTS as the API knows it; nil = robot "ops" for
	// every tenant
	robots map[string][]string
	// publisher wraps the broker's publisher (a slow or failing publish)
	publisher func(Publisher) Publisher
	// admitFill turns admission on, every channel at this fill (0 = off)
	admitFill float64
	// wecomAccounts are WECOM_ACCOUNTS (without secrets)
	wecomAccounts []wecom.Account
	// fraud is the guard's config: the zero value is FRAUD_GUARD's
	// default (standard), as in production
	fraud fraud.Config
	// smsCodes is the SMS code policy; zero: the defaults
	smsCodes fraud.Policy
	// trustedProxies are TRUSTED_PROXIES
	trustedProxies []*net.IPNet
	// requestLog is LOG_REQUEST_BURST and LOG_REQUEST_INTERVAL; zero
	// writes every request line
	requestLog logging.ThrottleConfig
	// redisVia: the API reaches Redis through this proxy (one Redis, not
	// a cluster), every call bounded by redisTimeout as REDIS_TIMEOUT
	// does (rdb.FailFast), batching its commands as autoPipeline says
	// (REDIS_AUTOPIPELINE)
	redisVia     *testenv.FaultProxy
	redisTimeout time.Duration
	autoPipeline string
	// statusTTL is STATUS_TTL (0 = the default, 7 days)
	statusTTL   time.Duration
	wecomLimits map[string]wecom.Limits // WECOM_ACCOUNT_LIMITS
	// replicated: the API's Redis is this master (its replica waited on
	// with waitReplicas as REDIS_WAIT_REPLICAS; 0 = no fence)
	replicated   *testenv.Replicated
	waitReplicas int
	// smsHooks turns the SMS vendors' hooks on; their receipts go to
	// harness.applied
	smsHooks *smshook.Config
	// unsubscribe serves /unsubscribe/{token} (nil = no such routes)
	unsubscribe *unsubscribe.Handler
}

func defaultLimits() config.Limits {
	return config.Limits{ResendInterval: time.Minute, PerRecipientHour: 5, PerRecipientDay: 10, PerIPMinute: 20,
		PerAPIKeyMinute: 10000, EmailPerSecond: 1000, SMSPerSecond: 1000, ConfigRefreshEvery: time.Hour}
}

func setup(t *testing.T, o options) *harness {
	t.Helper()
	if o.limits == (config.Limits{}) {
		o.limits = defaultLimits()
	}
	if o.keys == nil {
		o.keys = []apikey.Key{apikey.New("tests", testKey, apikey.All)}
	}
	if o.callbackKeys == nil {
		k, err := callbackkey.New(nil, "harness-callback-secret-0123")
		require.NoError(t, err)
		o.callbackKeys = &k
	}
	if o.robots == nil {
		o.robots = map[string][]string{"ops": nil}
	}
	h := &harness{t: t}
	mcfg := testenv.Topology()
	if o.model != nil {
		o.model(&mcfg)
	}
	m, err := topology.Build(mcfg, "")
	require.NoError(t, err)
	h.model = m
	if o.share != nil {
		h.broker, h.redis = o.share.broker, o.share.redis
	} else {
		t.Parallel()
		h.broker, h.redis = testenv.NewBroker(t), testenv.NewRedis(t)
		if r := o.replicated; r != nil {
			c, err := rdb.Open(rdb.Single, r.URL(), rdb.FailFast(cmp.Or(o.redisTimeout, 500*time.Millisecond)))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			h.redis = &testenv.Redis{Client: c, Prefix: h.redis.Prefix, URL: r.URL(), Mode: rdb.Single}
		}
	}
	h.conn, err = amqp.Dial(h.broker.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.conn.Close() })
	h.ch, err = h.conn.Channel()
	require.NoError(t, err)
	if o.share == nil {
		require.NoError(t, broker.Declare(h.conn, m))
	}
	h.apiRedis = h.redis.Client
	if o.redisVia != nil {
		u, err := url.Parse(h.redis.URL)
		require.NoError(t, err)
		u.Host = o.redisVia.Addr()
		h.apiRedis, err = rdb.Open(rdb.Single, u.String(), rdb.FailFast(o.redisTimeout), rdb.WithAutoPipeline(o.autoPipeline))
		require.NoError(t, err)
		t.Cleanup(func() { _ = h.apiRedis.Close() })
	}

	ctx, cancel := context.WithCancel(context.Background())
	h.stopBus = cancel
	s, err := broker.NewSession(broker.Config{URL: h.broker.URL})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	h.session = s
	_, err = s.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
	bp, err := broker.NewPublisher(broker.PublisherConfig{Session: s})
	require.NoError(t, err)
	var pub Publisher = bp
	if o.publisher != nil {
		pub = o.publisher(bp)
	}
	reg := prometheus.NewRegistry()
	planner, err := delay.NewPlanner(m.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	h.keys, err = seal.New(seal.DevSecret)
	require.NoError(t, err)
	rl, err := ratelimit.NewConfigStore(h.apiRedis, h.redis.Prefix, zap.NewNop(), ratelimit.StoreConfig{RefreshEvery: time.Hour})
	require.NoError(t, err)
	rlCtx, rlCancel := context.WithCancel(context.Background())
	rlDone := make(chan struct{})
	go func() { _ = rl.Run(rlCtx); close(rlDone) }()
	t.Cleanup(func() { rlCancel(); <-rlDone })
	<-rl.Ready()
	codes, err := verify.New(h.apiRedis, h.keys, verify.Config{Prefix: h.redis.Prefix})
	require.NoError(t, err)
	st, err := status.New(h.apiRedis, status.Config{Prefix: h.redis.Prefix, TTL: o.statusTTL})
	require.NoError(t, err)
	claims, err := claim.New(h.apiRedis, claim.Config{Prefix: h.redis.Prefix})
	require.NoError(t, err)
	tpl, err := template.Load("", "en")
	require.NoError(t, err)
	accounts, err := accountstate.New(h.apiRedis, accountstate.Config{Prefix: h.redis.Prefix})
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	h.logs = logs
	var fills map[string]float64
	if o.admitFill > 0 {
		h.gauge, err = broker.NewGauge(broker.GaugeConfig{Session: s, Queues: AdmitQueues(m), Interval: 10 * time.Millisecond})
		require.NoError(t, err)
		gctx, gcancel := context.WithCancel(context.Background())
		gdone := make(chan struct{})
		go func() { h.gauge.Run(gctx); close(gdone) }()
		t.Cleanup(func() { gcancel(); <-gdone })
		fills = map[string]float64{}
		for _, ch := range topology.Channels {
			fills[ch] = o.admitFill
		}
	}
	h.limiter = ratelimit.New(h.apiRedis, h.redis.Prefix)
	if o.share != nil {
		h.limiter = o.share.limiter // one clock (Advance) for both replicas
	}
	h.guard, err = fraud.New(h.apiRedis, h.redis.Prefix, o.fraud, h.limiter.ClockOffset)
	require.NoError(t, err)
	h.suppression, err = suppression.New(h.apiRedis, suppression.Config{Prefix: h.redis.Prefix})
	require.NoError(t, err)
	fence, err := rdb.NewFence(h.apiRedis, rdb.FenceConfig{Replicas: o.waitReplicas, Prefix: h.redis.Prefix})
	require.NoError(t, err)
	t.Cleanup(fence.Close)
	h.srv, err = New(Deps{
		// Stack traces as in production (logging.New): on errors only.
		Log: zap.New(core, zap.AddStacktrace(zapcore.ErrorLevel)), Model: m, Publisher: pub, Delayed: delay.NewPublisher(bp, planner, m.Delay, nil), Fraud: h.guard, Suppression: h.suppression,
		Limiter: h.limiter, RateLimits: rl, Codes: codes, Status: st, Redis: h.apiRedis, Templates: tpl,
		Registry: reg, Claims: claims, DLQ: CachedDLQStats(s, m, st, 0), Fence: fence,
		Inspect: func(ctx context.Context, names []string) ([]broker.QueueState, error) {
			conn, err := s.Conn(ctx)
			if err != nil {
				return nil, err
			}
			return broker.Inspect(conn, names)
		},
		Ages: func(ctx context.Context) (map[string]time.Time, error) {
			return h.broker.Mgmt.HeadTimestamps(ctx, h.broker.VHost)
		},
		Ready:    func(context.Context) map[string]string { return map[string]string{"amqp": "ok", "redis": "ok"} },
		Gauge:    h.gauge,
		Accounts: accounts,
		SMSHooks: h.smsHooks(o, zap.New(core)),

		Unsubscribe: o.unsubscribe, // nil: no /unsubscribe routes
	}, Options{APIKeys: o.keys, Egress: o.egress, CallbackKeys: *o.callbackKeys, AuthFailuresPerMinute: o.authFailures, BodyLimit: 4096, Limits: o.limits, PublishTimeout: 3 * time.Second,
		BatchMaxBytes: o.batchMaxBytes, Robots: o.robots, AdmitFill: fills, WeComAccounts: o.wecomAccounts, SMSCodes: o.smsCodes,
		TrustedProxies: o.trustedProxies, RequestLog: o.requestLog, RedisTimeout: o.redisTimeout, WeComLimits: o.wecomLimits})
	require.NoError(t, err)
	t.Cleanup(h.srv.Wait) // background rollbacks end before Redis closes
	h.http = httptest.NewServer(h.srv.Handler())
	t.Cleanup(h.http.Close)
	return h
}

// smsHooks are the SMS hooks of o.smsHooks, applying to h.applied; nil
// when off.
func (h *harness) smsHooks(o options, log *zap.Logger) *smshook.Hooks {
	if o.smsHooks == nil {
		return nil
	}
	h.applied = &recordingApplier{}
	hooks, err := smshook.New(*o.smsHooks, h.applied, smslookup.New(h.apiRedis, h.redis.Prefix), log)
	require.NoError(h.t, err)
	return hooks
}

type response struct {
	Status  int
	Header  http.Header
	Code    int             `json:"code"`
	Msg     string          `json:"msg"`
	RawData json.RawMessage `json:"data"`
}

func (r response) data(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.RawData, v), string(r.RawData))
}

func (h *harness) do(method, path string, body any, hdr ...string) response {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		require.NoError(h.t, err)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, h.http.URL+path, rd)
	require.NoError(h.t, err)
	req.Header.Set("X-API-Key", testKey)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(h.t, err)
	defer func() { _ = resp.Body.Close() }()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(h.t, err)
	out := response{Status: resp.StatusCode, Header: resp.Header}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		require.NoError(h.t, json.Unmarshal(raw, &out), string(raw))
		require.Equal(h.t, resp.StatusCode, out.Code, "the envelope's code is the HTTP status")
	}
	return out
}

// get takes the next message from a queue, waiting for it.
func (h *harness) get(queue string) amqp.Delivery {
	h.t.Helper()
	var d amqp.Delivery
	testenv.WaitFor(h.t, 5*time.Second, "a message in "+queue, func() bool {
		var ok bool
		var err error
		d, ok, err = h.ch.Get(queue, true)
		require.NoError(h.t, err)
		return ok
	})
	return d
}

func (h *harness) depth(queue string) int {
	h.t.Helper()
	q, err := h.ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(h.t, err)
	return q.Messages
}

// code opens the code sealed in a queued verification message.
func (h *harness) code(d amqp.Delivery) string {
	h.t.Helper()
	m, err := envelope.Decode(d.Body)
	require.NoError(h.t, err)
	c, err := h.keys.Open(m.SealedCode, m.TaskID)
	require.NoError(h.t, err)
	return c
}

// redisDump returns every key and value under the test's prefix.
func (h *harness) redisDump() string {
	h.t.Helper()
	ctx := context.Background()
	keys, err := h.redis.Client.Keys(ctx, h.redis.Prefix+"*").Result()
	require.NoError(h.t, err)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k + "\n")
		typ, _ := h.redis.Client.Type(ctx, k).Result()
		switch typ {
		case "string":
			v, _ := h.redis.Client.Get(ctx, k).Result()
			b.WriteString(v + "\n")
		case "hash":
			v, _ := h.redis.Client.HGetAll(ctx, k).Result()
			for f, x := range v {
				b.WriteString(f + "=" + x + "\n")
			}
		case "zset":
			v, _ := h.redis.Client.ZRange(ctx, k, 0, -1).Result()
			b.WriteString(strings.Join(v, ",") + "\n")
		}
	}
	return b.String()
}

func (h *harness) keysMatching(pattern string) []string {
	h.t.Helper()
	keys, err := rdb.Keys(context.Background(), h.redis.Client, h.redis.Prefix+pattern) // every node of a cluster
	require.NoError(h.t, err)
	return keys
}

func codeRequest(recipient, purpose string) map[string]any {
	return map[string]any{"channel": "email", "recipient": recipient, "purpose": purpose}
}
