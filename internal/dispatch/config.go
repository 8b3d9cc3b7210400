package dispatch

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
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
	if p.Jitter == 0 {
		p.Jitter = 0.1
	}
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

// Config wires a Dispatcher.
type Config struct {
	Model     *topology.Model
	Claims    *claim.Claimer
	Status    *status.Store
	Templates *template.Store
	Keys      *seal.Keys
	Mail      provider.Mailer
	SMS       provider.SMSSender
	WeCom     WeComClient
	// Adaptive holds each WeCom account (application, robot) to its
	// adaptive rate; nil = no adaptive rate. AppRate and RobotRate bound
	// it (defaults: DefaultAppRate, DefaultRobotRate).
	Adaptive   *ratelimit.Adaptive
	AppRate    ratelimit.Bounds
	RobotRate  ratelimit.Bounds
	Delayed    *delay.Publisher
	Limiter    *ratelimit.Limiter
	RateLimits *ratelimit.ConfigStore // per-provider limits; nil = none
	Callbacks  *Callbacks             // nil = no callbacks
	Redis      redis.UniversalClient  // pinged while paused, and pipelines claims with status updates
	Retry      RetryPolicy
	// SendTimeout bounds one provider call; default 30s.
	SendTimeout time.Duration
	// MaxMessageBytes: a larger body is dead-lettered as malformed before
	// it is decoded or rendered; default 1 MiB.
	MaxMessageBytes int
	Owner           string // this consumer's name in claims
	Metrics         *Metrics
	DelayMetrics    *delay.Metrics
	Logger          *zap.Logger

	// Accounts is the WeCom accounts' shared state (down marks, health);
	// nil = accounts are never marked down and their health is 1.
	Accounts *accountstate.Store
	// WeComLimits are each account's limits per second, minute, hour and
	// day (WECOM_ACCOUNT_LIMITS), by account name.
	WeComLimits map[string]wecom.Limits
	// MergeWindow: single WeCom application messages (not high) with the
	// same account, type and content arriving within it of each other go
	// out as one call (WECOM_MERGE_WINDOW); 0 = off.
	MergeWindow time.Duration
	// MergeMax is how many messages the merge buffer holds at most
	// (WECOM_MERGE_MAX); default wecom.MaxUsers. They wait there, not in
	// workers: each normal and low WeCom queue may hold that many more
	// deliveries (Pools).
	MergeMax int
	// Media fetches the files of WeCom media messages and caches their
	// media ids; nil = media messages fail permanently.
	Media *media.Store
	// MediaWorkers is how many WeCom media files are downloaded and
	// uploaded at once (WECOM_MEDIA_CONCURRENCY), in a pool of their own,
	// off the send workers; default 16. MediaTenantWorkers is how many of
	// them one tenant's files may take (WECOM_MEDIA_TENANT_CONCURRENCY);
	// default 4.
	MediaWorkers       int
	MediaTenantWorkers int
	// MediaMaxBytes is what the pool's files may hold at once, from before
	// their download to the end of their upload (WECOM_MEDIA_MAX_BYTES);
	// MediaTenantMaxBytes is one tenant's share of it
	// (WECOM_MEDIA_TENANT_MAX_BYTES). Defaults 192 MiB and 64 MiB.
	MediaMaxBytes, MediaTenantMaxBytes int64
}

// Validate fills defaults and checks the wiring.
func (c *Config) Validate() error {
	if c.Model == nil || c.Claims == nil || c.Status == nil || c.Templates == nil || c.Keys == nil || c.Delayed == nil || c.Limiter == nil || c.Redis == nil {
		return errors.New("dispatch: missing dependency")
	}
	if c.Mail == nil && c.SMS == nil && c.WeCom == nil {
		return errors.New("dispatch: no provider")
	}
	if c.AppRate == (ratelimit.Bounds{}) {
		c.AppRate = DefaultAppRate
	}
	if c.RobotRate == (ratelimit.Bounds{}) {
		c.RobotRate = DefaultRobotRate
	}
	if !c.AppRate.Valid() || !c.RobotRate.Valid() {
		return errors.New("dispatch: invalid adaptive rate bounds")
	}
	c.Retry.setDefaults()
	if c.Retry.MaxRetries < 0 {
		return errors.New("dispatch: MaxRetries must not be negative")
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 1 << 20
	}
	if c.MergeMax == 0 {
		c.MergeMax = wecom.MaxUsers
	}
	if c.MediaWorkers == 0 {
		c.MediaWorkers = config.DefaultMediaWorkers
	}
	if c.MediaTenantWorkers == 0 {
		c.MediaTenantWorkers = config.DefaultMediaTenantWorkers
	}
	if c.MediaMaxBytes == 0 {
		c.MediaMaxBytes = config.DefaultMediaMaxBytes
	}
	if c.MediaTenantMaxBytes == 0 {
		c.MediaTenantMaxBytes = min(config.DefaultMediaTenantMaxBytes, c.MediaMaxBytes)
	}
	// A share below the largest file would never hold one: its messages
	// would come back for ever.
	if c.MediaTenantMaxBytes < media.MaxFileBytes || c.MediaTenantMaxBytes > c.MediaMaxBytes || c.MediaMaxBytes > config.MaxMediaBytes {
		return fmt.Errorf("dispatch: MediaMaxBytes %d or MediaTenantMaxBytes %d out of range (at least %d, the largest file; a tenant's at most the whole)", c.MediaMaxBytes, c.MediaTenantMaxBytes, media.MaxFileBytes)
	}
	if c.MergeMax < 1 || c.MergeMax > config.MaxMergeHeld || c.MediaWorkers < 1 || c.MediaWorkers > config.MaxMediaWorkers ||
		c.MediaTenantWorkers < 1 || c.MediaTenantWorkers > c.MediaWorkers {
		return fmt.Errorf("dispatch: MergeMax %d, MediaWorkers %d or MediaTenantWorkers %d out of range", c.MergeMax, c.MediaWorkers, c.MediaTenantWorkers)
	}
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
	return nil
}
