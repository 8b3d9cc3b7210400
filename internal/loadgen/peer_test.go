package loadgen

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// bench/asynq's JSON becomes a row next to the consumer binary's and a
// target comparing them; without it, neither appears.
func TestPeerRowAndTarget(t *testing.T) {
	path := filepath.Join(t.TempDir(), "asynq.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"tool":"hibiken/asynq","version":"v0.26.0","tasks":8000,"concurrency":64,"roundsPerSec":[14000,15000,16000],"medianPerSec":15000}`+"\n"), 0o600))
	p, err := ReadPeer(path)
	require.NoError(t, err)

	r := goodReport()
	require.Len(t, Evaluate(r), 9, "no peer, no target")
	r.Peers = []*PeerResult{p}
	r.Consumer.Median.SMTP = 16500
	ts := Evaluate(r)
	require.Len(t, ts, 10)
	last := ts[len(ts)-1]
	require.Equal(t, "met", last.Status(), last.Value)
	require.Contains(t, last.Value, "16500 msg/s (consumer binary, SMTP sink) vs 15000 tasks/s (hibiken/asynq v0.26.0, concurrency 64)")
	r.Consumer.Median.SMTP = 9000
	require.Equal(t, "missed", Evaluate(r)[9].Status())

	// The binary with the log provider is the peer's match once measured.
	r.Consumer.Median.Binary = 15500
	last = Evaluate(r)[9]
	require.Equal(t, "met", last.Status(), last.Value)
	require.Contains(t, last.Value, "15500 msg/s (consumer binary, SMS log provider, CONCURRENCY=64) vs 15000 tasks/s")
	r.Consumer.Median.Binary = 14000
	require.Equal(t, "missed", Evaluate(r)[9].Status())

	// Each side at its best concurrency: the wider run of the binary, and
	// the faster of the peer's runs.
	wide := *p
	wide.Concurrency, wide.Median = 256, 14500
	r.Peers = append(r.Peers, &wide)
	r.Consumer.WideConcurrency, r.Consumer.Median.BinaryWide = 256, 15200
	last = Evaluate(r)[9]
	require.Equal(t, "met", last.Status(), last.Value)
	require.Contains(t, last.Value, "15200 msg/s (consumer binary, SMS log provider, CONCURRENCY=256) vs 15000 tasks/s (hibiken/asynq v0.26.0, concurrency 64); each at its best concurrency")
	wide.Median = 15300
	last = Evaluate(r)[9]
	require.Equal(t, "missed", last.Status(), last.Value)
	require.Contains(t, last.Value, "vs 15300 tasks/s (hibiken/asynq v0.26.0, concurrency 256)")

	r.Targets = Evaluate(r)
	var buf bytes.Buffer
	WriteMarkdown(&buf, MarkdownInput{Report: r, Commands: []string{"make bench"}})
	require.Contains(t, buf.String(), "| peer: hibiken/asynq v0.26.0 no-op worker (bench/asynq, its own module; 8000 tasks prefilled per round, rounds 14000, 15000, 16000) | 15000 | concurrency 64 |")
	require.Contains(t, buf.String(), "| the same, wider | 15200 | CONCURRENCY=256 PREFETCH=1024 |")

	_, err = ReadPeer(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}
