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

// Rendered is a channel that renders a message and sends it in one
// provider call (mail, SMS): the render in its span, a failure of it
// ErrTemplate, then the call in the provider call's span.
type Rendered[T any] struct {
	Base
	Channel string        // the topology channel, for the call's span
	Name    func() string // the provider's
	// Render renders t (its message, with its Vars); Call sends what it
	// rendered.
	Render func(t *Task) (T, error)
	Call   func(ctx context.Context, t *Task, rendered T) (provider.Receipt, error)
}

// Provider is the provider's name.
func (r *Rendered[T]) Provider() string { return r.Name() }

// Send renders t and sends it.
func (r *Rendered[T]) Send(ctx, call context.Context, t *Task) (provider.Receipt, error) {
	_, rspan := telemetry.Start(ctx, "render")
	out, err := r.Render(t)
	rspan.End()
	if err != nil {
		return provider.Receipt{}, fmt.Errorf("%w: %w", ErrTemplate, err)
	}
	pctx, span := telemetry.StartProviderCall(call, r.Channel, r.Name())
	rcpt, err := r.Call(pctx, t, out)
	EndCall(span, err)
	return rcpt, err
}
