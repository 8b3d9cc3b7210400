package loadgen

import (
	"bytes"
	"math"
	"testing"
	"time"

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

// A step holds on what was offered: the API must take at least 99% of it
// (over the step), none lost, p99 under the bound; the figure that held is
// the offered rate, as seed 004 asks.
func TestHeadlineStepJudge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		st   HeadlineStep
		held bool
		why  string
	}{
		{"every one taken, a hair under the rate", HeadlineStep{Offered: 3000, Rate: 2999.7, Latency: Latency{P99: 31.9}}, true, ""},
		{"99% taken", HeadlineStep{Offered: 3000, Rate: 2970, Latency: Latency{P99: 50}}, true, ""},
		{"98% taken", HeadlineStep{Offered: 3000, Rate: 2940, Latency: Latency{P99: 50}}, false, "only 2940/s accepted (202:176400)"},
		{"p99 at the bound", HeadlineStep{Offered: 3000, Rate: 3000, Latency: Latency{P99: 100}}, false, "p99 100.00 ms"},
		{"one lost", HeadlineStep{Offered: 3000, Rate: 3000, Lost: 1, Latency: Latency{P99: 5}}, false, "1 recipients not at the sink within 30s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st := tc.st
			st.judge(100*time.Millisecond, 30*time.Second, "202:176400")
			require.Equal(t, tc.held, st.Held)
			require.Equal(t, tc.why, st.Why)
			var k HeadlineKind
			k.add(HeadlineStep{Offered: 1500, Rate: 1500, Held: true})
			k.add(st)
			want := 1500.0
			if tc.held {
				want = st.Offered // the offered rate, not the accepted one
			}
			require.Equal(t, want, k.Best)
		})
	}
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
