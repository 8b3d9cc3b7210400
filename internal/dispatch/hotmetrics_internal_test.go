package dispatch

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// The per-message metric children are looked up once: later calls
// allocate nothing and count on the same child as WithLabelValues.
func TestHotMetricsAreCachedChildren(t *testing.T) {
	m := NewMetrics(nil)
	h := newHotMetrics(m)
	h.consumed("mail", topology.Normal).Inc()
	h.sent("mail", topology.Normal, "smtp").Add(2)
	h.sendDuration("mail", "smtp").Observe(0.01)
	allocs := testing.AllocsPerRun(100, func() {
		h.consumed("mail", topology.Normal).Inc()
		h.sent("mail", topology.Normal, "smtp").Inc()
		h.sendDuration("mail", "smtp").Observe(0.01)
	})
	require.Zero(t, allocs, "a cached child costs no allocation")
	require.InDelta(t, 102, testutil.ToFloat64(m.Consumed.WithLabelValues("mail", "normal")), 0)
	require.InDelta(t, 103, testutil.ToFloat64(m.Sent.WithLabelValues("mail", "normal", "smtp")), 0)
	h.sent("mail", topology.High, "smtp").Inc()
	require.InDelta(t, 1, testutil.ToFloat64(m.Sent.WithLabelValues("mail", "high", "smtp")), 0)
}
