package wecom

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// An account is one WeCom sender as this consumer sends from it: an
// application (WECOM_ACCOUNTS, or default from WECOM_CORP_ID…) or a group
// robot (WECOM_ROBOTS). This is the one place to read what an account is.
// Every facet is resolved once, when the dispatcher is built: the
// application (corp, agent and token source, wecomapi.App), the tenants that
// may send from it, its limits, its adaptive rate, its shared state (down
// mark, health) and its gauges. A job resolves its account once
// (accounts.resolve) and hands it down to the rules, the send, the media
// upload, the merge and the outcome: nothing below looks an account up by
// name.
type account struct {
	name     string
	provider string          // wecomapi.Name, or wecomapi.RobotName for a robot
	app      *wecomapi.App   // the application; nil for a robot
	robot    *wecomapi.Robot // the group robot; nil for an application
	tenants  []string        // who may send from it; none = every tenant
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
	list   []wecomapi.Account // the applications' configuration, as configured (wecomapi.AccountFor)
	apps   map[string]*account
	robots map[string]*account
	// resolved counts resolutions: tests check that one job resolves once.
	resolved atomic.Int64
}

// newAccounts resolves every account of cfg's WeCom client.
func newAccounts(cfg *Config) *accounts {
	as := &accounts{apps: map[string]*account{}, robots: map[string]*account{}}
	for _, app := range cfg.Client.Apps() {
		a := &account{name: app.Name, provider: wecomapi.Name, app: app, tenants: app.Tenants,
			rateName: "send rate of WeCom account " + app.Name + " (adaptive × health)", rateKey: appRateKey(app),
			rateGauge: gauge(cfg.AccountRate, app.Name), healthGauge: gauge(cfg.AccountHealth, app.Name)}
		if l, ok := cfg.Limits[app.Name]; ok {
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
	for _, r := range cfg.Client.Robots() {
		a := &account{name: r.Name, provider: wecomapi.RobotName, robot: r, tenants: r.Tenants, rateName: "adaptive rate of " + robotRateKey(r), rateKey: robotRateKey(r),
			limits: &ratelimit.Rule{Name: "robot " + r.Name + " (WeCom's 20 a minute)", Key: robotLimitKey(r),
				Windows: []ratelimit.Window{{Length: time.Minute, Limit: wecomapi.RobotPerMinute}}}}
		if cfg.Adaptive != nil {
			a.rate = cfg.Adaptive.For(a.rateKey, cfg.RobotRate)
		}
		as.robots[r.Name] = a
	}
	return as
}

// limitsRule is WECOM_ACCOUNT_LIMITS of an application as a Limiter rule,
// nil when every window is 0.
func limitsRule(name string, l wecomapi.Limits) *ratelimit.Rule {
	var ws []ratelimit.Window
	for _, w := range l.Windows() {
		ws = append(ws, ratelimit.Window{Length: w.Per, Limit: w.N})
	}
	if len(ws) == 0 {
		return nil
	}
	return &ratelimit.Rule{Name: "WeCom account " + name + " (WECOM_ACCOUNT_LIMITS)", Key: accountLimitKey(name), Windows: ws}
}

// resolve is the one lookup of a WeCom message's account: its robot, or
// the application it names, else the first listing its tenant, else
// default (as the API picks, wecomapi.AccountFor). A message whose tenant may
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
			return nil, wecomapi.UnknownRobot(msg.Recipient)
		case !a.allows(tenant):
			return nil, wecomapi.RobotNotAllowed(a.name, tenant)
		}
		return a, nil
	}
	name, err := wecomapi.AccountFor(as.list, tenant, msg.Account)
	if err != nil {
		return nil, &provider.Error{Provider: wecomapi.Name, Class: provider.Permanent, Code: "account_not_allowed", Message: err.Error() + " (the consumer's WECOM_ACCOUNTS)"}
	}
	a, ok := as.apps[name]
	if !ok {
		return nil, &provider.Error{Provider: wecomapi.Name, Class: provider.Permanent, Code: "not_configured",
			Message: "no WeCom application " + strconv.Quote(name) + " is configured (WECOM_ACCOUNTS, or WECOM_CORP_ID, WECOM_CORP_SECRET, WECOM_AGENT_ID for default)"}
	}
	return a, nil
}

// accountUp returns channel.ErrAccountDown when a is an application marked
// down:
// its message waits without asking WeCom again, so a refused secret costs
// no call per message and slows no other account.
func (c *Channel) accountUp(ctx context.Context, a *account) error {
	if a.state == nil {
		return nil
	}
	why, err := a.state.Down(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", channel.ErrRedis, err)
	}
	if why != "" {
		return fmt.Errorf("%w: %s: %s", channel.ErrAccountDown, a.name, why)
	}
	return nil
}

// noteRateAndRules reads a's send rate (its adaptive rate times its
// health), notes it (the gauges, and at most once a second the fleet's
// stats in Redis, for /api/queues/stats) and returns the provider limits
// of a message from a: its own limits, and that rate. A message over them
// waits (snoozes); it does not fail.
func (c *Channel) noteRateAndRules(ctx context.Context, a *account) ([]ratelimit.Rule, error) {
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
	c.noteRate(ctx, a, r, health)
	return append(rules, ratelimit.RateRule(a.rateName, adaptiveRuleKey(a.rateKey), r)), nil
}

// noteRate sets a's gauges to its rate r and health, and writes r to the
// account's shared state at most once a second.
func (c *Channel) noteRate(ctx context.Context, a *account, r, health float64) {
	if a.rateGauge != nil {
		a.rateGauge.Set(r)
		a.healthGauge.Set(health)
	}
	if a.state != nil && c.noteRateDue(a) {
		if err := a.state.NoteRate(ctx, r); err != nil {
			c.log.Debug("could not note the account's rate", zap.String("account", a.name), zap.Error(err))
		}
	}
}

// noteAccountSend counts a send in the account's health and marks the
// account down when WeCom refused its credentials; it returns the error
// the pipeline goes on with.
func (c *Channel) noteAccountSend(ctx context.Context, a *account, err error) error {
	if a.state == nil {
		return err
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	refused := wecomapi.IsCredentialsRefused(err)
	// A user WeCom does not know says nothing about the account; a
	// throttle, a vendor failure or refused credentials do.
	counts := err == nil || refused || errors.Is(err, provider.ErrThrottled) || errors.Is(err, provider.ErrTransient)
	if counts {
		if rerr := a.state.Record(sctx, err == nil); rerr != nil {
			c.log.Warn("could not count a send in the account's health", zap.String("account", a.name), zap.Error(rerr))
		}
	}
	if !refused {
		return err
	}
	if merr := a.state.MarkDown(sctx, err.Error()); merr != nil {
		c.log.Warn("could not mark the WeCom account down", zap.String("account", a.name), zap.Error(merr))
	}
	c.log.Error("WeCom refused the account's credentials: its messages wait until it is fixed or their deadline passes", zap.String("account", a.name), zap.Error(err))
	return fmt.Errorf("%w: %s: %w", channel.ErrAccountDown, a.name, err)
}

// noteRateDue reports whether a's rate was last noted a second ago or
// more, and if so counts now as the last time.
func (c *Channel) noteRateDue(a *account) bool {
	now := c.now().UnixNano()
	last := a.noted.Load()
	return now-last >= int64(time.Second) && a.noted.CompareAndSwap(last, now)
}

// gauge is vec's child for account, or nil without vec.
func gauge(vec *prometheus.GaugeVec, account string) prometheus.Gauge {
	if vec == nil {
		return nil
	}
	return vec.WithLabelValues(account)
}
