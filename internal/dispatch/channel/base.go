package channel

import (
	"context"
	"fmt"

	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Base is what a channel that checks nothing before its claim, reserves
// nothing and hands nothing off embeds: it admits the provider's rules as
// they are.
type Base struct{}

// Admit returns rules: the provider's limits are the channel's.
func (Base) Admit(_ context.Context, _ *Task, rules []ratelimit.Rule) ([]ratelimit.Rule, error) {
	return rules, nil
}

// Release has nothing to give back.
func (Base) Release(*Task) {}

// Holds is 0: nothing is handed off.
func (Base) Holds(topology.Level) int { return 0 }

// Drain has nothing to finish.
func (Base) Drain() {}

// Unconfigured stands for a channel this consumer has no provider for
// (What: "mail", "SMS", "WeCom"): every send fails for good.
type Unconfigured struct {
	Base
	What string
}

// Provider is "none".
func (Unconfigured) Provider() string { return "none" }

// Send fails permanently: retrying on this consumer cannot help.
func (u Unconfigured) Send(context.Context, context.Context, *Task) (provider.Receipt, error) {
	return provider.Receipt{}, fmt.Errorf("%w: this consumer has no %s provider", ErrTemplate, u.What)
}

// Render runs a channel's render in its span; a failure is ErrTemplate.
func Render[T any](ctx context.Context, render func() (T, error)) (T, error) {
	_, span := telemetry.Start(ctx, "render")
	out, err := render()
	span.End()
	if err != nil {
		return out, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	return out, nil
}

// Call makes a provider call of channel inside its span.
func Call(call context.Context, channel, providerName string, send func(context.Context) (provider.Receipt, error)) (provider.Receipt, error) {
	pctx, span := telemetry.StartProviderCall(call, channel, providerName)
	rcpt, err := send(pctx)
	EndCall(span, err)
	return rcpt, err
}
