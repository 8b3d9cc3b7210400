package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
)

// ClassAccountDown labels the retries of messages waiting for an account
// whose credentials WeCom refused.
const ClassAccountDown = "account_down"

// WeComClient is what the dispatcher sends WeCom messages with
// (wecom.Client): robots' posts and applications' messages and media, each
// from an account it resolved once.
type WeComClient interface {
	Name() string
	Apps() []*wecom.App
	Robots() []*wecom.Robot
	SendRobot(ctx context.Context, r *wecom.Robot, m provider.WeCom) (provider.WeComReceipt, error)
	SendApp(ctx context.Context, a *wecom.App, m provider.WeCom) (provider.WeComReceipt, error)
	UploadMedia(ctx context.Context, a *wecom.App, kind, filename string, size int64, open func() io.Reader) (string, error)
}

// An account is one WeCom sender as this consumer sends from it: an
// application (WECOM_ACCOUNTS, or default from WECOM_CORP_ID…) or a group
// robot (WECOM_ROBOTS). This is the one place to read what an account is.
// Every facet is resolved once, when the dispatcher is built: the
// application (corp, agent and token source, wecom.App), the tenants that
// may send from it, its limits, its adaptive rate, its shared state (down
// mark, health) and its gauges. A job resolves its account once
// (accounts.resolve) and hands it down to the rules, the send, the media
// upload, the merge and the outcome: nothing below looks an account up by
// name.
type account struct {
	name     string
	provider string       // wecom.Name, or wecom.RobotName for a robot
	app      *wecom.App   // the application; nil for a robot
	robot    *wecom.Robot // the group robot; nil for an application
	tenants  []string     // who may send from it; none = every tenant
	// limits: an application's WECOM_ACCOUNT_LIMITS, or a robot's
	// documented 20 posts a minute, as one Limiter rule (nil: none).
	limits *ratelimit.Rule
	// rate is its adaptive rate (nil: the dispatcher has none); the
	// Limiter holds sends to it, times its health, under rateKey.
	rate              *ratelimit.AdaptiveRate
	rateName, rateKey string
	// state is an application's state shared by the fleet (nil for a
	// robot, or without an accountstate.Store): the rate is scaled by its
	// health, and a down account's messages wait.
	state *accountstate.Account
	// rateGauge and healthGauge: msgpulse_wecom_account_rate and _health
	// (applications only).
	rateGauge, healthGauge prometheus.Gauge
	// noted is when its rate was last written for the stats (unix ns).
	noted atomic.Int64
}

// allows reports whether tenant may send from the account.
func (a *account) allows(tenant string) bool {
	return len(a.tenants) == 0 || slices.Contains(a.tenants, tenant)
}

// accounts are this consumer's WeCom accounts.
type accounts struct {
	list   []wecom.Account // the applications' configuration, as configured (wecom.AccountFor)
	apps   map[string]*account
	robots map[string]*account
	// resolved counts resolutions: tests check that one job resolves once.
	resolved atomic.Int64
}

// newAccounts resolves every account of cfg's WeCom client.
func newAccounts(cfg *Config) *accounts {
	as := &accounts{apps: map[string]*account{}, robots: map[string]*account{}}
	if cfg.WeCom == nil {
		return as
	}
	for _, app := range cfg.WeCom.Apps() {
		a := &account{name: app.Name, provider: wecom.Name, app: app, tenants: app.Tenants,
			rateName: "send rate of WeCom account " + app.Name + " (adaptive × health)", rateKey: "wecom-app:" + app.Key(),
			rateGauge: cfg.Metrics.AccountRate.WithLabelValues(app.Name), healthGauge: cfg.Metrics.AccountHealth.WithLabelValues(app.Name)}
		if l, ok := cfg.WeComLimits[app.Name]; ok {
			a.limits = limitsRule(app.Name, l)
		}
		if cfg.Adaptive != nil {
			a.rate = cfg.Adaptive.For(a.rateKey, cfg.AppRate)
		}
		if cfg.Accounts != nil {
			a.state = cfg.Accounts.Account(app.Name)
		}
		as.list = append(as.list, app.Account)
		as.apps[app.Name] = a
	}
	for _, r := range cfg.WeCom.Robots() {
		a := &account{name: r.Name, provider: wecom.RobotName, robot: r, tenants: r.Tenants, rateName: "adaptive rate of wecom-robot:" + r.Name, rateKey: "wecom-robot:" + r.Name,
			limits: &ratelimit.Rule{Name: "robot " + r.Name + " (WeCom's 20 a minute)", Key: "provider:" + wecom.RobotName + ":" + r.Name,
				Windows: []ratelimit.Window{{Length: time.Minute, Limit: wecom.RobotPerMinute}}}}
		if cfg.Adaptive != nil {
			a.rate = cfg.Adaptive.For(a.rateKey, cfg.RobotRate)
		}
		as.robots[r.Name] = a
	}
	return as
}

// limitsRule is WECOM_ACCOUNT_LIMITS of an application as a Limiter rule,
// nil when every window is 0.
func limitsRule(name string, l wecom.Limits) *ratelimit.Rule {
	var ws []ratelimit.Window
	for _, w := range l.Windows() {
		ws = append(ws, ratelimit.Window{Length: w.Per, Limit: w.N})
	}
	if len(ws) == 0 {
		return nil
	}
	return &ratelimit.Rule{Name: "WeCom account " + name + " (WECOM_ACCOUNT_LIMITS)", Key: "wecom-account:" + name, Windows: ws}
}

// resolve is the one lookup of a WeCom message's account: its robot, or
// the application it names, else the first listing its tenant, else
// default (as the API picks, wecom.AccountFor). A message whose tenant may
// not use the account, or whose account or robot this consumer does not
// know, fails permanently: the consumer enforces tenancy whatever the
// API's configuration (an API without WECOM_ACCOUNTS names default for
// every tenant).
func (as *accounts) resolve(msg *envelope.Message) (*account, error) {
	as.resolved.Add(1)
	// A message from before tenants has none: it was the default tenant's.
	tenant := cmp.Or(msg.Tenant, apikey.DefaultTenant)
	if msg.Robot {
		a, ok := as.robots[msg.Recipient]
		switch {
		case !ok:
			return nil, wecom.UnknownRobot(msg.Recipient)
		case !a.allows(tenant):
			return nil, wecom.RobotNotAllowed(a.name, tenant)
		}
		return a, nil
	}
	name, err := wecom.AccountFor(as.list, tenant, msg.Account)
	if err != nil {
		return nil, &provider.Error{Provider: wecom.Name, Class: provider.Permanent, Code: "account_not_allowed", Message: err.Error() + " (the consumer's WECOM_ACCOUNTS)"}
	}
	a, ok := as.apps[name]
	if !ok {
		return nil, &provider.Error{Provider: wecom.Name, Class: provider.Permanent, Code: "not_configured",
			Message: "no WeCom application " + strconv.Quote(name) + " is configured (WECOM_ACCOUNTS, or WECOM_CORP_ID, WECOM_CORP_SECRET, WECOM_AGENT_ID for default)"}
	}
	return a, nil
}

// accountUp returns ErrAccountDown when a is an application marked down:
// its message waits without asking WeCom again, so a refused secret costs
// no call per message and slows no other account.
func (d *Dispatcher) accountUp(ctx context.Context, a *account) error {
	if a.state == nil {
		return nil
	}
	why, err := a.state.Down(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", errRedis, err)
	}
	if why != "" {
		return fmt.Errorf("%w: %s: %s", ErrAccountDown, a.name, why)
	}
	return nil
}

// accountRules are the provider limits of a message from a: its own
// limits, and its send rate (the adaptive rate times its health). A
// message over them waits (snoozes); it does not fail.
func (d *Dispatcher) accountRules(ctx context.Context, a *account) ([]ratelimit.Rule, error) {
	var rules []ratelimit.Rule
	if a.limits != nil {
		rules = append(rules, *a.limits)
	}
	if a.rate == nil {
		return rules, nil
	}
	rate, err := a.rate.Rate(ctx)
	if err != nil {
		return nil, err
	}
	health := 1.0
	if a.state != nil {
		if health, err = a.state.Health(ctx); err != nil {
			return nil, err
		}
	}
	// Never below the floor: an account whose sends all failed still
	// sends now and then, or it could never show it recovered.
	r := max(rate*health, a.rate.Bounds().Min)
	if a.rateGauge != nil {
		a.rateGauge.Set(r)
		a.healthGauge.Set(health)
	}
	if a.state != nil && d.noteRateDue(a) {
		// For /api/queues/stats; at most once a second per account.
		if err := a.state.NoteRate(ctx, r); err != nil {
			d.log.Debug("could not note the account's rate", zap.String("account", a.name), zap.Error(err))
		}
	}
	return append(rules, ratelimit.RateRule(a.rateName, "adaptive:"+a.rateKey, r)), nil
}

// noteAccountSend counts a send in the account's health and marks the
// account down when WeCom refused its credentials; it returns the error
// the pipeline goes on with.
func (d *Dispatcher) noteAccountSend(ctx context.Context, a *account, err error) error {
	if a.state == nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	refused := wecom.IsCredentialsRefused(err)
	// A user WeCom does not know says nothing about the account; a
	// throttle, a vendor failure or refused credentials do.
	counts := err == nil || refused || errors.Is(err, provider.ErrThrottled) || errors.Is(err, provider.ErrTransient)
	if counts {
		if rerr := a.state.Record(sctx, err == nil); rerr != nil {
			d.log.Warn("could not count a send in the account's health", zap.String("account", a.name), zap.Error(rerr))
		}
	}
	if !refused {
		return err
	}
	if merr := a.state.MarkDown(sctx, err.Error()); merr != nil {
		d.log.Warn("could not mark the WeCom account down", zap.String("account", a.name), zap.Error(merr))
	}
	d.log.Error("WeCom refused the account's credentials: its messages wait until it is fixed or their deadline passes", zap.String("account", a.name), zap.Error(err))
	return fmt.Errorf("%w: %s: %w", ErrAccountDown, a.name, err)
}

// waitForAccount sends a message of a down account back through the delay
// queues, waiting longer each time (RETRY_BACKOFF), never past its
// deadline: it then comes back once more and expires. A message without a
// deadline gives up after MAX_RETRIES waits.
func (d *Dispatcher) waitForAccount(ctx context.Context, j *job, log *zap.Logger, err error) broker.Action {
	retry := j.msg.Attempt + 1
	wait := d.cfg.Retry.Wait(retry, false, 0)
	if j.msg.Deadline != nil {
		wait = min(wait, j.msg.Deadline.Sub(d.now())+time.Millisecond)
	} else if retry > d.cfg.Retry.MaxRetries {
		return d.deadLetter(ctx, j, log, ReasonExhausted, ClassAccountDown, fmt.Errorf("after %d waits: %w", retry, err))
	}
	if a := d.retryLater(ctx, j, wait, true, status.Update{Status: status.Retrying, ErrorClass: ptr(ClassAccountDown), LastError: ptr(err.Error())}); a != broker.Ack {
		return a // held until the broker takes it (see later)
	}
	d.cfg.Metrics.Retried.WithLabelValues(j.channel, string(j.level), j.provider, ClassAccountDown).Inc()
	log.Info("WeCom account down; the message waits", zap.Duration("in", wait))
	return broker.Ack
}

// noteRateDue reports whether a's rate was last noted a second ago or
// more, and if so counts now as the last time.
func (d *Dispatcher) noteRateDue(a *account) bool {
	now := d.now().UnixNano()
	last := a.noted.Load()
	return now-last >= int64(time.Second) && a.noted.CompareAndSwap(last, now)
}
