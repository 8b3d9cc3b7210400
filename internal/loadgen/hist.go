package loadgen

import (
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Histogram bounds: microsecond resolution up to a minute with three
// significant digits, so p99 of a 2 ms distribution is exact to 2 µs and a
// 30 s stall still fits.
const (
	histLowest  = 1
	histHighest = int64(time.Minute / time.Microsecond)
	histDigits  = 3
)

// Hist is an HDR histogram of durations. It is not safe for concurrent
// use: each driver worker records into its own and they are merged.
type Hist struct{ h *hdrhistogram.Histogram }

// NewHist returns an empty histogram.
func NewHist() *Hist { return &Hist{h: hdrhistogram.New(histLowest, histHighest, histDigits)} }

// Record adds one duration; values outside the range are clamped so a
// pathological outlier still counts (as the largest trackable value).
func (h *Hist) Record(d time.Duration) {
	us := max(int64(d/time.Microsecond), histLowest)
	_ = h.h.RecordValue(min(us, histHighest))
}

// Merge adds o's counts.
func (h *Hist) Merge(o *Hist) { h.h.Merge(o.h) }

// Count is the number of recorded values.
func (h *Hist) Count() int64 { return h.h.TotalCount() }

// Latency is a summary of a histogram in milliseconds, as reported.
type Latency struct {
	N   int64   `json:"n"`
	P50 float64 `json:"p50Ms"`
	P90 float64 `json:"p90Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

// Summary returns the percentiles.
func (h *Hist) Summary() Latency {
	if h.h.TotalCount() == 0 {
		return Latency{}
	}
	msOf := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		N:   h.h.TotalCount(),
		P50: msOf(h.h.ValueAtQuantile(50)),
		P90: msOf(h.h.ValueAtQuantile(90)),
		P99: msOf(h.h.ValueAtQuantile(99)),
		Max: msOf(h.h.Max()),
	}
}

// medianLatency takes the median of each field over rounds.
func medianLatency(ls []Latency) Latency {
	pick := func(f func(Latency) float64) float64 {
		xs := make([]float64, len(ls))
		for i, l := range ls {
			xs[i] = f(l)
		}
		return median(xs)
	}
	return Latency{
		N:   int64(pick(func(l Latency) float64 { return float64(l.N) })),
		P50: pick(func(l Latency) float64 { return l.P50 }),
		P90: pick(func(l Latency) float64 { return l.P90 }),
		P99: pick(func(l Latency) float64 { return l.P99 }),
		Max: pick(func(l Latency) float64 { return l.Max }),
	}
}
