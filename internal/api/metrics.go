package api

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
)

// Every label drawn from a request belongs to a fixed set (issue 43): a
// label value is a time series that lives as long as the process, so one
// drawn from what a caller sends (Go's server takes any token up to 1 MiB
// as a method) would let anyone, without a key, grow the heap and every
// scrape without bound. The route is echo's template, or "unmatched"
// (observe); the method is one of these, or "other"; the status is a
// number of three digits.
var servedMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
}

// methodLabel is a request's method as metrics and the request log name
// it: an HTTP method the API or its console serves, else "other".
func methodLabel(m string) string {
	if servedMethods[m] {
		return m
	}
	return "other"
}

type metrics struct {
	requests   *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	rejections *prometheus.CounterVec
	publish    *prometheus.CounterVec
	codes      *prometheus.CounterVec
	checks     *prometheus.CounterVec
	idempotent *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_http_requests_total", Help: "HTTP requests by route, method and status."}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "msgpulse_http_request_duration_seconds", Help: "HTTP request latency by route.",
			Buckets: []float64{0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1, 2.5, 5}}, []string{"route"}),
		rejections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_ratelimit_rejections_total", Help: "Requests refused by frequency control, by the limit hit."}, []string{"limit"}),
		publish:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_publish_total", Help: "Publishes to RabbitMQ by result (confirmed; full: a level queue refused it; admission: refused by the API before publishing, the queue nearly full; nacked, returned, timeout, lost: the connection closed before the confirm, missing: no exchange, unavailable, blocked, overflow, too_large: over the broker's max_message_size)."}, []string{"result"}),
		codes:      prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_verification_codes_issued_total", Help: "Verification codes issued and confirmed by the broker, by channel."}, []string{"channel"}),
		checks:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_verification_checks_total", Help: "Verification checks by result (valid, invalid, burned, locked: a check of a code burned earlier)."}, []string{"result"}),
		idempotent: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_idempotent_requests_total", Help: "Requests with an Idempotency-Key by outcome (stored: first answer kept; replayed: answered again; conflict: 409 while the first is handled; retried: a retry after a failure, under its ids)."}, []string{"outcome"}),
	}
	reg.MustRegister(m.requests, m.latency, m.rejections, m.publish, m.codes, m.checks, m.idempotent)
	return m
}
