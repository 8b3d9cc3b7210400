package api

import (
	"context"
	"sync"
	"time"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// DLQStat is one dead-letter queue in GET /api/dlq/stats.
type DLQStat struct {
	Queue    string         `json:"queue"`
	Channel  string         `json:"channel"`
	Total    int            `json:"total"`
	ByReason map[string]int `json:"byReason"`
	Oldest   *time.Time     `json:"oldest,omitempty"`
	Newest   *time.Time     `json:"newest,omitempty"`
}

// CachedDLQStats returns a DLQStats that reads the dead-letter queues at
// most once per ttl. Reading a DLQ's log (never the DLQ: see package dlq)
// holds its copies unacked for a moment and costs a status lookup per
// message; dashboards poll, so they share one reading.
func CachedDLQStats(s *broker.Session, m *topology.Model, st *status.Store, ttl time.Duration) DLQStats {
	var mu sync.Mutex
	var at time.Time
	var last any
	return func(ctx context.Context) (any, error) {
		mu.Lock()
		defer mu.Unlock()
		if last != nil && time.Since(at) < ttl {
			return last, nil
		}
		conn, err := s.Conn(ctx)
		if err != nil {
			return nil, err
		}
		qs, err := dlq.Stats(ctx, conn, m, st)
		if err != nil {
			return nil, err
		}
		out := make([]DLQStat, 0, len(qs))
		for _, q := range qs {
			out = append(out, DLQStat{Queue: q.Queue, Channel: apiChannelOf(q.Channel), Total: q.Total, ByReason: q.ByReason, Oldest: q.Oldest, Newest: q.Newest})
		}
		last, at = map[string]any{"queues": out}, time.Now()
		return last, nil
	}
}
