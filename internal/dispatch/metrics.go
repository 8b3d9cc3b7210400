package dispatch

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgpulse/msgpulse/internal/callback"
)

// Metrics of the consumer.
type Metrics struct {
	Consumed     *prometheus.CounterVec
	Sent         *prometheus.CounterVec
	Retried      *prometheus.CounterVec
	DeadLettered *prometheus.CounterVec
	Skipped      *prometheus.CounterVec
	SendDuration *prometheus.HistogramVec
	InFlight     prometheus.Gauge
	Paused       prometheus.Gauge
	Callbacks    *prometheus.CounterVec
	// AccountRate and AccountHealth are each WeCom account's send rate
	// (adaptive rate × health) and health (success rate of recent sends).
	AccountRate   *prometheus.GaugeVec
	AccountHealth *prometheus.GaugeVec
	// MergedSends counts WeCom calls that carried merged messages, and
	// MergedUsers how many users each had.
	MergedSends prometheus.Counter
	MergedUsers prometheus.Histogram
	// Workers is the size of each of a channel's worker pools.
	Workers *prometheus.GaugeVec
	// Held counts deliveries kept unacknowledged while the publish of
	// their next step (a retry, a snooze) is tried again (see hold.go).
	Held prometheus.Gauge
}

// WorkersOf is the OnWorkers hook of one of a channel's pools (see
// Pools: "codes" or "notices").
func (m *Metrics) WorkersOf(channel, pool string) func(int) {
	g := m.Workers.WithLabelValues(channel, pool)
	return func(n int) { g.Set(float64(n)) }
}

// NewMetrics registers the consumer's metrics on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Consumed:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_consumed_total", Help: "Deliveries taken from the main queues, by channel and level."}, []string{"channel", "level"}),
		Sent:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_sent_total", Help: "Messages a provider accepted, by channel, level and provider."}, []string{"channel", "level", "provider"}),
		Retried:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_retried_total", Help: "Retries scheduled through the delay queues, by channel, level, provider and error class."}, []string{"channel", "level", "provider", "class"}),
		DeadLettered: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_deadlettered_total", Help: "Messages rejected to the DLQ, by channel, level, provider and reason."}, []string{"channel", "level", "provider", "reason"}),
		Skipped:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_skipped_total", Help: "Deliveries not sent now: duplicates of sent messages, snoozes, and recipients the provider refused during the send (reason refused: a receipt, acked), by channel, level and reason."}, []string{"channel", "level", "reason"}),
		SendDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "msgpulse_send_duration_seconds", Help: "Provider call duration, by channel and provider.",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}}, []string{"channel", "provider"}),
		InFlight:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "msgpulse_inflight", Help: "Messages being processed now."}),
		Paused:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "msgpulse_redis_paused", Help: "1 while work is paused because Redis is unreachable."}),
		Callbacks: callback.NewResults(),
		AccountRate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgpulse_wecom_account_rate",
			Help: "Send rate a WeCom account is held to (sends per second): its adaptive rate times its health."}, []string{"account"}),
		AccountHealth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgpulse_wecom_account_health",
			Help: "Health of a WeCom account: the success rate of its sends within WECOM_HEALTH_WINDOW (1 when it sent nothing)."}, []string{"account"}),
		Workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgpulse_consumer_workers",
			Help: "Workers of a channel's pool (codes: its codes' queue; notices: its high, normal and low queues); each follows its queues between {CH}_MIN_WORKERS and {CH}_MAX_WORKERS."}, []string{"channel", "pool"}),
		MergedSends: prometheus.NewCounter(prometheus.CounterOpts{Name: "msgpulse_wecom_merged_sends_total",
			Help: "WeCom message/send calls that carried single messages merged within WECOM_MERGE_WINDOW."}),
		MergedUsers: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "msgpulse_wecom_merged_users",
			Help: "Users per merged WeCom call.", Buckets: []float64{1, 2, 5, 10, 50, 100, 250, 500, 1000}}),
		Held: prometheus.NewGauge(prometheus.GaugeOpts{Name: "msgpulse_held_deliveries",
			Help: "Deliveries held unacknowledged while the publish of their retry or snooze, which the broker refused or blocked, is tried again."}),
	}
	if reg != nil {
		reg.MustRegister(m.collectors()...)
	}
	return m
}

func (m *Metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.Consumed, m.Sent, m.Retried, m.DeadLettered, m.Skipped, m.SendDuration, m.InFlight, m.Paused, m.Callbacks, m.AccountRate, m.AccountHealth, m.MergedSends, m.MergedUsers, m.Workers, m.Held}
}

// Describe sends every metric's descriptor.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}
