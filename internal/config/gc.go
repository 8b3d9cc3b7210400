package config

import (
	"strconv"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

// GC is a long-running service's Go garbage collector target (GOGC).
type GC struct {
	// Percent is the heap growth between collections (debug.SetGCPercent);
	// -1 turns the collector off.
	Percent int
}

// GCPercent returns the target cli.Main applies before the service runs.
func (g GC) GCPercent() int { return g.Percent }

// DefaultGCPercent is what the api and the consumer use when GOGC is unset:
// twice Go's 100. Their live heaps are small (tens of MB) while they
// allocate per request and per message, so with Go's default the collector
// runs often and, in the consumer with thousands of sends in flight, scans
// thousands of goroutine stacks each time: a sixth to a quarter of its CPU
// (docs/performance.md). Doubling the target halves the collections for a
// few more MB of heap.
const DefaultGCPercent = 200

// loadGC reads GOGC the way the Go runtime does (a percentage, or off), so
// that one variable means one thing, with this service's default.
func loadGC(l *envconf.Loader) GC {
	s := l.String("GOGC", strconv.Itoa(DefaultGCPercent), "Go garbage collector target: heap growth in percent between collections, or `off`. "+
		"Unset, this service uses 200 rather than Go's 100: its live heap is small, and half as many collections leave more CPU for messages (docs/performance.md)")
	if s == "off" {
		return GC{Percent: -1}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 100_000 {
		l.Fail("GOGC", s, "must be a percentage between 1 and 100000, or off")
		return GC{Percent: DefaultGCPercent}
	}
	return GC{Percent: n}
}
