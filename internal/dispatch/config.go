package dispatch

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/delay"
	smschannel "github.com/msgpulse/msgpulse/internal/dispatch/sms"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/unsub"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// RetryPolicy says when a failed send is tried again (seed 000: 5s, 30s,
// 5m; seed 004: throttling waits longer).
type RetryPolicy struct {
	MaxRetries int             // retries after the first attempt (0 = none)
	Backoff    []time.Duration // wait before retry n (the last repeats); default 5s, 30s, 5m
	Throttled  []time.Duration // same, when the provider throttled us; default 1m, 5m, 15m
	Jitter     float64         // ± fraction; default 0.1
}

func (p *RetryPolicy) setDefaults() {
	if len(p.Backoff) == 0 {
		p.Backoff = []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
	}
	if len(p.Throttled) == 0 {
		p.Throttled = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}
	}
	p.Jitter = cmp.Or(p.Jitter, 0.1)
}

// Wait returns the wait before retry n (1-based), at least the provider's
// hint.
func (p RetryPolicy) Wait(n int, throttled bool, hint time.Duration) time.Duration {
	steps := p.Backoff
	if throttled {
		steps = p.Throttled
	}
	w := steps[min(n, len(steps))-1]
	if p.Jitter > 0 {
		w += time.Duration((rand.Float64()*2 - 1) * p.Jitter * float64(w)) //nolint:gosec // jitter, not a secret
	}
	return max(w, hint, time.Millisecond)
}

// Config wires a Dispatcher. Mail, SMS and WeCom register the channels
// (channels.go): each nil = this consumer has no provider for it.
type Config struct {
	Model     *topology.Model
	Claims    *claim.Claimer
	Status    *status.Store
	Templates *template.Store
	Keys      *seal.Keys
	Mail      provider.Mailer
	SMS       provider.SMSSender
	// SMSLookup keeps each sent SMS's vendor message id → its task
	// (smslookup.Store), written with the sent mark; nil = none, and no
	// delivery report finds its message.
	SMSLookup smschannel.Lookup
	// Unsubscribe makes the List-Unsubscribe link of mail notices at
	// normal and low (PUBLIC_BASE_URL); nil = no unsubscribe headers.
	Unsubscribe *unsub.Links
	// WeCom is the WeCom channel's own configuration: its client, accounts,
	// merge and media. Its Templates, Limiter, SendTimeout, metrics and
	// Logger are this Config's.
	WeCom      *wecomchannel.Config
	Delayed    *delay.Publisher
	Limiter    *ratelimit.Limiter
	RateLimits *ratelimit.ConfigStore // per-provider limits; nil = none
	Callbacks  *Callbacks             // nil = no callbacks
	// Receipts applies the receipt of a provider's refusal during the
	// send (receipt.RefusedError); nil = such a message is recorded failed.
	Receipts receipt.Applier
	Redis    redis.UniversalClient // pinged while paused, and pipelines claims with status updates
	// Fence makes a claim durable before its provider is called (see
	// durable.go); nil or off: a claim is trusted once Redis answered.
	Fence *rdb.Fence
	Retry RetryPolicy
	// SendTimeout bounds one provider call; default 30s.
	SendTimeout time.Duration
	// MaxMessageBytes: a larger body is dead-lettered as malformed before
	// it is decoded or rendered; default 1 MiB.
	MaxMessageBytes int
	Owner           string // this consumer's name in claims
	Metrics         *Metrics
	DelayMetrics    *delay.Metrics
	Logger          *zap.Logger
}

// Validate fills defaults and checks the wiring.
func (c *Config) Validate() error {
	if c.Model == nil || c.Claims == nil || c.Status == nil || c.Templates == nil || c.Keys == nil || c.Delayed == nil || c.Limiter == nil || c.Redis == nil {
		return errors.New("dispatch: missing dependency")
	}
	if c.Mail == nil && c.SMS == nil && c.WeCom == nil {
		return errors.New("dispatch: no provider")
	}
	c.Retry.setDefaults()
	if c.Retry.MaxRetries < 0 {
		return errors.New("dispatch: MaxRetries must not be negative")
	}
	c.SendTimeout = cmp.Or(c.SendTimeout, 30*time.Second)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, 1<<20)
	if c.MaxMessageBytes > envelope.MaxBrokerBytes {
		return fmt.Errorf("dispatch: MaxMessageBytes %d over %d, RabbitMQ 4.x's default max_message_size: no broker left at its default delivers one", c.MaxMessageBytes, envelope.MaxBrokerBytes)
	}
	if c.Owner == "" {
		return errors.New("dispatch: Owner is required")
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.DelayMetrics == nil {
		c.DelayMetrics = delay.NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.WeCom != nil {
		w := *c.WeCom // the caller's stays as it was
		w.Templates, w.Limiter, w.SendTimeout, w.Logger = c.Templates, c.Limiter, c.SendTimeout, c.Logger
		w.AccountRate, w.AccountHealth, w.MergedSends, w.MergedUsers = c.Metrics.AccountRate, c.Metrics.AccountHealth, c.Metrics.MergedSends, c.Metrics.MergedUsers
		if err := w.Validate(); err != nil {
			return fmt.Errorf("dispatch: %w", err)
		}
		c.WeCom = &w
	}
	return nil
}
