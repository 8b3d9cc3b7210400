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
	r.Peer = p
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
	require.Contains(t, last.Value, "15500 msg/s (consumer binary, SMS log provider) vs 15000 tasks/s")
	r.Consumer.Median.Binary = 14000
	require.Equal(t, "missed", Evaluate(r)[9].Status())

	r.Targets = Evaluate(r)
	var buf bytes.Buffer
	WriteMarkdown(&buf, MarkdownInput{Report: r, Commands: []string{"make bench"}})
	require.Contains(t, buf.String(), "| peer: hibiken/asynq v0.26.0 no-op worker (bench/asynq, its own module; 8000 tasks prefilled per round, rounds 14000, 15000, 16000) | 15000 | concurrency 64 |")

	_, err = ReadPeer(filepath.Join(t.TempDir(), "missing.json"))
	require.Error(t, err)
}
