package loadgen

import (
	"bytes"
	"fmt"
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
	ps, err := ReadPeers(path)
	require.NoError(t, err)
	require.Len(t, ps, 1)
	p := ps[0]

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

	_, err = ReadPeers(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}

// ReadPeers takes what loadgen peer --json prints (a report holding one
// peer per concurrency) as well as bench/asynq's own JSON.
func TestReadPeers(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, body string
		medians    []float64
		err        string
	}{
		{"loadgen peer", `{"command":"loadgen peer","peers":[{"tool":"hibiken/asynq","concurrency":64,"medianPerSec":9000,"db":15,"cpu":[{"messages":8000,"wallSec":0.9,"sec":{"Redis":0.4},"machineSec":1}]},{"tool":"hibiken/asynq","concurrency":256,"medianPerSec":9500}]}`, []float64{9000, 9500}, ""},
		{"bench/asynq", `{"tool":"hibiken/asynq","concurrency":64,"roundsPerSec":[8000],"medianPerSec":8000}`, []float64{8000}, ""},
		{"a peer without a median", `{"peers":[{"tool":"hibiken/asynq","concurrency":64}]}`, nil, "no median at concurrency 64"},
		{"no median", `{"tool":"hibiken/asynq"}`, nil, "no median"},
		{"not JSON", `round 1: 9000 tasks/s`, nil, "invalid character"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, fmt.Sprintf("%d.json", i))
			require.NoError(t, os.WriteFile(path, []byte(tt.body), 0o600))
			ps, err := ReadPeers(path)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var medians []float64
			for _, p := range ps {
				medians = append(medians, p.Median)
			}
			require.Equal(t, tt.medians, medians)
		})
	}
}
