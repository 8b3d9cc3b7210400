package loadgen

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// LevelsOptions shape the levels run (issue 12): how long a verification
// code takes while a bulk backlog drains, next to the same with none.
type LevelsOptions struct {
	Backlog             int           // normal notices sent as fast as the API takes them
	Codes               int           // verification codes in each phase
	CodeRate            float64       // codes per second
	SMTPLatency         time.Duration // the SMTP sink's time per mail
	ConsumerConcurrency int
	Wait                time.Duration // longest wait for a phase's codes to arrive
}

// LevelsResult is the levels mode's section of the report.
type LevelsResult struct {
	Backlog             int               `json:"backlog"`
	Codes               int               `json:"codes"`
	CodeRate            float64           `json:"codeRate"`
	SMTPLatencyMs       float64           `json:"smtpLatencyMs"`
	ConsumerConcurrency int               `json:"consumerConcurrency"`
	Config              map[string]string `json:"config"`
	// Idle and Loaded are request → SMTP sink latencies of the codes with
	// no backlog and while the backlog drains.
	Idle   Latency `json:"idle"`
	Loaded Latency `json:"loaded"`
	// BulkAccepted notices took BulkSec; the normal queue held
	// DepthAtCodes when the loaded codes began, DepthAfter after the last
	// one arrived.
	BulkAccepted int     `json:"bulkAccepted"`
	BulkSec      float64 `json:"bulkSec"`
	DepthAtCodes int     `json:"depthAtCodes"`
	DepthAfter   int     `json:"depthAfter"`
	Lost         int     `json:"lost"` // codes accepted but not received within Wait
}

// Levels runs the real api and consumer against an SMTP sink taking
// SMTPLatency per mail: Codes codes at CodeRate with nothing else queued,
// then a flood of Backlog normal notices, then Codes codes again while
// those drain. Both phases in one run, on one deployment.
func Levels(ctx context.Context, o *Options, l LevelsOptions) (*LevelsResult, error) {
	res := &LevelsResult{Backlog: l.Backlog, Codes: l.Codes, CodeRate: l.CodeRate, SMTPLatencyMs: float64(l.SMTPLatency) / float64(time.Millisecond),
		ConsumerConcurrency: l.ConsumerConcurrency}
	sys, err := startSystem(ctx, o, "levels", l.ConsumerConcurrency, nil)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	res.Config = sys.config
	sys.smtp.SetLatency(l.SMTPLatency)
	normal := queueIn(sys.m, topology.Mail).Level(topology.Normal).Queue
	cl := newClient("http://"+sys.addr, benchKey, 64)
	defer cl.close()
	q := newRequests()

	var lost int
	if res.Idle, lost, err = codePhase(ctx, cl, q, sys.arr, l); err != nil {
		return nil, fmt.Errorf("levels, no backlog: %w", err)
	}
	res.Lost += lost
	o.progress("levels: %d codes with no backlog: p50 %.2f p99 %.2f max %.2f ms", l.Codes, res.Idle.P50, res.Idle.P99, res.Idle.Max)

	start := time.Now()
	if res.BulkAccepted, err = flood(ctx, cl, q, l.Backlog, 64); err != nil {
		return nil, fmt.Errorf("levels, backlog: %w", err)
	}
	res.BulkSec = round2(time.Since(start).Seconds())
	if res.DepthAtCodes, _, err = depth(sys.conn, normal); err != nil {
		return nil, err
	}
	if res.Loaded, lost, err = codePhase(ctx, cl, q, sys.arr, l); err != nil {
		return nil, fmt.Errorf("levels, during the backlog: %w", err)
	}
	res.Lost += lost
	if res.DepthAfter, _, err = depth(sys.conn, normal); err != nil {
		return nil, err
	}
	o.progress("levels: %d notices accepted in %.1fs; %d codes while %d→%d wait in %s: p50 %.2f p99 %.2f max %.2f ms",
		res.BulkAccepted, res.BulkSec, l.Codes, res.DepthAtCodes, res.DepthAfter, normal, res.Loaded.P50, res.Loaded.P99, res.Loaded.Max)
	if res.Lost > 0 {
		return res, fmt.Errorf("%w: %d codes never arrived", ErrLost, res.Lost)
	}
	return res, nil
}

// codePhase sends l.Codes codes at l.CodeRate (open loop) and waits for
// them at the SMTP sink: request → arrival latency, and how many never came.
func codePhase(ctx context.Context, cl *client, q *requests, arr *Arrivals, l LevelsOptions) (Latency, int, error) {
	var mu sync.Mutex
	sent := map[string]time.Time{}
	do := func(ctx context.Context, _ int, _ int64) (int, error) {
		at := time.Now()
		st, body, err := cl.post(ctx, "/api/verification-codes", q.code(false), true)
		if id := taskIDOf(body); st == 202 && id != "" {
			mu.Lock()
			sent[id] = at
			mu.Unlock()
		}
		return st, err
	}
	d := Drive{Concurrency: 4, Rate: l.CodeRate, Duration: time.Duration(float64(l.Codes) / l.CodeRate * float64(time.Second))}.Run(ctx, do)
	if d.Accepted == 0 {
		return Latency{}, 0, fmt.Errorf("no code accepted (%s)", d.FirstError)
	}
	h := NewHist()
	deadline := time.Now().Add(l.Wait)
	for id, at := range sent {
		for {
			if got, ok := arr.At(id); ok {
				h.Record(max(got.Sub(at), 0))
				delete(sent, id)
				break
			}
			if time.Now().After(deadline) {
				break
			}
			if !pace(ctx, 5*time.Millisecond) {
				return Latency{}, 0, ctx.Err()
			}
		}
	}
	return h.Summary(), len(sent), nil
}

// flood sends n notices (normal, the default level) with workers in
// flight, as fast as the API answers, and returns how many got a 202.
func flood(ctx context.Context, cl *client, q *requests, n, workers int) (int, error) {
	var next, ok atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				st, _, err := cl.post(ctx, "/api/messages/send", q.send(), true)
				switch {
				case st == 202:
					ok.Add(1)
				case err != nil:
					first.CompareAndSwap(nil, err.Error())
				default:
					first.CompareAndSwap(nil, "status "+strconv.Itoa(st))
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() == 0 {
		return 0, fmt.Errorf("no notice accepted (%v)", first.Load())
	}
	return int(ok.Load()), ctx.Err()
}
