package loadgen

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// DoFunc makes request number seq on worker's connection and returns the
// HTTP status (0 when the request failed before a status).
type DoFunc func(ctx context.Context, worker int, seq int64) (status int, err error)

// Drive shapes one load phase.
type Drive struct {
	Concurrency int           // workers, one keep-alive connection each
	Duration    time.Duration // how long requests are started
	Rate        float64       // requests per second (open loop); 0 = closed loop, as fast as the workers go
}

// DriveResult is what one phase measured.
type DriveResult struct {
	Mode        string           `json:"mode"` // "max" (closed loop) or "fixed" (open loop)
	Concurrency int              `json:"concurrency"`
	TargetRate  float64          `json:"targetRate,omitempty"`
	Requests    int64            `json:"requests"`
	Accepted    int64            `json:"accepted"` // 2xx
	Failed      int64            `json:"failed"`   // no status (connection errors, timeouts)
	Codes       map[string]int64 `json:"codes"`    // status → count, "error" for failures
	ElapsedSec  float64          `json:"elapsedSec"`
	AcceptedRPS float64          `json:"acceptedPerSec"`
	Latency     Latency          `json:"latency"`
	FirstError  string           `json:"firstError,omitempty"`
	// LaunchSec is from the start to the last request's send: unlike
	// ElapsedSec it leaves out the last answers' own latency, so an open
	// loop that kept up with its rate launched its last request just
	// before Duration, and one that fell behind launched it later.
	LaunchSec float64 `json:"launchSec"`
}

// Run drives do as d says until d.Duration has passed or ctx ends.
//
// Closed loop (Rate 0): each worker sends its next request as soon as the
// previous answered; latency is service time, and the accepted rate is the
// system's throughput at this concurrency.
//
// Open loop (Rate > 0): request seq is due at start + seq/Rate whatever the
// workers are doing, and its latency is measured from that due time, not
// from when a worker got round to sending it. A stall therefore shows as
// the queue of requests that should have gone out during it (coordinated
// omission corrected, as wrk2 does), instead of silently lowering the rate.
func (d Drive) Run(ctx context.Context, do DoFunc) DriveResult {
	now := time.Now
	c := max(d.Concurrency, 1)
	var next atomic.Int64
	type workerStats struct {
		hist     *Hist
		codes    map[int]int64
		failed   int64
		firstErr error
		launched time.Time // this worker's last send
	}
	stats := make([]workerStats, c)
	start := now()
	end := start.Add(d.Duration)
	var interval float64
	if d.Rate > 0 {
		interval = float64(time.Second) / d.Rate
	}
	var wg sync.WaitGroup
	for w := range c {
		stats[w] = workerStats{hist: NewHist(), codes: map[int]int64{}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[w]
			for ctx.Err() == nil {
				seq := next.Add(1) - 1
				var from time.Time
				if d.Rate > 0 {
					from = start.Add(time.Duration(float64(seq) * interval))
					if !from.Before(end) {
						return
					}
					if wait := from.Sub(now()); wait > 0 && !pace(ctx, wait) {
						return
					}
				} else {
					from = now()
					if !from.Before(end) {
						return
					}
				}
				st.launched = now()
				status, err := do(ctx, w, seq)
				st.hist.Record(now().Sub(from))
				if status == 0 {
					st.failed++
					if st.firstErr == nil {
						st.firstErr = err
					}
					continue
				}
				st.codes[status]++
			}
		}()
	}
	wg.Wait()
	elapsed := now().Sub(start)
	r := DriveResult{Mode: "max", Concurrency: c, TargetRate: d.Rate, Codes: map[string]int64{}, ElapsedSec: elapsed.Seconds()}
	if d.Rate > 0 {
		r.Mode = "fixed"
	}
	h := NewHist()
	for _, st := range stats {
		if st.launched.After(start) {
			r.LaunchSec = max(r.LaunchSec, st.launched.Sub(start).Seconds())
		}
		h.Merge(st.hist)
		for code, n := range st.codes {
			r.Codes[strconv.Itoa(code)] += n
			r.Requests += n
			if code >= 200 && code < 300 {
				r.Accepted += n
			}
		}
		r.Failed += st.failed
		r.Requests += st.failed
		if st.firstErr != nil && r.FirstError == "" {
			r.FirstError = st.firstErr.Error()
		}
	}
	if r.Failed > 0 {
		r.Codes["error"] = r.Failed
	}
	r.Latency = h.Summary()
	if elapsed > 0 {
		r.AcceptedRPS = float64(r.Accepted) / elapsed.Seconds()
	}
	return r
}

// pace waits until a request is due (pacing the load, not waiting for an
// outcome); false when ctx ended first.
func pace(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// codesString formats status counts in a stable order: "202:1200 429:3".
func codesString(codes map[string]int64) string {
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	s := ""
	for i, k := range keys {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s:%d", k, codes[k])
	}
	return s
}

// round2 keeps JSON numbers readable.
func round2(x float64) float64 { return math.Round(x*100) / 100 }
