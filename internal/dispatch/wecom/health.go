package wecom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// What a send tells of its account, and what the account's state says of
// a send: its down mark (accountUp, noteAccountSend), its health and its
// adaptive rate (noteRateAndRules), shared by the fleet through
// accountstate.

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
