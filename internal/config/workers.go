package config

import (
	"strings"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// WorkerBounds are a channel's worker pool bounds: it grows from Min to
// Max while every worker is busy, and shrinks back as they idle.
type WorkerBounds struct{ Min, Max int }

// loadWorkers reads {CH}_MIN_WORKERS and {CH}_MAX_WORKERS for every
// channel; both default to CONCURRENCY (a fixed pool).
func loadWorkers(l *envconf.Loader, concurrency int) map[string]WorkerBounds {
	out := map[string]WorkerBounds{}
	for _, ch := range topology.Channels {
		up := strings.ToUpper(ch)
		b := WorkerBounds{
			Min: l.Int(up+"_MIN_WORKERS", concurrency, 1, 10_000, "workers the "+ch+" channel's pool keeps however idle (default CONCURRENCY)"),
		}
		b.Max = l.Int(up+"_MAX_WORKERS", max(concurrency, b.Min), 1, 10_000, "workers the "+ch+" channel's pool may grow to while all are busy (a backlog, a slow provider); above "+up+"_MIN_WORKERS the pool follows the queue (default CONCURRENCY, or "+up+"_MIN_WORKERS if higher: fixed)")
		if b.Max < b.Min {
			l.Fail(up+"_MAX_WORKERS", "", "below %s_MIN_WORKERS (%d)", up, b.Min)
		}
		out[ch] = b
	}
	return out
}
