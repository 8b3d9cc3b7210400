package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	apidoc "github.com/msgpulse/msgpulse/api"
	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/smshook"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/internal/unsubscribe"
	"github.com/msgpulse/msgpulse/internal/verify"
)

// Publisher publishes one message and waits for the broker's confirm.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error
}

// DelayedPublisher publishes a message to be delivered after a delay.
type DelayedPublisher interface {
	PublishDelayed(ctx context.Context, out broker.Outgoing, delay time.Duration) error
	Check(delay time.Duration) error
}

// QueueInspector reads queue depths and consumer counts.
type QueueInspector func(ctx context.Context, names []string) ([]broker.QueueState, error)

// DLQStats summarises the dead-letter queues.
type DLQStats func(ctx context.Context) (any, error)

// Deps are the services the API uses. All are required except DLQ.
type Deps struct {
	Log        *zap.Logger
	Model      *topology.Model
	Publisher  Publisher
	Delayed    DelayedPublisher
	Limiter    *ratelimit.Limiter
	RateLimits *ratelimit.ConfigStore
	Codes      *verify.Store
	Status     *status.Store
	// Redis is the client Codes and Status use: a code request writes both
	// in one pipelined round trip.
	Redis     redis.UniversalClient
	Templates *template.Store
	// Claims withdraws what a failed batch had published (nil = the
	// published part of a failed mail or SMS batch may still be sent).
	Claims *claim.Claimer
	// Fence makes what a request wrote durable before it is published and
	// answered 202 (rdb.Fence; nil or off: nothing is waited for).
	Fence   *rdb.Fence
	Inspect QueueInspector
	// Ages, when set, gives the time of each queue's oldest message where
	// the broker reports it (management API); nil or failing: no ages.
	Ages func(ctx context.Context) (map[string]time.Time, error)
	DLQ  DLQStats
	// Gauge estimates the level queues' depths for admission (see
	// Options.AdmitFill); nil admits everything and leaves a full queue
	// to its overflow rule.
	Gauge *broker.Gauge
	// Ready reports each dependency's health ("ok" or the error text).
	Ready    func(ctx context.Context) map[string]string
	Registry *prometheus.Registry
	// Accounts is the WeCom accounts' shared state, shown in
	// /api/queues/stats; nil = not shown.
	Accounts *accountstate.Store
	// Fraud is the SMS pumping guard (FRAUD_GUARD); nil = off, and
	// /api/fraud/blocks lists nothing.
	Fraud *fraud.Guard
	// SMSHooks are the SMS vendors' delivery-report hooks under
	// /hooks/sms/ (smshook.Hooks); nil = none, and those paths are 404.
	SMSHooks *smshook.Hooks
	// Suppression is the tenants' suppression list: sends and codes to
	// a suppressed recipient are refused (422) in the limiter's script,
	// and /api/suppressions serves it. nil = no list: nothing is
	// refused, and /api/suppressions answers 501.
	Suppression *suppression.Store
	// Unsubscribe serves GET and POST /unsubscribe/{token}, the one-click
	// unsubscribe link of mail notices (PUBLIC_BASE_URL); nil = no such
	// routes.
	Unsubscribe *unsubscribe.Handler
}

// Options are the API's behaviour settings.
type Options struct {
	APIKeys        []apikey.Key
	AuthDisabled   bool
	TrustedProxies []*net.IPNet
	BodyLimit      int64
	Limits         config.Limits
	CallbackHTTP   bool
	// Egress refuses callbackUrl hosts that are or resolve to internal
	// addresses (CALLBACK_ALLOW_PRIVATE lifts it).
	Egress egress.Policy
	// CallbackKeys: a callbackUrl whose tenant has no key is refused.
	CallbackKeys callbackkey.Keys
	// AuthFailuresPerMinute: failed X-API-Key checks per source address
	// per sliding minute before 429 (0 = unlimited).
	AuthFailuresPerMinute int
	PublishTimeout        time.Duration
	// AdmitFill is, per channel of the topology model, the fill of a level
	// queue from which a publish to it is refused with 503 (admission);
	// a channel missing here gets config.DefaultAdmitFill.
	AdmitFill map[string]float64
	// MessageMaxAge is a message's ttlSeconds when the request has none;
	// 0 means 24 h.
	MessageMaxAge time.Duration
	// BatchMaxBytes bounds what one batch puts on the broker (its
	// recipients' envelopes together, BATCH_MAX_BYTES); 0 means 8 MiB.
	BatchMaxBytes int64
	// Robots are the WeCom robots tenants may post to (WECOM_ROBOTS):
	// name → its tenants, none = every tenant. A robot not here is 404.
	Robots map[string][]string
	// IdempotencyTTL is how long an Idempotency-Key's answer is kept; 0
	// means 24 h.
	IdempotencyTTL time.Duration
	// WeComAccounts are WECOM_ACCOUNTS without their secrets: who may send
	// from which account.
	WeComAccounts []wecom.Account
	// SMSCodes says which numbers verification codes may go to; its zero
	// value allows fraud.DefaultTypes in every country.
	SMSCodes fraud.Policy
	// RequestLog bounds the lines of refused and failed requests (see
	// requestLevel); zero writes every line (LOG_REQUEST_BURST's default
	// is logging.DefaultThrottleBurst).
	RequestLog logging.ThrottleConfig
	// RedisTimeout is REDIS_TIMEOUT, the bound of each Redis call: a
	// failed request waits at most this long for its rollback (see
	// bounded); 0 means 500 ms.
	RedisTimeout time.Duration
	// WeComLimits are each account's limits (WECOM_ACCOUNT_LIMITS), shown
	// with its state.
	WeComLimits map[string]wecom.Limits
}

// Server is the HTTP API.
type Server struct {
	d       Deps
	opts    Options
	log     *zap.Logger
	e       *echo.Echo
	metrics *metrics
	now     func() time.Time
	keys    *apikey.Set
	// authFailures counts failed X-API-Key checks per source address.
	authFailures *ratelimit.Failures
	scopes       map[[2]string]apikey.Scope // method, path → the scope the route needs
	cleanup      sync.WaitGroup             // rollbacks that outlive their request (see Wait)
	admits       map[string]admission       // level queue → its admission limit, with Deps.Gauge
	fraud        *fraud.Metrics
	// quiet holds back request lines past Options.RequestLog's burst.
	quiet *logging.Throttle
}

// Wait blocks until the rollbacks started in the background have ended,
// then writes the request lines' summary still owed; call it after the
// HTTP server has drained, before closing Redis.
func (s *Server) Wait() {
	s.cleanup.Wait()
	s.quiet.Close()
}

// New builds the server and its routes.
func New(d Deps, opts Options) (*Server, error) {
	if d.Log == nil {
		d.Log = zap.NewNop()
	}
	if d.Model == nil || d.Publisher == nil || d.Delayed == nil || d.Limiter == nil || d.RateLimits == nil || d.Codes == nil ||
		d.Status == nil || d.Redis == nil || d.Templates == nil || d.Inspect == nil || d.Ready == nil || d.Registry == nil {
		return nil, errors.New("api: missing dependency")
	}
	if len(opts.APIKeys) == 0 && !opts.AuthDisabled {
		return nil, errors.New("api: no API keys and authentication not disabled")
	}
	if opts.BodyLimit == 0 {
		opts.BodyLimit = 64 << 10
	}
	if opts.PublishTimeout == 0 {
		opts.PublishTimeout = 3 * time.Second
	}
	if opts.MessageMaxAge == 0 {
		opts.MessageMaxAge = 24 * time.Hour
	}
	if opts.BatchMaxBytes == 0 {
		opts.BatchMaxBytes = DefaultBatchMaxBytes
	}
	if opts.BatchMaxBytes > envelope.MaxBrokerBytes {
		return nil, fmt.Errorf("api: BatchMaxBytes %d over %d, RabbitMQ 4.x's default max_message_size (envelope.MaxBrokerBytes)", opts.BatchMaxBytes, envelope.MaxBrokerBytes)
	}
	if opts.IdempotencyTTL == 0 {
		opts.IdempotencyTTL = 24 * time.Hour
	}
	if opts.SMSCodes.Types == nil {
		opts.SMSCodes.Types = fraud.DefaultTypes
	}
	if opts.RedisTimeout == 0 {
		opts.RedisTimeout = 500 * time.Millisecond
	}
	s := &Server{d: d, opts: opts, log: d.Log, metrics: newMetrics(d.Registry), now: time.Now, scopes: map[[2]string]apikey.Scope{},
		quiet: logging.NewThrottle(d.Log, opts.RequestLog)}
	var blocked func(context.Context) (int, error)
	if d.Fraud != nil {
		blocked = d.Fraud.Blocked
	}
	s.fraud = fraud.NewMetrics(d.Registry, blocked)
	if d.Gauge != nil {
		s.admits = admissions(d.Model, opts.AdmitFill)
	}
	var err error
	if s.keys, err = apikey.NewSet(opts.APIKeys); err != nil {
		return nil, fmt.Errorf("api: %w", err)
	}
	s.authFailures = ratelimit.NewFailures(d.Redis, d.Limiter.Prefix(), opts.AuthFailuresPerMinute, time.Minute)
	// Without automatic group 404 routes, a known path with the wrong
	// method answers 405 rather than 404.
	e := echo.NewWithConfig(echo.Config{NoGroupAutoRegister404Routes: true})
	e.HTTPErrorHandler = s.handleError
	if len(opts.TrustedProxies) > 0 {
		var trust []echo.TrustOption
		for _, n := range opts.TrustedProxies {
			trust = append(trust, echo.TrustIPRange(n))
		}
		trust = append(trust, echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false))
		e.IPExtractor = echo.ExtractIPFromXFFHeader(trust...)
	} else {
		e.IPExtractor = echo.ExtractIPDirect()
	}
	if telemetry.Enabled() {
		e.Use(s.traced)
	}
	e.Use(s.recoverer, s.observe)
	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{Registry: d.Registry})))
	e.GET("/openapi.yaml", func(c *echo.Context) error { return c.Blob(http.StatusOK, "application/yaml", apidoc.OpenAPI) })
	// The SMS vendors call these, not a tenant: no X-API-Key. Each hook
	// checks its own signature or path token, answers every method itself
	// (a 404 or 405 of echo's would quote the path, and a hook's path
	// holds its token), and is logged by its route's pattern only.
	if d.SMSHooks != nil {
		for _, r := range d.SMSHooks.Routes() {
			e.Any(r.Path, r.Handler)
		}
	}
	if d.Unsubscribe != nil {
		// Outside /api and X-API-Key: a reader's mail client calls these,
		// and the signed token in the path is the credential. The request
		// line names the route, never the path (redact drops the token
		// from echo's 404 and 405 lines too).
		d.Unsubscribe.Register(e)
	}

	// The route table: every /api route and the scope it needs, checked
	// here and nowhere else (Visible narrows reads to the caller's tenant).
	g := e.Group("/api", s.Authenticate)
	for _, r := range []struct {
		method, path string
		scope        apikey.Scope
		h            echo.HandlerFunc
	}{
		{http.MethodPost, "/verification-codes", apikey.Send, s.requestCode},
		{http.MethodPost, "/verification-codes/verify", apikey.Send, s.verifyCode},
		{http.MethodPost, "/messages/send", apikey.Send, s.sendMessage},
		{http.MethodPost, "/messages/batch", apikey.Send, s.sendBatch},
		{http.MethodGet, "/batches/:batchId", apikey.Read, s.getBatch},
		{http.MethodGet, "/messages/:taskId", apikey.Read, s.getMessage},
		{http.MethodGet, "/messages", apikey.Read, s.getMessage},
		{http.MethodGet, "/rate-limits", apikey.Read, s.listRateLimits},
		{http.MethodGet, "/rate-limits/:id", apikey.Read, s.getRateLimit},
		{http.MethodPost, "/rate-limits", apikey.Admin, s.createRateLimit},
		{http.MethodPut, "/rate-limits/:id", apikey.Admin, s.updateRateLimit},
		{http.MethodDelete, "/rate-limits/:id", apikey.Admin, s.deleteRateLimit},
		{http.MethodGet, "/queues/stats", apikey.Admin, s.queueStats},
		{http.MethodGet, "/dlq/stats", apikey.Admin, s.dlqStats},
		{http.MethodGet, "/fraud/blocks", apikey.Read, s.listFraudBlocks},
		{http.MethodDelete, "/fraud/blocks/:tenant/:prefix", apikey.Send, s.liftFraudBlock},
		{http.MethodGet, "/suppressions", apikey.Read, s.listSuppressions},
		{http.MethodPost, "/suppressions", apikey.Send, s.addSuppression},
		{http.MethodDelete, "/suppressions/:channel/:recipient", apikey.Send, s.deleteSuppression},
	} {
		g.Add(r.method, r.path, r.h, Require(r.scope))
		s.scopes[[2]string{r.method, "/api" + r.path}] = r.scope
	}
	s.e = e
	return s, nil
}

// Handler returns the HTTP handler.
func (s *Server) Handler() http.Handler { return s.e }

// Routes lists the registered routes (method, path), for the OpenAPI check.
func (s *Server) Routes() [][2]string {
	var out [][2]string
	for _, r := range s.e.Router().Routes() {
		out = append(out, [2]string{r.Method, r.Path})
	}
	return out
}

// ClientIP is a request's client address as the API takes it: the
// connection's, or X-Forwarded-For's from TRUSTED_PROXIES. The console
// counts its logins by it, through ratelimit.Source, as wrong keys are.
func (s *Server) ClientIP(r *http.Request) string { return s.e.IPExtractor(r) }

// KeyOf finds the key an operator pasted into the console's login form,
// as Authenticate finds an X-API-Key (every key is Anonymous with
// API_AUTH=disabled). The console keeps only the name.
func (s *Server) KeyOf(key string) (apikey.Key, bool) {
	if s.opts.AuthDisabled {
		return apikey.Anonymous, true
	}
	return s.keys.Lookup(key)
}

// KeyNamed finds a configured key by its name: a console session names its
// key, and ends when the key is gone.
func (s *Server) KeyNamed(name string) (apikey.Key, bool) {
	if s.opts.AuthDisabled {
		return apikey.Anonymous, name == apikey.Anonymous.Name
	}
	return s.keys.ByName(name)
}

// Mount serves h at prefix and everything below it: the web console, which
// authenticates its own way (a session cookie, not X-API-Key). Call it
// before serving.
func (s *Server) Mount(prefix string, h http.Handler) {
	s.e.Any(prefix, echo.WrapHandler(h))
	s.e.Any(prefix+"/*", echo.WrapHandler(h))
}

func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic in handler", zap.Any("panic", r), zap.String("route", c.Path()), zap.ByteString("stack", debug.Stack()))
				err = internal(fmt.Errorf("panic: %v", r))
			}
		}()
		return next(c)
	}
}

// answered is the status code of c's answer and its route, as metrics,
// logs and spans label it ("unmatched" when no route matched).
func answered(c *echo.Context) (code int, route string) {
	code = http.StatusOK
	if r, err := echo.UnwrapResponse(c.Response()); err == nil {
		code = r.Status
	}
	route = c.Path()
	if route == "" {
		route = "unmatched"
	}
	return code, route
}

// observe records metrics and one log line per request. Recipients and
// bodies are never logged here. Its field names are a contract (docs/running.md,
// Logs).
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			s.handleError(c, err)
		}
		code, route := answered(c)
		elapsed := time.Since(start)
		method := methodLabel(c.Request().Method)
		s.metrics.requests.WithLabelValues(route, method, strconv.Itoa(code)).Inc()
		s.metrics.latency.WithLabelValues(route).Observe(elapsed.Seconds())
		var ae *apiError
		if errors.As(err, &ae) && ae.Limit != "" {
			s.metrics.rejections.WithLabelValues(ae.Limit).Inc()
		}
		level := requestLevel(code)
		ce := s.log.Check(level, "request")
		// The flood of an overload (every refusal a line) is held back
		// past a burst per route and status, and summed up; errors never
		// are, nor the debug lines an operator asked for. The metrics
		// above have counted every request already.
		if ce == nil || ((level == zapcore.InfoLevel || level == zapcore.WarnLevel) && !s.quiet.Allow(route+" "+strconv.Itoa(code), level, zap.String("of", "request"), zap.String("route", route), zap.Int("status", code))) {
			return nil
		}
		k := Caller(c)
		// api_key, not caller: zap's own "caller" (the source line) is on
		// every line, and a JSON line with a key twice is refused by
		// Elasticsearch or loses one of the two elsewhere (issue 38).
		fields := []zap.Field{zap.String("method", method), zap.String("route", route), zap.Int("status", code),
			zap.Duration("took", elapsed), zap.String("api_key", k.Name), zap.String("tenant", k.Tenant), zap.String("ip", c.RealIP()),
			telemetry.LogField(c.Request().Context())}
		if err != nil {
			fields = append(fields, errField(err, code))
		}
		ce.Write(fields...)
		return nil
	}
}

// requestLevel is the level of a request's line. A refusal (429, 503: a
// limit, a full queue, a dependency down) is the system working as
// designed, said at info and warn without a stack trace; only a 500 (a
// bug, or a panic) is an error, with its stack, for an alert to fire on.
func requestLevel(code int) zapcore.Level {
	switch {
	case code == http.StatusServiceUnavailable:
		return zapcore.WarnLevel
	case code >= 500:
		return zapcore.ErrorLevel
	case code >= 400:
		return zapcore.InfoLevel
	}
	return zapcore.DebugLevel
}

// errField is a failed request's "error": what the caller was told, and
// for a 5xx the cause behind it, which only the log shows.
func errField(err error, code int) zap.Field {
	var ae *apiError
	switch {
	case !errors.As(err, &ae):
		return zap.Error(err)
	case code >= 500 && ae.cause != nil:
		return zap.String("error", ae.Msg+": "+ae.cause.Error())
	}
	return zap.String("error", ae.Msg)
}

func (s *Server) healthz(c *echo.Context) error {
	return reply(c, http.StatusOK, "ok", map[string]string{"status": "alive"})
}

func (s *Server) readyz(c *echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
	defer cancel()
	checks := s.d.Ready(ctx)
	for _, v := range checks {
		if v != "ok" {
			return reply(c, http.StatusServiceUnavailable, "not ready", checks)
		}
	}
	return reply(c, http.StatusOK, "ready", checks)
}
