package console

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/timeline"
)

// The chart scales to its peaks, draws delay only for minutes that had
// delayed sends, and says so when none had.
func TestChart(t *testing.T) {
	at := time.Date(2026, 11, 24, 22, 0, 0, 0, time.UTC)
	cases := []struct {
		name       string
		pts        []timeline.Point
		sent       string
		delay      string
		delayShown bool
		maxCount   int64
	}{
		{"no points", nil, "", "", false, 1},
		{"sends and failures, no delay", []timeline.Point{{At: at, Sent: 4, Failed: 1}, {At: at.Add(time.Minute), Sent: 0}},
			"0,2 600,98", "", false, 4},
		{"delay only where measured", []timeline.Point{
			{At: at, Sent: 2, DelayP99: 10 * time.Millisecond, HasDelay: true},
			{At: at.Add(time.Minute), Sent: 2},
			{At: at.Add(2 * time.Minute), Sent: 2, DelayP99: 40 * time.Millisecond, HasDelay: true},
		}, "0,2 300,2 600,2", "0,74 600,2", true, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := chart(tc.pts)
			require.Equal(t, tc.sent, v.Sent.Points)
			require.Equal(t, tc.delay, v.Delay.Points)
			require.Equal(t, tc.delayShown, v.DelayAvailable)
			require.Equal(t, tc.maxCount, v.MaxCount)
			require.False(t, strings.ContainsAny(v.Sent.Points+v.Failed.Points+v.Delay.Points, "<>\"'&"), "numbers only")
		})
	}
}
