package loadgen

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Report is everything one loadgen invocation measured: what --json
// prints and what `loadgen report` renders.
type Report struct {
	Command  string          `json:"command"`
	Started  time.Time       `json:"started"`
	Machine  Machine         `json:"machine"`
	API      *APIResult      `json:"api,omitempty"`
	Consumer *ConsumerResult `json:"consumer,omitempty"`
	E2E      *E2EResult      `json:"e2e,omitempty"`
	Delay    *DelayResult    `json:"delay,omitempty"`
	Levels   *LevelsResult   `json:"levels,omitempty"`
	Peers    []*PeerResult   `json:"peers,omitempty"` // bench/asynq, one per concurrency: loadgen peer, or added by 'loadgen report --peer'
	// PeersAlone is the same peer run alone on the same machine minutes
	// apart ('loadgen report --peer-alone'): what Peers is checked against.
	PeersAlone []*PeerResult   `json:"peersAlone,omitempty"`
	Headline   *HeadlineResult `json:"headline,omitempty"`
	Targets    []Target        `json:"targets"`
	Errors     []string        `json:"errors,omitempty"`
}

// Machine says where the numbers come from.
type Machine struct {
	NProc     int    `json:"nproc"`
	CPU       string `json:"cpu"`
	GoVersion string `json:"goVersion"`
	RabbitMQ  string `json:"rabbitmq"`
	Redis     string `json:"redis"`
	Kernel    string `json:"kernel,omitempty"`
}

// Describe fills in the machine, asking the broker and Redis their versions.
func Describe(ctx context.Context, o Options) Machine {
	m := Machine{NProc: runtime.NumCPU(), GoVersion: runtime.Version(), CPU: cpuModel(), RabbitMQ: "unknown", Redis: "unknown"}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if mc, err := mgmt.New(o.ManagementURL, 5*time.Second); err == nil {
		if ov, err := mc.Overview(ctx); err == nil {
			m.RabbitMQ = ov.RabbitMQVersion
		}
	}
	if rc, err := rdb.Open(o.RedisMode, o.RedisURL); err == nil {
		if info, err := rc.Info(ctx, "server").Result(); err == nil {
			if v := infoField(info, "redis_version"); v != "" {
				m.Redis = v
			}
		}
		_ = rc.Close()
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// Target is one line of the targets table, evaluated.
type Target struct {
	Figure string `json:"figure"`
	Want   string `json:"target"`
	Value  string `json:"value"`         // what was measured, "not measured" if the run did not
	Met    *bool  `json:"met,omitempty"` // nil when not measured
}

// Status is "met", "missed" or "not measured".
func (t Target) Status() string {
	switch {
	case t.Met == nil:
		return "not measured"
	case *t.Met:
		return "met"
	}
	return "missed"
}

// Target thresholds (issue 7; the API ratio and the slow provider raised by
// issue 22, which added the headline).
const (
	TargetAPIRatio       = 0.9
	TargetAPIP99Ms       = 10.0
	TargetConsumerNoop   = 10000.0
	TargetConsumerRatio  = 0.4
	TargetConsumerSlow   = 5000.0
	TargetHeadlineMail   = 3000.0  // recipients/s, single mail sends
	TargetHeadlineWeCom  = 10000.0 // recipients/s, WeCom batches of 1,000
	TargetHeadlineP99    = 100 * time.Millisecond
	TargetSlowLatency    = 200 * time.Millisecond
	TargetE2ERate        = 1000.0
	TargetE2EP99Ms       = 50.0
	TargetRSSMB          = 100.0
	notMeasured          = "not measured"
	targetRateTolerance  = 0.95 // an e2e run at ≥ 95% of 1,000 msg/s counts
	halfMaxRateTolerance = 0.05 // "half of max" within 5 %
)

// Evaluate computes the targets table from a report's medians.
func Evaluate(r Report) []Target {
	b := func(v bool) *bool { return &v }
	var ts []Target

	t := Target{Figure: "API max throughput / raw path throughput, same run", Want: "≥ 0.9", Value: notMeasured}
	if a := r.API; a != nil && a.Median.BaselineRPS > 0 && a.Median.MaxRPS > 0 {
		t.Value = fmt.Sprintf("%.2f (%.0f / %.0f req/s)", a.Median.Ratio, a.Median.MaxRPS, a.Median.BaselineRPS)
		t.Met = b(a.Median.Ratio >= TargetAPIRatio)
	}
	ts = append(ts, t)

	t = Target{Figure: "API p99 at half of its max throughput", Want: "≤ 10 ms", Value: notMeasured}
	if a := r.API; a != nil && a.HalfMax && a.Median.FixedLatency.N > 0 {
		t.Value = fmt.Sprintf("%.2f ms at %.0f req/s", a.Median.FixedLatency.P99, a.Median.FixedRate)
		if f := a.Median.BaselineFixedLatency; f.N > 0 {
			t.Value += fmt.Sprintf(" (raw path at that rate: %.2f ms)", f.P99)
		}
		t.Met = b(a.Median.FixedLatency.P99 <= TargetAPIP99Ms)
	}
	ts = append(ts, t)

	t = Target{Figure: "Consumer throughput, no-op provider, with idempotency and status updates", Want: "≥ 10,000 msg/s, and ≥ 0.4 × raw consume+ack", Value: notMeasured}
	if c := r.Consumer; c != nil && c.Median.Noop > 0 {
		best, raw := c.Median.best()
		t.Value = fmt.Sprintf("%.0f msg/s", best)
		if c.Median.NoopWide > 0 {
			at, other, otherAt := c.Concurrency, c.Median.NoopWide, c.WideConcurrency
			if c.Median.NoopWide > c.Median.Noop {
				at, other, otherAt = c.WideConcurrency, c.Median.Noop, c.Concurrency
			}
			t.Value += fmt.Sprintf(" (CONCURRENCY=%d; %.0f at %d)", at, other, otherAt)
		}
		ok := best >= TargetConsumerNoop
		if raw > 0 {
			t.Value += fmt.Sprintf(", %.2f × raw (%.0f msg/s, its best prefetch)", c.Median.NoopRatio, raw)
			ok = ok && c.Median.NoopRatio >= TargetConsumerRatio
			t.Met = b(ok)
		} else {
			t.Value += ", raw consume+ack not measured (--baseline)"
			if !ok {
				t.Met = b(false)
			}
		}
	}
	ts = append(ts, t)

	t = Target{Figure: "Consumer throughput, provider taking 200 ms per send", Want: "≥ 5,000 msg/s from one process", Value: notMeasured}
	if c := r.Consumer; c != nil && c.ProviderLatencyMs == float64(TargetSlowLatency/time.Millisecond) && c.Median.Slow > 0 {
		var rss []float64
		for _, rd := range c.Rounds {
			rss = append(rss, rd.SlowMem.Peak())
		}
		t.Value = fmt.Sprintf("%.0f msg/s (CONCURRENCY=%d; RSS %.0f MB holding that many sends)", c.Median.Slow, c.ProviderConcurrency, median(rss))
		t.Met = b(c.Median.Slow >= TargetConsumerSlow)
	}
	ts = append(ts, t)

	t = Target{Figure: "End-to-end p99 at 1,000 msg/s through SMTP", Want: "≤ 50 ms", Value: notMeasured}
	if e := r.E2E; e != nil && e.Rate >= TargetE2ERate*targetRateTolerance && e.Median.Mail.N > 0 {
		t.Value = fmt.Sprintf("%.2f ms (mail, at %.0f msg/s)", e.Median.Mail.P99, e.Rate)
		t.Met = b(e.Median.Mail.P99 <= TargetE2EP99Ms)
	}
	ts = append(ts, t)

	t = Target{Figure: "Lost messages in any e2e run", Want: "0", Value: notMeasured}
	if e := r.E2E; e != nil && len(e.Rounds) > 0 {
		lost, dead, expired := 0, 0, 0
		for _, rd := range e.Rounds {
			lost, dead, expired = lost+rd.Lost, dead+rd.DeadLettered, expired+rd.Expired
		}
		t.Value = fmt.Sprintf("%d (of %d accepted in %d rounds; %d dead-lettered, %d expired)", lost, e.TotalAccepted(), len(e.Rounds), dead, expired)
		t.Met = b(lost == 0)
	}
	ts = append(ts, t)

	t = Target{Figure: "RSS of api and consumer under max load", Want: "≤ 100 MB each", Value: notMeasured}
	apiMB, consMB := r.PeakRSS()
	if apiMB > 0 || consMB > 0 {
		var parts []string
		ok := true
		if apiMB > 0 {
			parts = append(parts, fmt.Sprintf("api %.0f MB", apiMB))
			ok = ok && apiMB <= TargetRSSMB
		}
		if consMB > 0 {
			parts = append(parts, fmt.Sprintf("consumer %.0f MB", consMB))
			ok = ok && consMB <= TargetRSSMB
		}
		t.Value = strings.Join(parts, ", ")
		if apiMB == 0 || consMB == 0 {
			t.Value += " (the other not measured)"
		}
		t.Met = b(ok)
	}
	ts = append(ts, t)
	ts = append(ts, headlineTargets(r.Headline)...)
	if len(r.Peers) > 0 {
		ts = append(ts, peerTarget(r))
	}
	if len(r.Peers) > 0 && len(r.PeersAlone) > 0 {
		ts = append(ts, peerAloneTarget(r))
	}
	return ts
}

// headlineTargets are issue 22's two headline rows: the best rate held
// with p99 under 100 ms for 60 s steps. A run with other steps or another
// p99 is shown, not judged.
func headlineTargets(h *HeadlineResult) []Target {
	var ts []Target
	for _, w := range []struct {
		kind, figure, want string
		min                float64
	}{
		{"mail", "Seed 004 headline: single mail sends, p99 (202 → SMTP sink) < 100 ms for 60 s", "≥ 3,000 msg/s", TargetHeadlineMail},
		{"wecom", "Seed 004 headline: WeCom batches of 1,000, p99 (202 → WeCom server) < 100 ms for 60 s", "≥ 10,000 recipients/s", TargetHeadlineWeCom},
	} {
		t := Target{Figure: w.figure, Want: w.want, Value: notMeasured}
		if h != nil {
			for _, k := range h.Kinds {
				if k.Kind != w.kind {
					continue
				}
				t.Value = fmt.Sprintf("%.0f/s held (steps of %.0f s, p99 < %.0f ms)", k.Best, h.StepSec, h.P99Ms)
				if h.StepSec >= 60 && h.P99Ms == float64(TargetHeadlineP99/time.Millisecond) && (w.kind != "wecom" || h.Batch == 1000) {
					met := k.Best >= w.min
					t.Met = &met
				} else {
					t.Value += ": not the target's steps, not judged"
				}
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// PeakRSS is the highest RSS of the api and of a consumer binary seen in
// any mode and round.
func (r Report) PeakRSS() (apiMB, consumerMB float64) {
	if a := r.API; a != nil {
		for _, rd := range a.Rounds {
			apiMB = max(apiMB, rd.APIMem.Peak())
		}
	}
	if e := r.E2E; e != nil {
		for _, rd := range e.Rounds {
			apiMB = max(apiMB, rd.APIMem.Peak())
			consumerMB = max(consumerMB, rd.ConsumerMem.Peak())
		}
	}
	// The throughput runs, not the slow provider's, whose thousands of
	// sends in flight are a concurrency test: its RSS is shown on its own
	// row.
	if c := r.Consumer; c != nil {
		for _, rd := range c.Rounds {
			consumerMB = max(consumerMB, rd.BinaryMem.Peak(), rd.SMTPMem.Peak())
		}
	}
	return apiMB, consumerMB
}
