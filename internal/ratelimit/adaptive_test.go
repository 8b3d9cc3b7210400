package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func TestAdaptiveRateFallsOnThrottlingAndClimbsBack(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	reg := prometheus.NewRegistry()
	a := ratelimit.NewAdaptive(r.Client, r.Prefix, reg)
	other := ratelimit.NewAdaptive(r.Client, r.Prefix, nil) // another consumer
	ctx := testenv.Context(t, 10*time.Second)
	b := ratelimit.Bounds{Start: 8, Min: 0.5, Max: 10, Decrease: 0.5, Increase: 1}

	steps := []struct {
		throttled bool
		want      float64
	}{{true, 4}, {true, 2}, {true, 1}, {true, 0.5}, {true, 0.5}, {false, 1.5}, {false, 2.5}}
	for i, st := range steps {
		var got float64
		var err error
		if st.throttled {
			got, err = a.For("app", b).Throttled(ctx)
		} else {
			got, err = a.For("app", b).Succeeded(ctx)
		}
		require.NoError(t, err)
		require.InDelta(t, st.want, got, 1e-9, "step %d", i)
		shared, err := other.For("app", b).Rate(ctx)
		require.NoError(t, err)
		require.InDelta(t, st.want, shared, 1e-9, "every consumer sees the same rate")
	}
	require.InDelta(t, 2.5, gaugeOf(t, reg, "app"), 1e-9)

	rule, err := adaptiveRule(ctx, other, "app", b)
	require.NoError(t, err)
	require.Equal(t, []ratelimit.Window{{Length: time.Second, Limit: 2}}, rule.Windows)
	for range 10 {
		_, err = a.For("app", b).Succeeded(ctx)
		require.NoError(t, err)
	}
	got, err := a.For("app", b).Rate(ctx)
	require.NoError(t, err)
	require.InDelta(t, 10, got, 1e-9, "capped at Max")

	slow, err := adaptiveRule(ctx, a, "robot", ratelimit.Bounds{Start: 1.0 / 3, Min: 0.01, Max: 1.0 / 3, Decrease: 0.5, Increase: 0.01})
	require.NoError(t, err)
	require.Equal(t, 1, slow.Windows[0].Limit)
	require.InDelta(t, 3*time.Second, slow.Windows[0].Length, float64(time.Millisecond))
}

// adaptiveRule is the Limiter rule that holds sends of account to its
// current adaptive rate, as a consumer builds it (RateRule).
func adaptiveRule(ctx context.Context, a *ratelimit.Adaptive, account string, b ratelimit.Bounds) (ratelimit.Rule, error) {
	r, err := a.For(account, b).Rate(ctx)
	if err != nil {
		return ratelimit.Rule{}, err
	}
	return ratelimit.RateRule("adaptive rate of "+account, "adaptive:"+account, r), nil
}

// gaugeOf is account's msgpulse_adaptive_send_rate as reg exports it.
func gaugeOf(t *testing.T, reg prometheus.Gatherer, account string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "msgpulse_adaptive_send_rate" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "account" && l.GetValue() == account {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no msgpulse_adaptive_send_rate{account=%q}", account)
	return 0
}
