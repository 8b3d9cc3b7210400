package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
)

func TestHistSummary(t *testing.T) {
	h := NewHist()
	for i := 1; i <= 1000; i++ {
		h.Record(time.Duration(i) * time.Millisecond)
	}
	s := h.Summary()
	require.Equal(t, int64(1000), s.N)
	// Three significant digits: within 0.1 % of the exact order statistic.
	require.InDelta(t, 500, s.P50, 1)
	require.InDelta(t, 900, s.P90, 1)
	require.InDelta(t, 990, s.P99, 1)
	require.InDelta(t, 1000, s.Max, 1)

	other := NewHist()
	other.Record(2 * time.Minute) // beyond the range: clamped, still counted
	h.Merge(other)
	require.Equal(t, int64(1001), h.Count())
	require.InDelta(t, 60000, h.Summary().Max, 60)
	require.Equal(t, Latency{}, NewHist().Summary())
}

func TestMedianLatency(t *testing.T) {
	m := medianLatency([]Latency{{N: 1, P99: 5}, {N: 3, P99: 1}, {N: 2, P99: 9}})
	require.Equal(t, int64(2), m.N)
	require.InDelta(t, 5.0, m.P99, 1e-9)
	require.InDelta(t, 2.5, median([]float64{4, 1, 3, 2}), 1e-9)
	require.Zero(t, median(nil))
}

// A stall in an open-loop run must show up as the latency of every request
// that was due during it, not as one slow request and a lower rate.
func TestDriveCorrectsCoordinatedOmission(t *testing.T) {
	const stall = 300 * time.Millisecond
	do := func(_ context.Context, _ int, seq int64) (int, error) {
		if seq == 100 {
			time.Sleep(stall) // the system under test stalls once
		}
		return 202, nil
	}
	r := Drive{Concurrency: 1, Duration: time.Second, Rate: 1000}.Run(context.Background(), do)
	require.Equal(t, "fixed", r.Mode)
	// Every scheduled request was sent, though one worker lost 300 ms.
	require.InDelta(t, 1000, r.Requests, 5)
	require.Equal(t, r.Requests, r.Accepted)
	// ~300 requests were due during the stall: p90 sits inside it. Measured
	// from the actual send, p90 would be a few microseconds.
	require.GreaterOrEqual(t, r.Latency.Max, float64(stall/time.Millisecond))
	require.Greater(t, r.Latency.P90, 50.0)
	require.Less(t, r.Latency.P50, 50.0)
}

// An open loop's rate is what it sent over its step: the last answers'
// latency is not time the offered load took (a step that took all of
// 3,000/s for 60 s read 2,999.7/s when divided by it), and a load that
// fell behind took longer to send.
func TestDriveLaunchSpan(t *testing.T) {
	const (
		step    = 200 * time.Millisecond
		rate    = 500
		slowEnd = 300 * time.Millisecond
	)
	for _, tc := range []struct {
		name string
		do   DoFunc
		// launch span bounds, seconds
		atLeast, atMost float64
		elapsedAtLeast  float64
	}{
		{
			name: "kept up, slow last answer",
			do: func(_ context.Context, _ int, seq int64) (int, error) {
				if seq == rate*int64(step/time.Millisecond)/1000-1 {
					time.Sleep(slowEnd) // the system under test answers the last one late
				}
				return 202, nil
			},
			atLeast: 0.15, atMost: step.Seconds() + 0.1, elapsedAtLeast: 0.15 + slowEnd.Seconds(),
		},
		{
			name: "fell behind",
			do: func(_ context.Context, _ int, _ int64) (int, error) {
				time.Sleep(4 * time.Millisecond) // twice the interval, one worker
				return 202, nil
			},
			atLeast: 0.35, atMost: 10, elapsedAtLeast: 0.35,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Drive{Concurrency: 1, Duration: step, Rate: rate}.Run(context.Background(), tc.do)
			require.EqualValues(t, rate*step.Seconds(), r.Accepted)
			require.GreaterOrEqual(t, r.LaunchSec, tc.atLeast)
			require.LessOrEqual(t, r.LaunchSec, tc.atMost)
			require.GreaterOrEqual(t, r.ElapsedSec, tc.elapsedAtLeast)
		})
	}
}

func TestDriveClosedLoopCountsCodes(t *testing.T) {
	do := func(_ context.Context, _ int, seq int64) (int, error) {
		switch {
		case seq%10 == 0:
			return 0, errors.New("connection reset")
		case seq%2 == 0:
			return 202, nil
		}
		return 429, nil
	}
	r := Drive{Concurrency: 4, Duration: 100 * time.Millisecond}.Run(context.Background(), do)
	require.Equal(t, "max", r.Mode)
	require.Positive(t, r.Requests)
	require.Equal(t, r.Requests, r.Codes["202"]+r.Codes["429"]+r.Codes["error"])
	require.Equal(t, r.Codes["202"], r.Accepted)
	require.Equal(t, r.Codes["error"], r.Failed)
	require.Positive(t, r.Failed)
	require.Equal(t, "connection reset", r.FirstError)
	require.InDelta(t, float64(r.Accepted)/r.ElapsedSec, r.AcceptedRPS, 1e-6)
	require.Equal(t, "202:1 429:20 error:3", codesString(map[string]int64{"429": 20, "error": 3, "202": 1}))
}

func TestRequestsSpreadRecipientsAndIPs(t *testing.T) {
	q := newRequests()
	seen := map[string]bool{}
	for i := range 200 {
		var req struct{ Channel, Recipient, Purpose, ClientIP string }
		require.NoError(t, json.Unmarshal(q.code(i%3 == 0), &req))
		require.False(t, seen[req.Recipient], "recipient %s repeated", req.Recipient)
		seen[req.Recipient] = true
		if i%3 == 0 {
			require.Equal(t, "sms", req.Channel)
			n, err := phone.Parse(req.Recipient)
			require.NoError(t, err, "a number the API accepts")
			require.Equal(t, req.Recipient, n.E164)
			require.Equal(t, phone.FixedLineOrMobile, n.Type)
		}
		require.True(t, strings.HasPrefix(req.ClientIP, "198.18.") || strings.HasPrefix(req.ClientIP, "198.19."), req.ClientIP)
	}
	var send map[string]any
	require.NoError(t, json.Unmarshal(q.send(), &send))
	require.Equal(t, "EMAIL", send["messageType"])

	ips := map[string]bool{}
	for n := range int64(1 << 17) {
		ips[clientIP(n)] = true
	}
	require.Len(t, ips, 1<<17)
	require.Equal(t, "198.19.255.255", clientIP(1<<17-1))
	require.Equal(t, "198.18.0.0", clientIP(1<<17))
}

func TestParseMemAndTaskID(t *testing.T) {
	rss, hwm, err := parseMem(strings.NewReader("Name:\tapi\nVmHWM:\t   81234 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n"))
	require.NoError(t, err)
	require.Equal(t, int64(40960), rss)
	require.Equal(t, int64(81234), hwm)
	require.InDelta(t, 90.0, Mem{PeakRSSMB: 90, HWMMB: 80}.Peak(), 1e-9)

	require.Equal(t, "t-1", taskIDOf([]byte(`{"code":202,"msg":"ok","data":{"taskId":"t-1","status":"queued"}}`)))
	require.Empty(t, taskIDOf([]byte(`{"code":429,"msg":"slow down"}`)))
	require.Empty(t, taskIDOf([]byte(`not json "taskId"`)))
}

func TestArrivalsCountsDuplicates(t *testing.T) {
	a := NewArrivals()
	t0 := time.Now()
	a.Add("a", t0)
	a.Add("a", t0.Add(time.Second))
	a.Add("b", t0)
	a.Add("", t0)
	require.Equal(t, 2, a.Count())
	first, dups, noID := a.Take()
	require.Equal(t, t0, first["a"], "the first arrival counts")
	require.Equal(t, int64(1), dups)
	require.Equal(t, int64(1), noID)
	require.Zero(t, a.Count())
}

// goodReport meets every target.
func goodReport() Report {
	return Report{
		Command: "loadgen all --baseline --json", Started: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Machine: Machine{NProc: 2, CPU: "Test CPU", GoVersion: "go1.26", RabbitMQ: "3.10.8", Redis: "7.0.15"},
		API: &APIResult{Target: "api binary", Endpoint: EndpointCodes, Concurrency: 64, DurationSec: 5, HalfMax: true, Window: 256,
			Rounds: []APIRound{{Max: &DriveResult{AcceptedRPS: 8000, Codes: map[string]int64{"202": 40000}}, APIMem: Mem{PeakRSSMB: 60, HWMMB: 62}}},
			Median: APIMedian{MaxRPS: 8200, BaselineRPS: 9000, Ratio: 0.91, FixedRate: 4000, FixedLatency: Latency{N: 20000, P50: 1, P99: 4}, APIRSSMB: 62}},
		Consumer: &ConsumerResult{Messages: 10000, Concurrency: 64, Prefetch: 256, ProviderLatencyMs: 200, ProviderConcurrency: 512,
			Rounds: []ConsumerRound{{Noop: 12000, Slow: 5400, SMTP: 5000, RawConsume: 25000, SMTPMem: Mem{HWMMB: 70}, SlowMem: Mem{HWMMB: 180}}},
			Median: ConsumerMedian{Noop: 12000, Slow: 5400, SMTP: 5000, RawConsume: 25000, NoopRatio: 0.48}},
		Headline: &HeadlineResult{P99Ms: 100, StepSec: 60, Batch: 1000, Kinds: []HeadlineKind{{Kind: "mail", Best: 3100}, {Kind: "wecom", Best: 10500}}},
		E2E: &E2EResult{Rate: 1000, DurationSec: 10, Rounds: []E2ERound{{Accepted: 10000, Received: 10000, ConsumerMem: Mem{HWMMB: 50}}},
			Median: E2EMedian{Mail: Latency{N: 9000, P99: 20}}},
	}
}

func TestEvaluateTargets(t *testing.T) {
	status := func(r Report) []string {
		var out []string
		for _, t := range Evaluate(r) {
			out = append(out, t.Status())
		}
		return out
	}
	all := func(s string) []string { return []string{s, s, s, s, s, s, s, s, s} }

	require.Equal(t, all("met"), status(goodReport()))
	require.Equal(t, all("not measured"), status(Report{}))

	tests := []struct {
		name  string
		spoil func(*Report)
		index int // the target that turns to missed
	}{
		{"api ratio", func(r *Report) { r.API.Median.Ratio = 0.5 }, 0},
		{"api p99", func(r *Report) { r.API.Median.FixedLatency.P99 = 10.5 }, 1},
		{"consumer below 10k", func(r *Report) { r.Consumer.Median.Noop = 9000 }, 2},
		{"consumer below 0.4 of raw", func(r *Report) { r.Consumer.Median.NoopRatio = 0.3 }, 2},
		{"slow provider", func(r *Report) { r.Consumer.Median.Slow = 4900 }, 3},
		{"e2e p99", func(r *Report) { r.E2E.Median.Mail.P99 = 51 }, 4},
		{"lost", func(r *Report) { r.E2E.Rounds = append(r.E2E.Rounds, E2ERound{Accepted: 10, Received: 9, Lost: 1}) }, 5},
		{"consumer rss", func(r *Report) { r.Consumer.Rounds[0].BinaryMem.PeakRSSMB = 101 }, 6},
		{"headline mail", func(r *Report) { r.Headline.Kinds[0].Best = 2900 }, 7},
		{"headline wecom", func(r *Report) { r.Headline.Kinds[1].Best = 9000 }, 8},
		{"api rss", func(r *Report) { r.E2E.Rounds[0].APIMem.HWMMB = 150 }, 6},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := goodReport()
			tt.spoil(&r)
			want := all("met")
			want[tt.index] = "missed"
			require.Equal(t, want, status(r))
		})
	}

	// Numbers measured under other conditions are not held to the targets.
	r := goodReport()
	r.API.HalfMax = false
	r.Consumer.ProviderLatencyMs = 50
	r.E2E.Rate = 200
	st := status(r)
	require.Equal(t, []string{"not measured", "not measured", "not measured"}, []string{st[1], st[3], st[4]})
}

// The no-op ratio is the no-op's best concurrency over raw consume+ack's
// best prefetch: a wider no-op run never meets the target against a raw
// run narrower than what raw itself does best.
func TestConsumerMedianRatioIsBestOverBest(t *testing.T) {
	tests := []struct {
		name   string
		rounds []ConsumerRound
		want   float64
	}{
		{"narrow only", []ConsumerRound{{Noop: 6000, RawConsume: 15000}}, 0.4},
		{"wider no-op wins", []ConsumerRound{{Noop: 6000, NoopWide: 9000, RawConsume: 15000, RawConsumeWide: 14000}}, 0.6},
		{"wider raw wins too", []ConsumerRound{{Noop: 6000, NoopWide: 9000, RawConsume: 15000, RawConsumeWide: 30000}}, 0.3},
		{"medians first", []ConsumerRound{
			{Noop: 6000, NoopWide: 8000, RawConsume: 20000, RawConsumeWide: 20000},
			{Noop: 6000, NoopWide: 9000, RawConsume: 20000, RawConsumeWide: 20000},
			{Noop: 6000, NoopWide: 30000, RawConsume: 20000, RawConsumeWide: 20000},
		}, 0.45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.InDelta(t, tt.want, consumerMedian(tt.rounds).NoopRatio, 1e-9)
		})
	}
}

func TestReportJSONShape(t *testing.T) {
	r := goodReport()
	r.Targets = Evaluate(r)
	b, err := json.Marshal(r)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	get := func(path string) any {
		var cur any = m
		for p := range strings.SplitSeq(path, ".") {
			obj, ok := cur.(map[string]any)
			require.True(t, ok, "%s: %s is not an object", path, p)
			cur, ok = obj[p]
			require.True(t, ok, "%s: no %s", path, p)
		}
		return cur
	}
	require.InDelta(t, 2.0, get("machine.nproc"), 0)
	require.Equal(t, "3.10.8", get("machine.rabbitmq"))
	require.InDelta(t, 8200.0, get("api.median.maxAcceptedPerSec"), 0)
	require.InDelta(t, 0.91, get("api.median.apiOverBaseline"), 1e-9)
	require.InDelta(t, 4.0, get("api.median.fixedLatency.p99Ms"), 0)
	require.InDelta(t, 0.48, get("consumer.median.noopOverRaw"), 1e-9)
	require.InDelta(t, 20.0, get("e2e.median.mailLatency.p99Ms"), 0)
	require.Len(t, get("api.rounds"), 1)
	require.Len(t, get("targets"), 9)
	require.NotContains(t, m, "delay", "a mode that did not run is left out")

	// What report reads back is what was written.
	var back Report
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, Evaluate(r), Evaluate(back))
}

const goBenchOut = `goos: linux
pkg: github.com/msgpulse/msgpulse/internal/ratelimit
BenchmarkTake-2   	   10000	    120000 ns/op	    2048 B/op	      30 allocs/op
BenchmarkTake-2   	   10000	    100000 ns/op	    2048 B/op	      30 allocs/op
BenchmarkTake-2   	   10000	    110000 ns/op	    2000 B/op	      31 allocs/op
PASS
pkg: github.com/msgpulse/msgpulse/internal/verify
BenchmarkCode-2   	 1000000	      1000 ns/op	  12.5 MB/s
BenchmarkCode-2   	 1000000	      3000 ns/op	  10.5 MB/s
--- BENCH: BenchmarkNoise
--- FAIL: BenchmarkBroken
    bench_test.go:45: broker blocked publishing (resource alarm)
ok  	github.com/msgpulse/msgpulse/internal/verify	2.1s
`

func TestParseGoBenchMedians(t *testing.T) {
	bs, failed, err := ParseGoBench(strings.NewReader(goBenchOut))
	require.NoError(t, err)
	require.Equal(t, []string{"BenchmarkBroken: bench_test.go:45: broker blocked publishing (resource alarm)"}, failed)
	require.Len(t, bs, 2)
	require.Equal(t, "github.com/msgpulse/msgpulse/internal/ratelimit", bs[0].Pkg)
	require.Equal(t, "BenchmarkTake-2", bs[0].Name)
	require.Equal(t, 3, bs[0].Runs)
	require.InDelta(t, 110000, bs[0].Values["ns/op"], 0)
	require.InDelta(t, 2048, bs[0].Values["B/op"], 0)
	require.InDelta(t, 30, bs[0].Values["allocs/op"], 0)
	require.InDelta(t, 2000, bs[1].Values["ns/op"], 0, "median of two is their mean")
	require.Equal(t, []string{"ns/op", "MB/s"}, bs[1].Units)
}

func TestWriteMarkdown(t *testing.T) {
	r := goodReport()
	r.Consumer.Median.Slow = 1500 // one missed
	r.Levels = &LevelsResult{Backlog: 8000, Codes: 100, CodeRate: 20, SMTPLatencyMs: 20, ConsumerConcurrency: 16, BulkAccepted: 8000,
		Idle: Latency{P99: 7.5}, Loaded: Latency{P99: 29.25}}
	r.Targets = Evaluate(r)
	bs, failed, err := ParseGoBench(strings.NewReader(goBenchOut))
	require.NoError(t, err)
	var buf bytes.Buffer
	WriteMarkdown(&buf, MarkdownInput{Report: r, Commands: []string{"make bench"}, GoBench: bs, GoFailed: failed, WallTime: "6m10s"})
	md := buf.String()
	for _, want := range []string{
		"# Benchmarks", "make bench", "Wall time of the whole `make bench`: 6m10s.",
		"| CPU | Test CPU |", "| RabbitMQ | 3.10.8 |",
		"| API max throughput / raw path throughput, same run | ≥ 0.9 | 0.91 (8200 / 9000 req/s) | met |",
		"| Consumer throughput, provider taking 200 ms per send | ≥ 5,000 msg/s from one process | 1500 msg/s (CONCURRENCY=512; RSS 180 MB holding that many sends) | missed |",
		"| Lost messages in any e2e run | 0 | 0 (of 10000 accepted in 1 rounds; 0 dead-lettered, 0 expired) | met |",
		"api / raw path = **0.91**", "no-op / raw consume+ack = **0.48**",
		"| internal/ratelimit | BenchmarkTake-2 | 3 | 110000 | 2048 | 30 |  |",
		"| internal/verify | BenchmarkCode-2 | 2 | 2000 |  |  | 11.5 MB/s |",
		"- BenchmarkBroken: bench_test.go:45: broker blocked publishing (resource alarm)",
		"## Verification codes during a bulk backlog", "| no backlog | 0.00 | 0.00 | 7.50 | 0.00 |",
		"| while 8000 normal notices drain | 0.00 | 0.00 | 29.25 | 0.00 |",
	} {
		require.Contains(t, md, want)
	}
	require.NotContains(t, md, "## Delay accuracy")

	var txt bytes.Buffer
	WriteText(&txt, r)
	require.Contains(t, txt.String(), "api / raw path: 0.91")
	require.Contains(t, txt.String(), "missed")
}

// lineCounter counts whole lines only, across writes that split one.
func TestLineCounterCountsWholeLinesAcrossReads(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.log")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	count := lineCounter(path, sms.LogLinePrefix)
	for _, step := range []struct {
		write string
		want  int
	}{
		{"", 0},
		{"starting\n[sms:log] to=+86***1 task=a\n", 1},
		{"[sms:log] to=+86***2 ta", 1}, // unfinished
		{"sk=b\n{\"level\":\"info\"}\n", 2},
		{"[sms:log] a\n[sms:log] b\n[sms:log] c\n", 5},
	} {
		_, err := f.WriteString(step.write)
		require.NoError(t, err)
		require.Equal(t, step.want, count(), "after %q", step.write)
	}
	require.Equal(t, 0, lineCounter(filepath.Join(t.TempDir(), "missing"), sms.LogLinePrefix)())
}

// Every SMS number loadgen sends to is valid and they spread over the
// fraud guard's prefixes (NPA-NXX): a run's codes never pile into one.
func TestSMSNumbersAreValidAndSpread(t *testing.T) {
	perPrefix := map[string]int{}
	for n := range int64(len(usExchanges())) {
		num, err := phone.Parse(smsNumber(n))
		require.NoError(t, err, smsNumber(n))
		perPrefix[num.E164[:8]]++
	}
	most := 0
	for _, c := range perPrefix {
		most = max(most, c)
	}
	require.Equal(t, 1, most, "as many codes as exchanges, one per exchange")
	require.Greater(t, len(usExchanges()), 10_000)
}
