// Package startup is what the two long-running programs, the API
// (internal/api, cmd/api) and the consumer (internal/dispatch,
// cmd/consumer), do alike before they serve: the code secret, tracing,
// the topology model, the templates, Redis, the metrics registry, the
// background context with its pprof listener, the AMQP session, and the
// rate-limit config cache. Each program builds what is its own on Base.
//
// It must never serve traffic, consume or publish: that is the programs'
// own. Every goroutine it starts has Base as its owner and Base's
// background context as its context, and Close stops and waits for all
// of them before it closes Redis and flushes the traces.
package startup

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/profile"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Config is what Open needs of a program's configuration.
type Config struct {
	CodeSecret string
	// DevSecretWarning is logged when CodeSecretIsDev: each program says
	// which others need the same secret.
	CodeSecretIsDev  bool
	DevSecretWarning string

	Telemetry telemetry.Config
	Model     topology.Config
	Templates config.Templates

	RedisMode, RedisURL, RedisAutoPipeline string
	// RedisTimeout bounds every Redis call (rdb.FailFast): a dead Redis
	// is a quick 503 on the API and a pause in the consumer, not a wait
	// through go-redis's retries.
	RedisTimeout time.Duration

	AMQPURL        string
	ConnectionName string        // the AMQP connection's name, as the broker shows it
	LeaveAfter     time.Duration // broker.Config.LeaveAfter

	PprofAddr string // "" = no pprof listener

	// Registry collects the metrics; nil makes a fresh one with the Go
	// and process collectors.
	Registry *prometheus.Registry
}

// Validate checks what Open cannot default.
func (c *Config) Validate() error {
	switch {
	case c.ConnectionName == "":
		return errors.New("startup: ConnectionName is required")
	case c.CodeSecretIsDev && c.DevSecretWarning == "":
		return errors.New("startup: a development CODE_SECRET needs its DevSecretWarning")
	}
	return nil
}

// Base is what both programs start with. Its fields are read-only.
type Base struct {
	Keys      *seal.Keys
	Model     *topology.Model
	Templates *template.Store
	Redis     redis.UniversalClient
	Registry  *prometheus.Registry
	Session   *broker.Session
	// Background outlives the program's own context: background services
	// run until the program has drained (requests answered, deliveries
	// acked), then Close cancels it.
	Background context.Context

	log         *zap.Logger
	stop        context.CancelFunc
	wg          sync.WaitGroup
	stopTracing func()
}

// Open starts everything Base holds, in the order each needs the one
// before: tracing first, so that its flush runs last, after every span
// ended. On an error, what was started is stopped again. The caller
// defers Close.
func Open(ctx context.Context, cfg Config, log *zap.Logger) (b *Base, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	b = &Base{log: log, stopTracing: func() {}}
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	if b.Keys, err = seal.New(cfg.CodeSecret); err != nil {
		return b, fmt.Errorf("CODE_SECRET: %w", err)
	}
	if cfg.CodeSecretIsDev {
		log.Warn(cfg.DevSecretWarning)
	}
	if b.stopTracing, err = telemetry.Setup(ctx, cfg.Telemetry, log); err != nil {
		b.stopTracing = func() {}
		return b, err
	}
	if b.Model, err = topology.Build(cfg.Model, ""); err != nil {
		return b, err
	}
	if b.Templates, err = template.Load(cfg.Templates.Dir, cfg.Templates.DefaultLocale); err != nil {
		return b, fmt.Errorf("TEMPLATES_DIR: %w", err)
	}
	if b.Redis, err = rdb.Open(cfg.RedisMode, cfg.RedisURL, rdb.FailFast(cfg.RedisTimeout), rdb.WithAutoPipeline(cfg.RedisAutoPipeline)); err != nil {
		return b, fmt.Errorf("REDIS_URL: %w", err)
	}
	b.Registry = cfg.Registry
	if b.Registry == nil {
		b.Registry = prometheus.NewRegistry()
		b.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}

	b.Background, b.stop = context.WithCancel(context.WithoutCancel(ctx))
	waitProfile, err := profile.Serve(b.Background, cfg.PprofAddr, log)
	if err != nil {
		return b, err
	}
	b.Go(func(context.Context) { waitProfile() }) // it stops with Background
	if b.Session, err = broker.NewSession(broker.Config{URL: cfg.AMQPURL, ConnectionName: cfg.ConnectionName, LeaveAfter: cfg.LeaveAfter, Logger: log.Named("broker")}); err != nil {
		return b, err
	}
	b.Go(b.Session.Run)
	b.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "msgpulse_broker_node_leaves_total",
		Help: "Times this process left a RabbitMQ node that confirmed nothing for AMQP_LEAVE_AFTER or could not serve a consume, and reconnected through the next one."},
		func() float64 { return float64(b.Session.Leaves()) }))
	return b, nil
}

// Go runs f on Background until it returns; Close waits for it.
func (b *Base) Go(f func(ctx context.Context)) {
	b.wg.Add(1)
	go func() { defer b.wg.Done(); f(b.Background) }()
}

// RateLimits starts the cache of the admin-managed rate-limit configs,
// refreshed every refreshEvery and on every change, on Background. The
// caller waits for it (ConfigStore.WaitReady) before it serves: traffic
// admitted before the configs are loaded would pass an enabled limit.
func (b *Base) RateLimits(prefix string, refreshEvery time.Duration) (*ratelimit.ConfigStore, error) {
	rl, err := ratelimit.NewConfigStore(b.Redis, prefix, b.log.Named("ratelimit"), ratelimit.StoreConfig{RefreshEvery: refreshEvery})
	if err != nil {
		return nil, err
	}
	b.Go(func(ctx context.Context) {
		if err := rl.Run(ctx); err != nil && ctx.Err() == nil {
			b.log.Error("rate-limit config cache stopped", zap.Error(err))
		}
	})
	return rl, nil
}

// Close stops Background and waits for every goroutine on it, then closes
// Redis and flushes the traces. The program calls it once it has drained.
func (b *Base) Close() {
	if b.stop != nil {
		b.stop()
	}
	b.wg.Wait()
	if b.Redis != nil {
		_ = b.Redis.Close()
	}
	b.stopTracing()
}
