package timeline

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// consumerMetrics are the three metrics a consumer keeps, as dispatch
// and delay declare them (labels included).
type consumerMetrics struct {
	sent, failed *prometheus.CounterVec
	accuracy     prometheus.Histogram
}

func newMetrics() consumerMetrics {
	return consumerMetrics{
		sent:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_sent_total"}, []string{"channel", "provider"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_deadlettered_total"}, []string{"channel", "provider", "reason"}),
		accuracy: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rabbitmq_delay_accuracy_seconds",
			Buckets: []float64{-0.005, 0, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.25, 0.5, 1, 2.5, 5}}),
	}
}

func setup(t *testing.T) (*testenv.Redis, func(consumerMetrics) *Sampler) {
	t.Helper()
	r := testenv.NewRedis(t)
	return r, func(m consumerMetrics) *Sampler {
		s, err := NewSampler(r.Client, r.Prefix, Sources{Sent: m.sent, Failed: m.failed, Accuracy: m.accuracy}, time.Second, nil)
		require.NoError(t, err)
		return s
	}
}

// Two consumers' samples add up in the minute they were taken, what
// happened before a sampler started is not counted, and the p99 covers
// both consumers' deliveries.
func TestSamplersAddUpPerMinute(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	r, sampler := setup(t)
	ctx := testenv.Context(t, 10*time.Second)
	now := time.Date(2026, 11, 24, 21, 30, 20, 0, time.UTC)
	a, b := newMetrics(), newMetrics()
	a.sent.WithLabelValues("mail", "smtp").Add(7) // before the sampler: not this minute's
	sa, sb := sampler(a), sampler(b)
	sa.now, sb.now = func() time.Time { return now }, func() time.Time { return now }

	a.sent.WithLabelValues("mail", "smtp").Add(3)
	a.sent.WithLabelValues("sms", "log").Add(2)
	b.sent.WithLabelValues("mail", "smtp").Inc()
	b.failed.WithLabelValues("mail", "smtp", "permanent").Add(2)
	for range 98 {
		a.accuracy.Observe(0.003) // in the ≤4ms bucket
	}
	b.accuracy.Observe(0.2) // ≤250ms
	b.accuracy.Observe(0.3) // ≤500ms: the 99th of 100
	require.NoError(t, sa.Flush(ctx))
	require.NoError(t, sb.Flush(ctx))
	require.NoError(t, sa.Flush(ctx), "a flush with nothing new writes nothing")

	pts, err := NewReader(r.Client, r.Prefix).LastHour(ctx, now)
	require.NoError(t, err)
	require.Len(t, pts, 60)
	last := pts[59]
	require.Equal(t, now.Truncate(time.Minute), last.At)
	require.Equal(t, int64(6), last.Sent)
	require.Equal(t, int64(2), last.Failed)
	require.True(t, last.HasDelay)
	require.Equal(t, 250*time.Millisecond, last.DelayP99, "99 of 100 are at most 250ms")
	for _, p := range pts[:59] {
		require.Zero(t, p.Sent+p.Failed, "earlier minutes are empty")
		require.False(t, p.HasDelay)
	}
	ttl, err := r.Client.TTL(ctx, key(r.Prefix, now)).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, Keep-time.Minute, "a minute expires with Keep")
}

func TestP99(t *testing.T) {
	cases := []struct {
		name string
		h    map[string]string
		want time.Duration
		ok   bool
	}{
		{"no delayed sends", map[string]string{"sent": "3"}, 0, false},
		{"all in one bucket", map[string]string{"le:0.004": "10", "le:0.008": "10", "le:+Inf": "10"}, 4 * time.Millisecond, true},
		{"the tail decides", map[string]string{"le:0.004": "98", "le:1": "99", "le:5": "100", "le:+Inf": "100"}, time.Second, true},
		{"beyond the last bound", map[string]string{"le:1": "50", "le:+Inf": "100"}, time.Second, true},
		{"early deliveries", map[string]string{"le:-0.005": "100", "le:0": "100", "le:+Inf": "100"}, -5 * time.Millisecond, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := p99(tc.h)
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}
