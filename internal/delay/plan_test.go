package delay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/topology"
)

func planner(t *testing.T, mod func(*topology.DelayConfig)) *Planner {
	t.Helper()
	cfg := topology.DefaultConfig()
	if mod != nil {
		mod(&cfg.Delay)
	}
	m, err := topology.Build(cfg, "")
	require.NoError(t, err)
	p, err := NewPlanner(m.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	return p
}

func names(hops []Hop) []string {
	out := make([]string, len(hops))
	for i, h := range hops {
		out[i] = h.Queue
		if h.Precise {
			out[i] += "(" + h.TTL.String() + ")"
		}
	}
	return out
}

const ms = time.Millisecond

func TestPlanExact(t *testing.T) {
	t.Parallel()
	p := planner(t, nil)
	for _, tc := range []struct {
		delay time.Duration
		want  []string
	}{
		{1300 * ms, []string{"queue.delay.1s", "queue.delay.256ms", "queue.delay.32ms", "queue.delay.precise(12ms)"}},
		{12 * time.Second, []string{"queue.delay.5s", "queue.delay.5s", "queue.delay.1s", "queue.delay.1s"}},
		{65 * time.Second, []string{"queue.delay.1m", "queue.delay.5s"}},
		// 500ms left: the 512ms tier would be 12ms late, more than its margin.
		{7500 * ms, []string{"queue.delay.5s", "queue.delay.1s", "queue.delay.1s", "queue.delay.256ms", "queue.delay.128ms", "queue.delay.64ms", "queue.delay.32ms", "queue.delay.16ms", "queue.delay.precise(4ms)"}},
		{5 * ms, []string{"queue.delay.precise(5ms)"}},
		{16 * ms, []string{"queue.delay.16ms"}},
		{15 * ms, []string{"queue.delay.precise(15ms)"}}, // the 16ms tier's margin is 0.25ms
		{4999 * ms, []string{"queue.delay.5s"}},          // within the tolerance, the tier
		{4990 * ms, []string{"queue.delay.1s", "queue.delay.1s", "queue.delay.1s", "queue.delay.1s", "queue.delay.512ms", "queue.delay.256ms", "queue.delay.128ms", "queue.delay.64ms", "queue.delay.16ms", "queue.delay.precise(14ms)"}}, // no lag: exact
		{4900 * ms, []string{"queue.delay.1s", "queue.delay.1s", "queue.delay.1s", "queue.delay.1s", "queue.delay.512ms", "queue.delay.256ms", "queue.delay.128ms", "queue.delay.precise(4ms)"}},
		{1010 * ms, []string{"queue.delay.1s", "queue.delay.precise(10ms)"}},
		{24 * time.Hour, []string{"queue.delay.24h"}},
		{90 * time.Minute, []string{"queue.delay.1h", "queue.delay.30m"}},
	} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			hops, err := p.Plan(tc.delay)
			require.NoError(t, err)
			require.Equal(t, tc.want, names(hops))
			var sum time.Duration
			for _, h := range hops {
				sum += h.TTL
			}
			require.InDelta(t, float64(tc.delay), float64(sum), float64(20*ms), "hops add up to the delay, within the margin")
			first, err := p.First(tc.delay)
			require.NoError(t, err)
			require.Equal(t, hops[0], first)
		})
	}
}

// Seed 003 §3.1–§4.1, exactly: precise below 10 s, the smallest tier not
// shorter from 10 s on, errors at ≤ 0 and > 24 h.
func TestPlanRoundUpSeedBoundaries(t *testing.T) {
	t.Parallel()
	p := planner(t, func(d *topology.DelayConfig) { d.Mode = topology.DelayRoundUp })
	for _, tc := range []struct {
		delay time.Duration
		want  string
		err   error
	}{
		{0, "", ErrNotPositive},
		{-time.Second, "", ErrNotPositive},
		{1 * ms, "queue.delay.precise(1ms)", nil},
		{1300 * ms, "queue.delay.precise(1.3s)", nil},
		{7500 * ms, "queue.delay.precise(7.5s)", nil},
		{9999 * ms, "queue.delay.precise(9.999s)", nil},
		{10 * time.Second, "queue.delay.30s", nil}, // "= 10 s: tiered queue, no head-of-line blocking"
		{12 * time.Second, "queue.delay.30s", nil},
		{30 * time.Second, "queue.delay.30s", nil},
		{30*time.Second + ms, "queue.delay.1m", nil},
		{65 * time.Second, "queue.delay.5m", nil},
		{3 * time.Minute, "queue.delay.5m", nil},
		{10 * time.Minute, "queue.delay.30m", nil},
		{2 * time.Hour, "queue.delay.6h", nil},
		{12 * time.Hour, "queue.delay.24h", nil},
		{24 * time.Hour, "queue.delay.24h", nil},
		{24*time.Hour + ms, "", ErrTooLong},
	} {
		t.Run(tc.delay.String(), func(t *testing.T) {
			hops, err := p.Plan(tc.delay)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, []string{tc.want}, names(hops))
		})
	}
}

func TestPlanRoundUpThresholdZeroDisablesPrecise(t *testing.T) {
	t.Parallel()
	p := planner(t, func(d *topology.DelayConfig) {
		d.Mode = topology.DelayRoundUp
		d.PreciseThreshold = 0
		d.Tiers = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour}
	})
	for d, want := range map[time.Duration]string{100 * ms: "queue.delay.1s", 1300 * ms: "queue.delay.5s", 5 * time.Second: "queue.delay.5s", 7 * time.Second: "queue.delay.30s"} {
		hops, err := p.Plan(d)
		require.NoError(t, err)
		require.Equal(t, []string{want}, names(hops), d)
	}
}

func TestPlanExactErrors(t *testing.T) {
	t.Parallel()
	p := planner(t, func(d *topology.DelayConfig) { d.Max = time.Hour })
	_, err := p.Plan(0)
	require.ErrorIs(t, err, ErrNotPositive)
	_, err = p.Plan(time.Hour + ms)
	require.ErrorIs(t, err, ErrTooLong)
	require.ErrorContains(t, err, "external scheduler")
}

func TestNextDeliversWithinTolerance(t *testing.T) {
	t.Parallel()
	p := planner(t, nil)
	for _, left := range []time.Duration{-time.Second, 0, ms, 2 * ms} {
		_, due := p.Next(left, 0)
		require.True(t, due, left)
	}
	h, due := p.Next(3*ms, 0)
	require.False(t, due)
	require.True(t, h.Precise)
	require.Equal(t, 3*ms, h.TTL)
	h, _ = p.Next(2500*time.Microsecond+ms, 0)
	require.Equal(t, 4*ms, h.TTL, "per-message TTL rounds up to whole ms, never early")
}

// The margin absorbs measured lag only: 4.997 s left after a hop that was
// 3 ms late takes the 5 s tier; 4.997 s left with no lag falls through.
func TestNextMarginFollowsMeasuredLag(t *testing.T) {
	t.Parallel()
	p := planner(t, nil)
	for _, tc := range []struct {
		left, lag time.Duration
		want      string
	}{
		{4997 * ms, 3 * ms, "queue.delay.5s"},
		{4997 * ms, 0, "queue.delay.1s"},
		{4985 * ms, 15 * ms, "queue.delay.5s"},
		{4970 * ms, 30 * ms, "queue.delay.1s"}, // beyond DELAY_MARGIN (20ms)
		{990 * ms, 10 * ms, "queue.delay.1s"},
		{505 * ms, 12 * ms, "queue.delay.512ms"}, // 7ms short: within 1/64 of 512ms
		{500 * ms, 12 * ms, "queue.delay.256ms"}, // 12ms short: beyond it
		{505 * ms, 3 * ms, "queue.delay.256ms"},  // 3ms lag + 2ms tolerance < 7ms short
	} {
		h, due := p.Next(tc.left, tc.lag)
		require.False(t, due)
		require.Equal(t, tc.want, h.Queue, "left %s lag %s", tc.left, tc.lag)
	}
}

func TestDelayConfigValidation(t *testing.T) {
	t.Parallel()
	for name, mod := range map[string]func(*topology.DelayConfig){
		"unsorted":       func(d *topology.DelayConfig) { d.Tiers = []time.Duration{5 * time.Second, time.Second} },
		"zero tier":      func(d *topology.DelayConfig) { d.Tiers = []time.Duration{0, time.Second} },
		"sub-ms tier":    func(d *topology.DelayConfig) { d.Tiers = []time.Duration{1500 * time.Microsecond} },
		"max over tiers": func(d *topology.DelayConfig) { d.Max = 25 * time.Hour },
		"bad mode":       func(d *topology.DelayConfig) { d.Mode = "later" },
	} {
		cfg := topology.DefaultConfig()
		mod(&cfg.Delay)
		_, err := topology.Build(cfg, "")
		require.Error(t, err, name)
	}
}
