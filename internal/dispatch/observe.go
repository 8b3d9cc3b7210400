package dispatch

import (
	"maps"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// breakerStates exports msgpulse_breaker_state{provider}: 0 closed, 1 open,
// 2 half-open (breaker.State's values), read at scrape time so that the
// dashboard never shows a state older than the scrape.
type breakerStates struct {
	desc   *prometheus.Desc
	states func() map[string]breaker.State
}

func newBreakerStates(sources ...func() map[string]breaker.State) *breakerStates {
	return &breakerStates{
		desc: prometheus.NewDesc("msgpulse_breaker_state",
			"Circuit breaker state per provider: 0 closed, 1 open, 2 half-open.", []string{"provider"}, nil),
		states: func() map[string]breaker.State {
			out := map[string]breaker.State{}
			for _, s := range sources {
				maps.Copy(out, s())
			}
			return out
		},
	}
}

func (b *breakerStates) Describe(ch chan<- *prometheus.Desc) { ch <- b.desc }

func (b *breakerStates) Collect(ch chan<- prometheus.Metric) {
	for name, st := range b.states() {
		ch <- prometheus.MustNewConstMetric(b.desc, prometheus.GaugeValue, float64(st), name)
	}
}

// Reasons are every dead-letter reason the consumer records.
var Reasons = []string{ReasonMalformed, ReasonDeadline, ReasonPermanent, ReasonExhausted, ReasonPanic}

// ZeroMetrics creates the labelled counters that alert rules read at zero
// for channels: an increase() over a series that appears only with its
// first event misses that event, so an alert would not fire on the first
// dead letters after a start.
func (d *Dispatcher) ZeroMetrics(channels []string) {
	for _, ch := range channels {
		p := d.providerName(ch)
		for _, lvl := range topology.Levels {
			for _, r := range Reasons {
				d.cfg.Metrics.DeadLettered.WithLabelValues(ch, string(lvl), p, r)
			}
			d.cfg.Metrics.Sent.WithLabelValues(ch, string(lvl), p)
		}
	}
}
