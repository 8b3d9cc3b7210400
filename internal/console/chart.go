package console

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/timeline"
)

// Timeline gives the chart's points, one per minute, oldest first.
type Timeline interface {
	LastHour(ctx context.Context, now time.Time) ([]timeline.Point, error)
}

// series is one line of a chart: SVG polyline points, numbers only.
type series struct {
	Points string
	Last   string
}

// chartView is what the page draws: two small SVG charts.
type chartView struct {
	W, H           int
	Sent, Failed   series
	Delay          series
	MaxCount       int64
	MaxDelayMs     int64
	From, To       string
	TotalSent      int64
	TotalFailed    int64
	DelayAvailable bool
}

const chartW, chartH = 600, 100

// chart scales points into polylines; nothing but numbers reaches the
// SVG, and html/template escapes the attributes anyway.
func chart(pts []timeline.Point) chartView {
	v := chartView{W: chartW, H: chartH, MaxCount: 1, MaxDelayMs: 1}
	if len(pts) == 0 {
		return v
	}
	for _, p := range pts {
		v.MaxCount = max(v.MaxCount, p.Sent, p.Failed)
		v.TotalSent += p.Sent
		v.TotalFailed += p.Failed
		if p.HasDelay {
			v.DelayAvailable = true
			v.MaxDelayMs = max(v.MaxDelayMs, p.DelayP99.Milliseconds())
		}
	}
	x := func(i int) int {
		if len(pts) == 1 {
			return 0
		}
		return i * chartW / (len(pts) - 1)
	}
	y := func(n, top int64) int { return chartH - int(n*int64(chartH-4)/top) - 2 }
	var sent, failed, delay []string
	for i, p := range pts {
		sent = append(sent, fmt.Sprintf("%d,%d", x(i), y(p.Sent, v.MaxCount)))
		failed = append(failed, fmt.Sprintf("%d,%d", x(i), y(p.Failed, v.MaxCount)))
		if p.HasDelay {
			delay = append(delay, fmt.Sprintf("%d,%d", x(i), y(p.DelayP99.Milliseconds(), v.MaxDelayMs)))
		}
	}
	last := pts[len(pts)-1]
	v.Sent = series{Points: strings.Join(sent, " "), Last: fmt.Sprint(last.Sent)}
	v.Failed = series{Points: strings.Join(failed, " "), Last: fmt.Sprint(last.Failed)}
	v.Delay = series{Points: strings.Join(delay, " "), Last: "–"}
	if last.HasDelay {
		v.Delay.Last = last.DelayP99.String()
	}
	v.From, v.To = pts[0].At.UTC().Format("15:04"), last.At.UTC().Format("15:04")
	return v
}
