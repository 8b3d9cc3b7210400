package dispatch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	mailchannel "github.com/msgpulse/msgpulse/internal/dispatch/mail"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/applier"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/receipt/verp"
	"github.com/msgpulse/msgpulse/internal/startup"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/timeline"
	"github.com/msgpulse/msgpulse/internal/token"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Option changes how Run builds the consumer, for tools that embed it.
type Option func(*runOptions)

type runOptions struct {
	sms   provider.SMSSender
	out   io.Writer
	ready func()
	reg   *prometheus.Registry
}

// WithSMS replaces the configured SMS provider (loadgen's no-op provider).
func WithSMS(s provider.SMSSender) Option { return func(o *runOptions) { o.sms = s } }

// WithOutput is where the development "log" SMS provider prints; default
// stdout.
func WithOutput(w io.Writer) Option { return func(o *runOptions) { o.out = w } }

// WithReady is called once the consumers are started.
func WithReady(f func()) Option { return func(o *runOptions) { o.ready = f } }

// WithRegistry collects the metrics into reg instead of a fresh registry.
func WithRegistry(reg *prometheus.Registry) Option { return func(o *runOptions) { o.reg = reg } }

// newWeCom builds the WeCom client, its access token shared through Redis
// by every consumer.
func newWeCom(cfg config.Consumer, redisClient redis.UniversalClient) (*wecom.Client, error) {
	// One token per application (corp and agent), whichever account
	// names it: WeCom issues one per corp and secret.
	return wecom.NewAccounts(cfg.WeCom, func(a wecom.Account, fetch func(context.Context) (string, time.Duration, error)) (wecom.Tokens, error) {
		return token.New(redisClient, token.Config{Prefix: cfg.RedisPrefix, Name: wecomchannel.TokenName(a)}, fetch)
	})
}

// Run consumes until ctx ends, then stops gracefully: consumers stop taking
// work, in-flight sends finish (up to SHUTDOWN_TIMEOUT) and are acked, the
// relay hands back what it holds, queued callbacks are flushed, and only
// then are the broker connection and Redis closed.
func Run(ctx context.Context, cfg config.Consumer, log *zap.Logger, opts ...Option) error {
	o := runOptions{out: os.Stdout}
	for _, opt := range opts {
		opt(&o)
	}
	b, err := startup.Open(ctx, startup.Config{
		CodeSecret: cfg.CodeSecret, CodeSecretIsDev: cfg.CodeSecretIsDev,
		DevSecretWarning: "CODE_SECRET is the development default: set the same secret as the API's in production",
		Telemetry:        cfg.Telemetry, Model: cfg.Model, Templates: cfg.Templates,
		// Fail fast: a worker that notices a dead Redis pauses (see pause)
		// instead of waiting out go-redis's retries.
		RedisMode: cfg.RedisMode, RedisURL: cfg.RedisURL, RedisAutoPipeline: cfg.RedisAutoPipeline, RedisTimeout: cfg.RedisTimeout,
		AMQPURL: cfg.AMQPURL, ConnectionName: "msgpulse-consumer-" + cfg.ConsumerID, LeaveAfter: cfg.AMQPLeaveAfter,
		PprofAddr: cfg.PprofAddr,
		Registry:  o.reg, // nil: a fresh one with the Go and process collectors
	}, log)
	if err != nil {
		return err
	}
	// Background services outlive the consumers until they have drained.
	defer b.Close()
	if cfg.CallbackPrivate {
		log.Warn("CALLBACK_ALLOW_PRIVATE=true: callbacks may reach loopback, link-local and private addresses; use this for local development only")
	}
	keys, model, tpl, redisClient, session, reg := b.Keys, b.Model, b.Templates, b.Redis, b.Session, b.Registry
	// A claim is made durable before its provider is called
	// (docs/cluster.md, "Redis durability"); closed before the client.
	fence, err := rdb.NewFence(redisClient, cfg.RedisWait)
	if err != nil {
		return fmt.Errorf("REDIS_WAIT_REPLICAS: %w", err)
	}
	defer fence.Close()

	metrics := NewMetrics(reg)
	delayMetrics := delay.NewMetrics(reg)

	var mailer provider.Mailer
	var smsSender provider.SMSSender
	var weCom wecomchannel.Client
	var breakers []func() map[string]breaker.State // for msgpulse_breaker_state
	for _, ch := range cfg.Channels {
		switch ch {
		case topology.Mail:
			smtpCfg := cfg.SMTP
			if cfg.Receipts.BounceDomain != "" {
				// Every mail's envelope sender names its task, signed, so
				// its bounces reach the API's receiver tied to it.
				if smtpCfg.ReturnPath, err = verp.New(cfg.Receipts.Secret, cfg.Receipts.BounceDomain); err != nil {
					return fmt.Errorf("MAIL_BOUNCE_DOMAIN: %w", err)
				}
			}
			m, err := mail.New(smtpCfg, log.Named("smtp"))
			if err != nil {
				return fmt.Errorf("SMTP: %w", err)
			}
			defer func() { _ = m.Close() }()
			gm := mailchannel.Guard{Mailer: m, Breaker: breaker.New(cfg.SMS.Breaker, nil)}
			breakers = append(breakers, func() map[string]breaker.State { return map[string]breaker.State{gm.Name(): gm.Breaker.State()} })
			mailer = gm
		case topology.SMS:
			if o.sms != nil {
				smsSender = o.sms
				continue
			}
			r, err := sms.FromConfig(cfg.SMS, log.Named("sms"), o.out)
			if err != nil {
				return fmt.Errorf("SMS: %w", err)
			}
			defer func() { _ = r.Close() }()
			breakers = append(breakers, r.States)
			smsSender = r
		case topology.WeCom:
			c, err := newWeCom(cfg, redisClient)
			if err != nil {
				return fmt.Errorf("WECOM: %w", err)
			}
			defer func() { _ = c.Close() }()
			weCom = c
		}
	}

	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: session, Logger: log})
	if err != nil {
		return err
	}
	defer pub.Close()
	planner, err := delay.NewPlanner(model.Delay, cfg.Delay.Margin, cfg.Delay.Tolerance)
	if err != nil {
		return err
	}
	delayed := delay.NewPublisher(pub, planner, model.Delay, delayMetrics)

	// The console's chart of the last hour: this consumer's counts, added
	// to Redis every few seconds off the hot path.
	sampler, err := timeline.NewSampler(redisClient, cfg.RedisPrefix, timeline.Sources{Sent: metrics.Sent, Failed: metrics.DeadLettered, Accuracy: delayMetrics.Accuracy}, 0, log.Named("timeline"))
	if err != nil {
		return err
	}
	b.Go(sampler.Run)

	rateLimits, err := b.RateLimits(cfg.RedisPrefix, cfg.RateLimitRefresh)
	if err != nil {
		return err
	}
	claims, err := claim.New(redisClient, claim.Config{Prefix: cfg.RedisPrefix, Lease: cfg.ClaimLease, SentTTL: cfg.SentTTL})
	if err != nil {
		return err
	}
	statuses, err := status.New(redisClient, status.Config{Prefix: cfg.RedisPrefix, TTL: cfg.StatusTTL})
	if err != nil {
		return err
	}
	callbacks, err := NewCallbacks(CallbackConfig{Keys: cfg.CallbackKeys, Timeout: cfg.CallbackTimeout, Attempts: cfg.CallbackAttempts, Logger: log.Named("callback"), Results: metrics.Callbacks,
		Egress: egress.Policy{AllowPrivate: cfg.CallbackPrivate}})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		callbacks.Close(cctx)
	}()
	// A provider's refusal during the send that is a receipt (550 5.1.1,
	// Twilio 21610) is applied here as the API's receivers apply theirs:
	// the status, the tenant's callback, the suppression list.
	// A refusal during the send (550 5.1.1, Twilio 21610) suppresses its
	// recipient in the list the API checks.
	suppressions, err := suppression.New(redisClient, suppression.Config{Prefix: cfg.RedisPrefix})
	if err != nil {
		return err
	}
	receipts, err := applier.New(applier.Config{Status: statuses, Keys: keys, Callbacks: callbacks, Suppressor: suppressions,
		Metrics: applier.NewMetrics(reg), Logger: log.Named("receipt")})
	if err != nil {
		return err
	}
	wa := cfg.WeComAccounts
	mediaStore, err := media.New(redisClient, media.Config{Prefix: cfg.RedisPrefix, Egress: egress.Policy{AllowPrivate: cfg.CallbackPrivate},
		FetchTimeout: wa.MediaFetchTimeout, MinRate: int64(wa.MediaMinRate), RateWindow: wa.MediaRateWindow, UploadTimeout: wa.MediaUploadTimeout, CacheTTL: wa.MediaCacheTTL})
	if err != nil {
		return err
	}
	accounts, err := accountstate.New(redisClient, accountstate.Config{Prefix: cfg.RedisPrefix, Window: cfg.WeComAccounts.HealthWindow})
	if err != nil {
		return err
	}
	adaptive := ratelimit.NewAdaptive(redisClient, cfg.RedisPrefix, reg)
	var weComCfg *wecomchannel.Config
	if weCom != nil {
		weComCfg = &wecomchannel.Config{Client: weCom, Adaptive: adaptive, Accounts: accounts, Limits: wa.Limits, MergeWindow: wa.MergeWindow, MergeMax: wa.MergeMax,
			Media: mediaStore, MediaWorkers: wa.MediaWorkers, MediaTenantWorkers: wa.MediaTenantWorkers,
			MediaMaxBytes: int64(wa.MediaMaxBytes), MediaTenantMaxBytes: int64(wa.MediaTenantMaxBytes)}
	}
	links, err := unsubscribeLinks(cfg.Receipts)
	if err != nil {
		return err
	}
	d, err := New(Config{
		Model: model, Claims: claims, Status: statuses, Templates: tpl, Keys: keys, Mail: mailer, Unsubscribe: links, SMS: smsSender, WeCom: weComCfg,
		Delayed: delayed, Limiter: ratelimit.New(redisClient, cfg.RedisPrefix).WithExactMax(cfg.LimitExactMax), RateLimits: rateLimits, Callbacks: callbacks, Receipts: receipts, SMSLookup: smslookup.New(redisClient, cfg.RedisPrefix),
		Redis: redisClient, Fence: fence, SendTimeout: cfg.SendTimeout, MaxMessageBytes: cfg.MaxMessageBytes, Owner: cfg.ConsumerID, Metrics: metrics, DelayMetrics: delayMetrics,
		Logger: log, Retry: RetryPolicy{MaxRetries: cfg.MaxRetries, Backoff: cfg.RetryBackoff, Throttled: cfg.ThrottledBackoff},
	})
	if err != nil {
		return err
	}
	reg.MustRegister(newBreakerStates(breakers...))
	d.ZeroMetrics(cfg.Channels)
	delayMetrics.Zero(model.Delay)

	// consuming: every channel's consumers have subscribed (each pool
	// reported its size, which it does once subscribed), and ctx is live.
	var consuming atomic.Bool
	var subscribed, consumers atomic.Int32
	if cfg.MetricsAddr != "" {
		ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("METRICS_ADDR: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"code":200,"msg":"ok","data":{"status":"alive"}}`))
		})
		// Ready while consuming with Redis and the broker reachable: an
		// orchestrator sends no traffic here, but rolls out the next pod
		// only once this one consumes.
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			pctx, cancel := context.WithTimeout(r.Context(), time.Second)
			defer cancel()
			_, connected := session.Current()
			if !consuming.Load() || subscribed.Load() < consumers.Load() || !connected || redisClient.Ping(pctx).Err() != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
				_, _ = w.Write([]byte(`{"code":503,"msg":"not ready","data":{"status":"not ready"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"code":200,"msg":"ok","data":{"status":"ready"}}`))
		})
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		b.Go(func(context.Context) { _ = srv.Serve(ln) })
		defer func() { _ = srv.Close() }()
		log.Info("metrics listening", zap.String("addr", ln.Addr().String()))
	}

	// Consuming before the provider limits are loaded would send past a
	// vendor's limit for as long as the load takes.
	if err := rateLimits.WaitReady(ctx, 10*time.Second); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	// The consumers and the relay run on ctx: cancelling it starts the
	// graceful stop. They are the last to start and the first to stop.
	var wg sync.WaitGroup
	errs := make(chan error, len(cfg.Channels)*len(topology.Levels)+2) // a channel's pools (see Pools: at most one a level), the dead letters', the relay
	for _, ch := range cfg.Channels {
		ct, err := model.Channel(ch)
		if err != nil {
			return err
		}
		w := cfg.Workers[ch]
		if w.Min == 0 {
			w = config.WorkerBounds{Min: cfg.Concurrency, Max: cfg.Concurrency}
		}
		for _, pool := range d.Pools(ct, cfg.PriorityWeights, w.Max) {
			c, err := broker.NewConsumer(broker.ConsumerConfig{
				Session: session, Queues: pool.Queues, OnPanic: d.OnPanic(ch),
				Concurrency: w.Min, MaxConcurrency: w.Max, OnWorkers: onWorkers(metrics.WorkersOf(ch, pool.Name), &subscribed), Prefetch: cfg.Prefetch, Grace: cfg.ShutdownTimeout,
				SubscribeTimeout: cfg.SubscribeTimeout, Tag: "msgpulse-consumer-" + cfg.ConsumerID, Logger: log.Named(ch),
			})
			if err != nil {
				return err
			}
			consumers.Add(1)
			wg.Add(1)
			go func() { defer wg.Done(); errs <- c.Run(ctx) }()
		}
	}
	// The status of what the broker dead-letters by itself (see
	// DeadLetterQueues): a small pool, as dead letters are few.
	if dl := d.DeadLetterQueues(cfg.Channels, cfg.Relay && model.Delay.RelayQueue != ""); len(dl) > 0 {
		c, err := broker.NewConsumer(broker.ConsumerConfig{Session: session, Queues: dl, Concurrency: 2, Prefetch: 16, Grace: cfg.ShutdownTimeout,
			SubscribeTimeout: cfg.SubscribeTimeout, Tag: "msgpulse-consumer-" + cfg.ConsumerID, Logger: log.Named("dead-letters")})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- c.Run(ctx) }()
	}
	if cfg.Relay && model.Delay.RelayQueue != "" {
		relay, err := delay.NewRelay(delay.RelayConfig{Session: session, Publisher: pub, Planner: planner, Topology: model.Delay,
			Metrics: delayMetrics, Logger: log, Concurrency: cfg.RelayConcurrency, Grace: cfg.ShutdownTimeout, SubscribeTimeout: cfg.SubscribeTimeout})
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); errs <- relay.Run(ctx) }()
		b.Go(func(ctx context.Context) {
			delay.WatchDepth(ctx, session, model.Delay, delayMetrics, 15*time.Second, log)
		})
	}
	log.Info("consumer started", zap.Strings("channels", cfg.Channels), zap.String("id", cfg.ConsumerID),
		zap.Bool("relay", cfg.Relay && model.Delay.RelayQueue != ""), zap.Int("concurrency", cfg.Concurrency))
	consuming.Store(true)
	defer consuming.Store(false)
	if o.ready != nil {
		o.ready()
	}
	go func() { <-ctx.Done(); consuming.Store(false); d.Drain() }() // ends with ctx: stopping is not ready, and what is handed off finishes
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	log.Info("consumer stopped")
	return errors.Join(all...)
}

// onWorkers sets the workers gauge and counts, once, the channel as
// subscribed: the broker consumer reports its pool size once it consumes.
func onWorkers(set func(int), subscribed *atomic.Int32) func(int) {
	var once sync.Once
	return func(n int) {
		once.Do(func() { subscribed.Add(1) })
		set(n)
	}
}
