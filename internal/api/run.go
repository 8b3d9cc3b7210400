package api

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"
	"golang.org/x/net/netutil"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/console"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/startup"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/timeline"
	"github.com/msgpulse/msgpulse/internal/unsubscribe"
	"github.com/msgpulse/msgpulse/internal/verify"
)

// Run serves the API until ctx ends, then shuts down gracefully: it stops
// accepting connections, lets requests in flight finish (their publishes
// confirm or roll back), and only then closes the broker and Redis.
func Run(ctx context.Context, cfg config.API, log *zap.Logger) error {
	b, err := startup.Open(ctx, startup.Config{
		CodeSecret: cfg.CodeSecret, CodeSecretIsDev: cfg.CodeSecretIsDev,
		DevSecretWarning: "CODE_SECRET is the development default: set a secret of your own in production (the consumer and dlq need the same value)",
		Telemetry:        cfg.Telemetry, Model: cfg.Model, Templates: cfg.Templates,
		// Fail fast on the request path: a dead Redis is a quick 503.
		RedisMode: cfg.RedisMode, RedisURL: cfg.RedisURL, RedisAutoPipeline: cfg.RedisAutoPipeline, RedisTimeout: cfg.RedisTimeout,
		AMQPURL: cfg.AMQPURL, ConnectionName: "msgpulse-api", LeaveAfter: cfg.AMQPLeaveAfter,
		PprofAddr: cfg.PprofAddr,
	}, log)
	if err != nil {
		return err
	}
	// Background services outlive ctx until the HTTP server has drained.
	defer b.Close()
	// Writes a 202 promises are made durable first (docs/cluster.md,
	// "Redis durability"). Closed before the client (defers run last in,
	// first out).
	fence, err := rdb.NewFence(b.Redis, cfg.RedisWait)
	if err != nil {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %w", err)
	}
	defer fence.Close()
	notes(cfg, log)
	keys, model, tpl, redisClient, session, reg := b.Keys, b.Model, b.Templates, b.Redis, b.Session, b.Registry
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: session, Channels: cfg.PublishChannels, Lanes: cfg.PublishLanes, Window: cfg.PublishWindow, ConfirmTimeout: cfg.PublishTimeout, Logger: log})
	if err != nil {
		return err
	}
	defer pub.Close()

	// Admission's depth readings: one goroutine per level queue, owned by
	// the background like the session they read through.
	gauge, err := broker.NewGauge(broker.GaugeConfig{Session: session, Queues: AdmitQueues(model), Interval: cfg.AdmitInterval, Logger: log.Named("admission")})
	if err != nil {
		return err
	}
	b.Go(gauge.Run)

	planner, err := delay.NewPlanner(model.Delay, cfg.Delay.Margin, cfg.Delay.Tolerance)
	if err != nil {
		return err
	}
	delayMetrics := delay.NewMetrics(reg)
	delayMetrics.Zero(model.Delay) // alerts read the overflow counters from the start
	delayed := delay.NewPublisher(pub, planner, model.Delay, delayMetrics)

	rateLimits, err := b.RateLimits(cfg.RedisPrefix, cfg.Limits.ConfigRefreshEvery)
	if err != nil {
		return err
	}
	codes, err := verify.New(redisClient, keys, verify.Config{Prefix: cfg.RedisPrefix, CodeLength: cfg.CodeLength, TTL: cfg.CodeTTL, MaxAttempts: cfg.VerifyAttempts})
	if err != nil {
		return err
	}
	claims, err := claim.New(redisClient, claim.Config{Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}
	statuses, err := status.New(redisClient, status.Config{Prefix: cfg.RedisPrefix, TTL: cfg.StatusTTL})
	if err != nil {
		return err
	}
	mc, vhost := management(cfg, log)
	inspect := func(ctx context.Context, names []string) ([]broker.QueueState, error) {
		conn, err := session.Conn(ctx)
		if err != nil {
			return nil, err
		}
		return broker.Inspect(conn, names)
	}
	// Only read here (the stats): the API never marks an account down.
	accounts, err := accountstate.New(redisClient, accountstate.Config{Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}
	limiter := ratelimit.New(redisClient, cfg.RedisPrefix).WithExactMax(cfg.Limits.ExactMax)
	guard, err := fraud.New(redisClient, cfg.RedisPrefix, cfg.Fraud, limiter.ClockOffset)
	if err != nil {
		return err
	}
	// The suppression list: the limiter's script refuses codes and sends
	// to its recipients, /api/suppressions and the console serve it.
	suppressions, err := suppression.New(redisClient, suppression.Config{Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}
	// What comes back after sent: receipts applied here (the SMS hooks, the
	// bounce receiver) move statuses, fire callbacks and fill the list.
	rcpts, err := newReceipts(cfg, keys, statuses, suppressions, redisClient, reg, log)
	if err != nil {
		return err
	}
	defer rcpts.close() // after the HTTP server drained: its hooks queue callbacks
	// One-click unsubscribe (RFC 8058), when PUBLIC_BASE_URL is set.
	unsub, err := unsubscribe.FromConfig(cfg.Receipts, suppressions, log.Named("unsubscribe"))
	if err != nil {
		return err
	}
	if unsub != nil {
		unsub.Timeout = cfg.RedisTimeout
	}
	if !guard.On() {
		log.Warn("FRAUD_GUARD=off: nothing watches SMS codes for pumping (blocks in force still end on their own and can be lifted)")
	}
	srv, err := New(Deps{
		Log: log, Model: model, Publisher: pub, Delayed: delayed, Limiter: limiter, Fraud: guard, Suppression: suppressions, SMSHooks: rcpts.smsHooks, Unsubscribe: unsub,
		RateLimits: rateLimits, Codes: codes, Status: statuses, Redis: redisClient, Templates: tpl, Registry: reg, Claims: claims,
		Fence:    fence,
		DLQ:      CachedDLQStats(session, model, statuses, 5*time.Second),
		Inspect:  inspect,
		Ages:     queueAges(mc, vhost),
		Gauge:    gauge,
		Accounts: accounts,
		Ready: func(ctx context.Context) map[string]string {
			out := map[string]string{"amqp": "ok", "redis": "ok"}
			if _, ok := session.Current(); !ok {
				out["amqp"] = "not connected"
			} else if session.Blocked() {
				out["amqp"] = "connected, but the broker blocks publishing"
			}
			if err := redisClient.Ping(ctx).Err(); err != nil {
				out["redis"] = err.Error()
			}
			return out
		},
	}, Options{APIKeys: cfg.APIKeys, AuthDisabled: cfg.AuthDisabled, TrustedProxies: cfg.TrustedProxies, BodyLimit: cfg.BodyLimit,
		Limits: cfg.Limits, CallbackHTTP: cfg.CallbackHTTP, Egress: egress.Policy{AllowPrivate: cfg.CallbackPrivate}, CallbackKeys: cfg.CallbackKeys, AuthFailuresPerMinute: cfg.AuthFailuresPerMinute, PublishTimeout: cfg.PublishTimeout, MessageMaxAge: cfg.MessageMaxAge,
		BatchMaxBytes: cfg.BatchMaxBytes, Robots: cfg.WeComRobots,
		IdempotencyTTL: cfg.IdempotencyTTL, AdmitFill: cfg.AdmitFill,
		WeComAccounts: cfg.WeComAccounts, SMSCodes: cfg.SMSCodes, RequestLog: cfg.RequestLog, RedisTimeout: cfg.RedisTimeout, WeComLimits: cfg.WeComLimits})
	if err != nil {
		return err
	}
	reg.MustRegister(srv.QueueCollector())
	con, err := console.New(console.Config{SessionTTL: cfg.ConsoleSessionTTL, DLQ: config.DLQ{Common: cfg.Common, Model: cfg.Model,
		ConfirmTimeout: cfg.PublishTimeout, ScanMax: dlq.DefaultScanMax, StatusTimeout: cfg.RedisTimeout}}, console.Deps{
		Log: log, Model: model, Status: statuses, Redis: redisClient, Conn: session.Conn, Inspect: inspect, Timeline: timeline.NewReader(redisClient, cfg.RedisPrefix),
		// The console authenticates by a session cookie, not X-API-Key, so
		// it is mounted without Guard and checks keys (and the admin scope,
		// console.Allowed) itself.
		Rates:        queueRates(mc, vhost),
		Accounts:     srv.WeComAccountStates, // the reader behind /api/queues/stats' wecomAccounts
		Fraud:        guard,                  // the blocks GET /api/fraud/blocks lists
		Suppressions: suppressions,           // the list GET /api/suppressions reads
		Authenticate: srv.KeyOf,
		Lookup:       srv.KeyNamed,
		ClientIP:     srv.ClientIP,
	})
	if err != nil {
		return err
	}
	defer con.Close() // after the HTTP server drained: stops the console's replays, which give back what they hold
	srv.Mount(console.Prefix, con)
	// Serving before the rate-limit configs are loaded would admit traffic
	// that an enabled global limit should refuse.
	if err := rateLimits.WaitReady(ctx, 10*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	// The bounce receiver hands what it reads to the same applier.
	bounces, err := startBounce(cfg, rcpts.applier, log)
	if err != nil {
		return err
	}
	// On every way out, after the HTTP server drained (defers run last in,
	// first out) and before Redis closes.
	defer closeBounce(ctx, cfg.ShutdownTimeout, bounces, log)
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: %w", err)
	}
	if cfg.MaxConnections > 0 {
		// Past it a connection waits to be accepted, holding nothing of
		// ours: what callers without a key can make the API hold is
		// bounded by connections × MaxHeaderBytes (issue 43).
		ln = netutil.LimitListener(ln, cfg.MaxConnections)
	}
	httpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 15 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: cfg.MaxHeaderBytes, ErrorLog: zap.NewStdLog(log.Named("http"))}
	served := make(chan error, 1)
	go func() { served <- httpSrv.Serve(ln) }()
	log.Info("api listening", zap.String("addr", ln.Addr().String()), zap.Int("api_keys", len(cfg.APIKeys)))

	select {
	case err := <-served:
		return fmt.Errorf("http server: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining requests", zap.Duration("timeout", cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		log.Warn("shutdown did not finish in time", zap.Error(err))
	}
	srv.Wait() // background rollbacks, before Redis closes
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// notes logs, once at startup, what an operator should know of the
// API's settings: who holds the admin scope, and what is off or open
// for development only.
func notes(cfg config.API, log *zap.Logger) {
	if cfg.AuthDisabled {
		log.Warn("API_AUTH=disabled: /api/* accepts requests without an API key; use this for local development only")
	}
	if !cfg.AuthDisabled {
		// Once, by name: admin reads every tenant's data and opens the
		// console, so who holds it should be plain in the logs.
		log.Info("API keys with the admin scope (platform operators: every tenant's data, global limits, the console)",
			zap.Strings("admin_keys", apikey.Admins(cfg.APIKeys)))
	}
	if !cfg.CallbackKeys.Configured() {
		log.Info("no CALLBACK_SECRETS or CALLBACK_SECRET: requests with a callbackUrl are refused (400)")
	}
	if cfg.CallbackPrivate {
		log.Warn("CALLBACK_ALLOW_PRIVATE=true: callbackUrl may name loopback, link-local and private addresses; use this for local development only")
	}
}

// queueRates reads the console's in/out rates from the management API;
// nil without a client (the console then shows each queue's net change).
func queueRates(mc *mgmt.Client, vhost string) func(context.Context) (map[string]console.Rates, error) {
	if mc == nil {
		return nil
	}
	return func(ctx context.Context) (map[string]console.Rates, error) {
		qs, err := mc.Queues(ctx, vhost)
		if err != nil {
			return nil, err
		}
		out := make(map[string]console.Rates, len(qs))
		for _, q := range qs {
			if st := q.MessageStats; st != nil {
				out[q.Name] = console.Rates{In: st.Publish.Rate, Out: st.DeliverGet.Rate}
			}
		}
		return out, nil
	}
}

// queueAges reads each queue's oldest message time from the management
// API, for /api/queues/stats; nil without a client (the stats then have no
// ages).
func queueAges(mc *mgmt.Client, vhost string) func(context.Context) (map[string]time.Time, error) {
	if mc == nil {
		return nil
	}
	return func(ctx context.Context) (map[string]time.Time, error) { return mc.HeadTimestamps(ctx, vhost) }
}

// management is the one management API client of the API (queue ages for
// /api/queues/stats, rates for the console) and the AMQP URL's vhost; nil
// (logged, saying what is missing) when RABBITMQ_MANAGEMENT_URL is unusable.
func management(cfg config.API, log *zap.Logger) (*mgmt.Client, string) {
	mc, err := mgmt.New(cfg.ManagementURL, 2*time.Second)
	if err != nil {
		log.Warn("queue stats show no oldest-message ages and the console no rates: RABBITMQ_MANAGEMENT_URL", zap.Error(err))
		return nil, ""
	}
	return mc, mgmt.VHostOf(cfg.AMQPURL)
}
