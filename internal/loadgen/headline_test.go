package loadgen

import (
	"bytes"
	"math"
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

// The search offers the target first, climbs or descends by the factor to
// the first change, then narrows between the two.
func TestSearchRates(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		first, limit float64 // a step holds when its rate is at most limit
		want         []float64
	}{
		{"holds the target, then narrows above it", 10000, 15000, []float64{10000, 20000, 14142, 16818}},
		{"misses the target, then narrows below it", 3000, 1000, []float64{3000, 1500, 750, 1061, 892}},
		{"holds up to the highest rate tried", 10000, 1e9, []float64{10000, 20000, 40000}},
		{"holds nothing: four steps down, no more", 3000, 10, []float64{3000, 1500, 750, 375, 188}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []float64
			err := searchRates(t.Context(), tc.first, 2, 50000, 2, func(rate float64) (bool, error) {
				got = append(got, math.Round(rate))
				return rate <= tc.limit, nil
			})
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}
