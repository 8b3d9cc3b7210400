package delay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// Metrics are seed 003 §6's delay metrics, in Prometheus naming.
type Metrics struct {
	Published *prometheus.CounterVec // by first hop
	Requested prometheus.Histogram   // requested delay
	Depth     *prometheus.GaugeVec   // per delay queue
	Hops      prometheus.Histogram   // hops per delivered message
	Accuracy  prometheus.Histogram   // delivered − due, seconds
	Overflow  *prometheus.CounterVec // publishes a full delay queue refused
}

// NewMetrics registers the delay metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rabbitmq_publish_delayed_total", Help: "Delayed messages published, by first hop queue."}, []string{"first_hop"}),
		Requested: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rabbitmq_delay_duration_seconds", Help: "Requested delay of published delayed messages.",
			Buckets: []float64{0.05, 0.25, 1, 5, 10, 30, 60, 300, 1800, 3600, 6 * 3600, 24 * 3600}}),
		Depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "rabbitmq_delay_queue_depth", Help: "Messages waiting in each delay queue."}, []string{"queue"}),
		Hops: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rabbitmq_delay_hops", Help: "Delay queue hops a message took before it was delivered.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 24}}),
		Accuracy: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "rabbitmq_delay_accuracy_seconds", Help: "Delivered minus due time of delayed messages, seconds (negative is early).",
			Buckets: []float64{-0.005, 0, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300}}),
		Overflow: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rabbitmq_delay_queue_overflow_total", Help: "Publishes refused because a delay queue was full (reject-publish)."}, []string{"queue"}),
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Published, m.Requested, m.Depth, m.Hops, m.Accuracy, m.Overflow}
}

// Describe sends every metric's descriptor (the alert rules' test checks
// the names they read against these).
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Zero creates the per-queue counters that alert rules read at zero, one
// per delay queue of d: an increase() over a series that appears only with
// its first event misses that event.
func (m *Metrics) Zero(d topology.DelayTopology) {
	for _, t := range d.Tiers {
		m.Overflow.WithLabelValues(t.Queue)
	}
	if d.PreciseQueue != "" {
		m.Overflow.WithLabelValues(d.PreciseQueue)
	}
}
