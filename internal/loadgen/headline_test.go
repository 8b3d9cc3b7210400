package loadgen

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// The headline section lists each kind's steps and the best rate that held.
func TestHeadlineSection(t *testing.T) {
	r := goodReport()
	r.Headline = &HeadlineResult{P99Ms: 100, StepSec: 60, Batch: 1000, Kinds: []HeadlineKind{
		{Kind: "mail", Best: 1500, Steps: []HeadlineStep{
			{Offered: 1000, Rate: 1000, Latency: Latency{P99: 20}, Held: true},
			{Offered: 1500, Rate: 1500, Latency: Latency{P99: 60}, Held: true},
			{Offered: 2250, Rate: 2100, Latency: Latency{P99: 250}, Why: "p99 250.00 ms"},
		}},
	}}
	r.Targets = Evaluate(r)
	var md, txt bytes.Buffer
	WriteMarkdown(&md, MarkdownInput{Report: r, Commands: []string{"make bench"}})
	require.Contains(t, md.String(), "## Seed 004's headline")
	require.Contains(t, md.String(), "| mail | 1500 | 1000 → 1000, 20.00; 1500 → 1500, 60.00; 2250 → 2100, 250.00 (p99 250.00 ms) |")
	WriteText(&txt, r)
	require.Contains(t, txt.String(), "mail     best 1500/s")
}
