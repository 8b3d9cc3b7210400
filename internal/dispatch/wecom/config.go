package wecom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/template"
)

// Adaptive rate bounds of WeCom accounts (sends per second). An
// application starts at 20 a second and may climb to 50; a robot never
// goes above its documented 20 a minute.
var (
	DefaultAppRate   = ratelimit.Bounds{Start: 20, Min: 0.5, Max: 50, Decrease: 0.5, Increase: 0.5}
	DefaultRobotRate = ratelimit.Bounds{Start: wecomapi.RobotPerMinute / 60.0, Min: 1 / 60.0, Max: wecomapi.RobotPerMinute / 60.0, Decrease: 0.5, Increase: 0.01}
)

// Client is what the channel sends WeCom messages with (wecom.Client):
// robots' posts and applications' messages and media, each from an
// account it resolved once.
type Client interface {
	Name() string
	Apps() []*wecomapi.App
	Robots() []*wecomapi.Robot
	SendRobot(ctx context.Context, r *wecomapi.Robot, m provider.WeCom) (provider.WeComReceipt, error)
	SendApp(ctx context.Context, a *wecomapi.App, m provider.WeCom) (provider.WeComReceipt, error)
	UploadMedia(ctx context.Context, a *wecomapi.App, kind, filename string, size int64, open func() io.Reader) (string, error)
}

// Config wires the WeCom channel.
type Config struct {
	Client Client
	// Adaptive holds each account (application, robot) to its adaptive
	// rate; nil = no adaptive rate. AppRate and RobotRate bound it
	// (defaults: DefaultAppRate, DefaultRobotRate).
	Adaptive  *ratelimit.Adaptive
	AppRate   ratelimit.Bounds
	RobotRate ratelimit.Bounds
	// Accounts is the accounts' shared state (down marks, health); nil =
	// accounts are never marked down and their health is 1.
	Accounts *accountstate.Store
	// Limits are each account's limits per second, minute, hour and day
	// (WECOM_ACCOUNT_LIMITS), by account name.
	Limits map[string]wecomapi.Limits
	// MergeWindow: single application messages (not high) with the same
	// account, type and content arriving within it of each other go out
	// as one call (WECOM_MERGE_WINDOW); 0 = off.
	MergeWindow time.Duration
	// MergeMax is how many messages the merge buffer holds at most
	// (WECOM_MERGE_MAX); default wecom.MaxUsers. They wait there, not in
	// workers: each normal and low WeCom queue may hold that many more
	// deliveries (Holds).
	MergeMax int
	// Media fetches the files of media messages and caches their media
	// ids; nil = media messages fail permanently.
	Media *media.Store
	// MediaWorkers is how many media files are downloaded and uploaded at
	// once (WECOM_MEDIA_CONCURRENCY), in a pool of their own, off the send
	// workers; default 16. MediaTenantWorkers is how many of them one
	// tenant's files may take (WECOM_MEDIA_TENANT_CONCURRENCY); default 4.
	MediaWorkers       int
	MediaTenantWorkers int
	// MediaMaxBytes is what the pool's files may hold at once, from before
	// their download to the end of their upload (WECOM_MEDIA_MAX_BYTES);
	// MediaTenantMaxBytes is one tenant's share of it
	// (WECOM_MEDIA_TENANT_MAX_BYTES). Defaults 192 MiB and 64 MiB.
	MediaMaxBytes, MediaTenantMaxBytes int64

	// The pipeline's, filled by dispatch.Config.Validate: Templates
	// render, Limiter takes a merged send's limits, SendTimeout bounds a
	// call made off the pipeline (merged, after a download);
	// AccountRate and AccountHealth are the accounts' gauges, MergedSends
	// and MergedUsers the merge's (dispatch.Metrics).
	Templates                  *template.Store
	Limiter                    *ratelimit.Limiter
	SendTimeout                time.Duration
	AccountRate, AccountHealth *prometheus.GaugeVec
	MergedSends                prometheus.Counter
	MergedUsers                prometheus.Observer
	Logger                     *zap.Logger
}

// Validate fills defaults and checks the bounds.
func (c *Config) Validate() error {
	if c.Client == nil {
		return errors.New("no WeCom client")
	}
	if c.AppRate == (ratelimit.Bounds{}) {
		c.AppRate = DefaultAppRate
	}
	if c.RobotRate == (ratelimit.Bounds{}) {
		c.RobotRate = DefaultRobotRate
	}
	if !c.AppRate.Valid() || !c.RobotRate.Valid() {
		return errors.New("invalid adaptive rate bounds")
	}
	c.MergeMax = cmp.Or(c.MergeMax, wecomapi.MaxUsers)
	c.MediaWorkers = cmp.Or(c.MediaWorkers, config.DefaultMediaWorkers)
	c.MediaTenantWorkers = cmp.Or(c.MediaTenantWorkers, config.DefaultMediaTenantWorkers)
	c.MediaMaxBytes = cmp.Or(c.MediaMaxBytes, config.DefaultMediaMaxBytes)
	if c.MediaTenantMaxBytes == 0 {
		c.MediaTenantMaxBytes = min(config.DefaultMediaTenantMaxBytes, c.MediaMaxBytes)
	}
	// A share below the largest file would never hold one: its messages
	// would come back for ever.
	if c.MediaTenantMaxBytes < media.MaxFileBytes || c.MediaTenantMaxBytes > c.MediaMaxBytes || c.MediaMaxBytes > config.MaxMediaBytes {
		return fmt.Errorf("MediaMaxBytes %d or MediaTenantMaxBytes %d out of range (at least %d, the largest file; a tenant's at most the whole)", c.MediaMaxBytes, c.MediaTenantMaxBytes, media.MaxFileBytes)
	}
	if c.MergeMax < 1 || c.MergeMax > config.MaxMergeHeld || c.MediaWorkers < 1 || c.MediaWorkers > config.MaxMediaWorkers ||
		c.MediaTenantWorkers < 1 || c.MediaTenantWorkers > c.MediaWorkers {
		return fmt.Errorf("MergeMax %d, MediaWorkers %d or MediaTenantWorkers %d out of range", c.MergeMax, c.MediaWorkers, c.MediaTenantWorkers)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}
