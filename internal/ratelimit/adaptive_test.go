package ratelimit_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
			got, err = a.Throttled(ctx, "app", b)
		} else {
			got, err = a.Succeeded(ctx, "app", b)
		}
		require.NoError(t, err)
		require.InDelta(t, st.want, got, 1e-9, "step %d", i)
		shared, err := other.Rate(ctx, "app", b)
		require.NoError(t, err)
		require.InDelta(t, st.want, shared, 1e-9, "every consumer sees the same rate")
	}
	require.InDelta(t, 2.5, testutil.ToFloat64(a.Gauge().WithLabelValues("app")), 1e-9)

	rule, err := other.Rule(ctx, "app", b)
	require.NoError(t, err)
	require.Equal(t, []ratelimit.Window{{Length: time.Second, Limit: 2}}, rule.Windows)
	for range 10 {
		_, err = a.Succeeded(ctx, "app", b)
		require.NoError(t, err)
	}
	got, err := a.Rate(ctx, "app", b)
	require.NoError(t, err)
	require.InDelta(t, 10, got, 1e-9, "capped at Max")

	slow, err := a.Rule(ctx, "robot", ratelimit.Bounds{Start: 1.0 / 3, Min: 0.01, Max: 1.0 / 3, Decrease: 0.5, Increase: 0.01})
	require.NoError(t, err)
	require.Equal(t, 1, slow.Windows[0].Limit)
	require.InDelta(t, 3*time.Second, slow.Windows[0].Length, float64(time.Millisecond))
}
