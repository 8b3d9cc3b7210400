package fraud

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Refusal reasons of msgpulse_fraud_refused_codes_total.
const (
	RefusedPumping    = "pumping"     // 429: the prefix is blocked
	RefusedNumberType = "number_type" // 400: VERIFY_SMS_NUMBER_TYPES
	RefusedCountry    = "country"     // 403: VERIFY_SMS_COUNTRIES(_BY_TENANT)
)

// Metrics are the guard's: the codes it and the number policy refused, by
// reason, and the prefixes blocked now (read from Redis at each scrape,
// the same on every replica).
type Metrics struct {
	Refused *prometheus.CounterVec
	blocked *prometheus.Desc
	count   func(ctx context.Context) (int, error)
}

// blockedTimeout bounds a scrape's read of the blocks.
const blockedTimeout = 2 * time.Second

// NewMetrics registers the metrics with reg (none when nil); count gives
// the blocks in force (Guard.Blocked; nil: the gauge is not exported).
// Every reason starts at zero, so that a rate over it exists before the
// first refusal.
func NewMetrics(reg prometheus.Registerer, count func(ctx context.Context) (int, error)) *Metrics {
	m := &Metrics{
		Refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_fraud_refused_codes_total",
			Help: "SMS verification codes refused by the fraud guard (pumping: a blocked prefix, 429) and the number policy (number_type: 400, country: 403)."}, []string{"reason"}),
		blocked: prometheus.NewDesc("msgpulse_fraud_blocked_prefixes", "Phone-number prefixes blocked now for suspected SMS pumping, every tenant's (the same on every API replica).", nil, nil),
		count:   count,
	}
	for _, r := range []string{RefusedPumping, RefusedNumberType, RefusedCountry} {
		m.Refused.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.Refused.Describe(ch)
	ch <- m.blocked
}

// Collect implements prometheus.Collector. A Redis that does not answer
// leaves the gauge out of the scrape rather than report 0.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.Refused.Collect(ch)
	if m.count == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), blockedTimeout)
	defer cancel()
	n, err := m.count(ctx)
	if err != nil {
		return // an invalid metric would fail the whole scrape
	}
	ch <- prometheus.MustNewConstMetric(m.blocked, prometheus.GaugeValue, float64(n))
}
