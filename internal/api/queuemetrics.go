package api

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// queueMetrics exports each level queue's depth, bound and oldest age, as
// GET /api/queues/stats reports them, for the dashboard: the broker's own
// metrics know neither the model's bounds nor the age of a queue's head.
// It reads the broker at scrape time (one passive declare per queue, one
// management call), bounded by queueMetricsTimeout.
type queueMetrics struct {
	s                  *Server
	depth, bound, aged *prometheus.Desc
}

const queueMetricsTimeout = 3 * time.Second

// QueueCollector returns the collector of msgpulse_queue_messages,
// msgpulse_queue_bound and msgpulse_queue_oldest_age_seconds, by channel,
// level and queue; register it once.
func (s *Server) QueueCollector() prometheus.Collector {
	labels := []string{"channel", "level", "queue"}
	return &queueMetrics{s: s,
		depth: prometheus.NewDesc("msgpulse_queue_messages", "Messages in each level queue (ready and unacked).", labels, nil),
		bound: prometheus.NewDesc("msgpulse_queue_bound", "Each level queue's bound (x-max-length; 0 = unbounded).", labels, nil),
		aged:  prometheus.NewDesc("msgpulse_queue_oldest_age_seconds", "Age of each level queue's oldest message (0 when empty; absent when the management API does not say).", labels, nil),
	}
}

func (q *queueMetrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- q.depth
	ch <- q.bound
	ch <- q.aged
}

func (q *queueMetrics) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), queueMetricsTimeout)
	defer cancel()
	var queues []topology.Queue
	var names []string
	for _, qu := range q.s.d.Model.Queues {
		if qu.Role == topology.RoleMain {
			queues, names = append(queues, qu), append(names, qu.Name)
		}
	}
	states, err := q.s.d.Inspect(ctx, names)
	if err != nil {
		return // no broker: no samples, which the dashboard shows as a gap
	}
	var ages map[string]time.Time
	if q.s.d.Ages != nil {
		ages, _ = q.s.d.Ages(ctx)
	}
	now := q.s.now()
	for i, st := range states {
		qu := queues[i]
		lv := []string{apiChannelOf(qu.Channel), string(qu.Level), qu.Name}
		bound, _, _ := qu.Fill(st.Messages, st.Exists)
		ch <- prometheus.MustNewConstMetric(q.depth, prometheus.GaugeValue, float64(st.Messages), lv...)
		ch <- prometheus.MustNewConstMetric(q.bound, prometheus.GaugeValue, float64(bound), lv...)
		if st.Messages == 0 {
			ch <- prometheus.MustNewConstMetric(q.aged, prometheus.GaugeValue, 0, lv...)
		} else if at, ok := ages[qu.Name]; ok {
			ch <- prometheus.MustNewConstMetric(q.aged, prometheus.GaugeValue, max(now.Sub(at), 0).Seconds(), lv...)
		}
	}
}
