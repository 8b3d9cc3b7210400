package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
)

// PeerResult is what bench/asynq printed (-json): hibiken/asynq's no-op
// worker on the same machine in the same `make bench` run, the task queue
// a Go user would pick instead of msgpulse. It is measured by a module of
// its own, so msgpulse does not depend on asynq; loadgen only reads it.
type PeerResult struct {
	Tool        string    `json:"tool"`
	Version     string    `json:"version"`
	Tasks       int       `json:"tasks"`
	Concurrency int       `json:"concurrency"`
	Rounds      []float64 `json:"roundsPerSec"`
	Median      float64   `json:"medianPerSec"`
}

// ReadPeer reads a PeerResult from path.
func ReadPeer(path string) (*PeerResult, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var p PeerResult
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if p.Median <= 0 {
		return nil, fmt.Errorf("%s: no median", path)
	}
	return &p, nil
}

// peerTarget compares the consumer process with the peer's no-op worker,
// both from the same run, each at the best of the concurrencies it was
// measured at (a user tunes either): the binary with the SMS log provider
// (nothing but a line on stdout per message, as near a no-op as the
// binary has) at CONCURRENCY and at the wide concurrency, else, in a
// report from before that row, the binary through SMTP.
func peerTarget(r Report) Target {
	t := Target{Figure: "Consumer process vs asynq's no-op worker, same run", Want: "more msg/s than asynq", Value: notMeasured}
	c := r.Consumer
	if len(r.Peers) == 0 || c == nil {
		return t
	}
	best := r.Peers[0]
	for _, p := range r.Peers[1:] {
		if p.Median > best.Median {
			best = p
		}
	}
	rate, what := c.Median.Binary, fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.Concurrency)
	if c.Median.BinaryWide > rate {
		rate, what = c.Median.BinaryWide, fmt.Sprintf("consumer binary, SMS log provider, CONCURRENCY=%d", c.WideConcurrency)
	}
	if rate == 0 {
		rate, what = c.Median.SMTP, "consumer binary, SMTP sink"
	}
	if rate > 0 {
		t.Value = fmt.Sprintf("%.0f msg/s (%s) vs %.0f tasks/s (%s %s, concurrency %d)", rate, what, best.Median, best.Tool, best.Version, best.Concurrency)
		if len(r.Peers) > 1 || c.WideConcurrency > 0 {
			t.Value += "; each at its best concurrency"
		}
		met := rate > best.Median
		t.Met = &met
	}
	return t
}

// rates prints per-round rates as "a, b, c".
func rates(xs []float64) string {
	s := ""
	for i, x := range xs {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%.0f", x)
	}
	return s
}
