package dispatch

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// hotMetrics caches the metric children every message touches, so that
// their label lookup (hashing the label values, a lock in the vector) runs
// once per channel, level and provider rather than once per message.
type hotMetrics struct {
	m  *Metrics
	mu sync.RWMutex
	c  map[hotKey]prometheus.Counter
	h  map[hotKey]prometheus.Observer
}

type hotKey struct {
	kind                     byte
	channel, level, provider string
}

func newHotMetrics(m *Metrics) hotMetrics {
	return hotMetrics{m: m, c: map[hotKey]prometheus.Counter{}, h: map[hotKey]prometheus.Observer{}}
}

func (h *hotMetrics) counter(k hotKey, vec *prometheus.CounterVec, labels ...string) prometheus.Counter {
	h.mu.RLock()
	c, ok := h.c[k]
	h.mu.RUnlock()
	if ok {
		return c
	}
	c = vec.WithLabelValues(labels...)
	h.mu.Lock()
	h.c[k] = c
	h.mu.Unlock()
	return c
}

func (h *hotMetrics) consumed(channel string, level topology.Level) prometheus.Counter {
	return h.counter(hotKey{'c', channel, string(level), ""}, h.m.Consumed, channel, string(level))
}

func (h *hotMetrics) sent(channel string, level topology.Level, provider string) prometheus.Counter {
	return h.counter(hotKey{'s', channel, string(level), provider}, h.m.Sent, channel, string(level), provider)
}

func (h *hotMetrics) sendDuration(channel, provider string) prometheus.Observer {
	k := hotKey{'d', channel, "", provider}
	h.mu.RLock()
	o, ok := h.h[k]
	h.mu.RUnlock()
	if ok {
		return o
	}
	o = h.m.SendDuration.WithLabelValues(channel, provider)
	h.mu.Lock()
	h.h[k] = o
	h.mu.Unlock()
	return o
}
