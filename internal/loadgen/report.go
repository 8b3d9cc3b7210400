package loadgen

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
)

// WriteText prints a report as human tables.
func WriteText(w io.Writer, r Report) {
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("loadgen: %s", r.Command)
	p("machine: %d × %s, %s, RabbitMQ %s, Redis %s", r.Machine.NProc, r.Machine.CPU, r.Machine.GoVersion, r.Machine.RabbitMQ, r.Machine.Redis)
	if a := r.API; a != nil {
		p("")
		p("API (%s, %s, %d connections, %.0fs per phase, medians of %d rounds)", a.Target, a.Endpoint, a.Concurrency, a.DurationSec, len(a.Rounds))
		p("  limits: %s", a.Limits)
		p("  %-34s %12s %9s %9s %9s %9s", "", "req/s", "p50 ms", "p90 ms", "p99 ms", "max ms")
		m := a.Median
		if m.MaxRPS > 0 {
			p("  %-34s %12.0f %9.2f %9.2f %9.2f %9.2f", "api, max (closed loop)", m.MaxRPS, m.MaxLatency.P50, m.MaxLatency.P90, m.MaxLatency.P99, m.MaxLatency.Max)
		}
		if m.FixedRate > 0 {
			label := fmt.Sprintf("api, fixed %.0f/s (CO-corrected)", m.FixedRate)
			p("  %-34s %12.0f %9.2f %9.2f %9.2f %9.2f", label, m.FixedRPS, m.FixedLatency.P50, m.FixedLatency.P90, m.FixedLatency.P99, m.FixedLatency.Max)
		}
		if m.BaselineRPS > 0 {
			p("  %-34s %12.0f %9.2f %9.2f %9.2f %9.2f", "raw path (echo+Lua+confirm), max", m.BaselineRPS, m.BaselineLatency.P50, m.BaselineLatency.P90, m.BaselineLatency.P99, m.BaselineLatency.Max)
			if m.BaselineFixedLatency.N > 0 {
				label := fmt.Sprintf("raw path, fixed %.0f/s", m.FixedRate)
				p("  %-34s %12.0f %9.2f %9.2f %9.2f %9.2f", label, m.BaselineFixedRPS, m.BaselineFixedLatency.P50, m.BaselineFixedLatency.P90, m.BaselineFixedLatency.P99, m.BaselineFixedLatency.Max)
			}
			p("  api / raw path: %.2f", m.Ratio)
			p("  raw confirmed publish: %.0f msg/s (window %d); raw consume+ack: %.0f msg/s (prefetch %d)", m.RawPublish, a.Window, m.RawConsume, a.Window)
		}
		if m.APIRSSMB > 0 {
			p("  api peak RSS under max load: %.0f MB", m.APIRSSMB)
		}
		for i, rd := range a.Rounds {
			var parts []string
			if rd.Max != nil {
				parts = append(parts, fmt.Sprintf("max %.0f/s [%s]", rd.Max.AcceptedRPS, codesString(rd.Max.Codes)))
			}
			if rd.Fixed != nil {
				parts = append(parts, fmt.Sprintf("fixed %.0f/s p99 %.2f ms [%s]", rd.Fixed.TargetRate, rd.Fixed.Latency.P99, codesString(rd.Fixed.Codes)))
			}
			if rd.Baseline != nil {
				parts = append(parts, fmt.Sprintf("raw path %.0f/s", rd.Baseline.AcceptedRPS))
			}
			p("  round %d: %s", i+1, strings.Join(parts, ", "))
		}
	}
	if c := r.Consumer; c != nil {
		p("")
		p("Consumer (%d messages prefilled per run, %d for the slow provider, medians of %d rounds)", c.Messages, max(c.Messages, c.ProviderMessages), len(c.Rounds))
		p("  %-52s %10s", "", "msg/s")
		m := c.Median
		p("  %-52s %10.0f", fmt.Sprintf("no-op provider (CONCURRENCY=%d PREFETCH=%d)", c.Concurrency, c.Prefetch), m.Noop)
		if m.NoopWide > 0 {
			p("  %-52s %10.0f", fmt.Sprintf("no-op provider (CONCURRENCY=%d PREFETCH=%d)", c.WideConcurrency, widePrefetch(c)), m.NoopWide)
		}
		if m.Binary > 0 {
			p("  %-52s %10.0f", "consumer binary, SMS log provider", m.Binary)
		}
		if m.BinaryWide > 0 {
			p("  %-52s %10.0f", fmt.Sprintf("the same at CONCURRENCY=%d PREFETCH=%d", c.WideConcurrency, widePrefetch(c)), m.BinaryWide)
		}
		if m.Slow > 0 {
			p("  %-52s %10.0f", fmt.Sprintf("provider taking %.0f ms (CONCURRENCY=%d)", c.ProviderLatencyMs, c.ProviderConcurrency), m.Slow)
		}
		p("  %-52s %10.0f", "SMTP sink", m.SMTP)
		if m.WeCom > 0 {
			p("  %-52s %10.0f", fmt.Sprintf("WeCom server answering in %s", WeComLatency), m.WeCom)
		}
		if m.RawConsume > 0 {
			p("  %-52s %10.0f", fmt.Sprintf("raw consume+ack (prefetch %d)", c.Prefetch), m.RawConsume)
			if m.RawConsumeWide > 0 {
				p("  %-52s %10.0f", fmt.Sprintf("raw consume+ack (prefetch %d)", widePrefetch(c)), m.RawConsumeWide)
			}
			p("  no-op / raw consume+ack (best of each): %.2f", m.NoopRatio)
		}
		if m.RSSMB > 0 {
			p("  consumer peak RSS: %.0f MB", m.RSSMB)
		}
	}
	if rows := cpuRows(r); len(rows) > 0 {
		p("")
		p("CPU per message, µs (from /proc over each timed run; medians of rounds)")
		p("  %-72s %8s %-16s %8s %8s %8s %8s %8s %8s %6s", "", "msg/s", "process", "its CPU", "RabbitMQ", "Redis", "loadgen", "system", "rest", "quiet")
		for _, row := range rows {
			c := row.cells()
			p("  %-72s %8.0f %-16s %8s %8s %8s %8s %8s %8s %3d/%-2d", row.Name, row.Rate, row.Role, c[0], c[1], c[2], c[3], c[4], c[5], row.Sum.Rounds-row.Sum.NotQuiet, row.Sum.Rounds)
		}
	}
	for _, set := range []struct {
		name string
		ps   []*PeerResult
	}{{"peer", r.Peers}, {"peer alone", r.PeersAlone}} {
		for _, pr := range set.ps {
			p("")
			p("%s: %s %s no-op worker, concurrency %d, %d tasks per round%s: rounds %s tasks/s, median %.0f", set.name, pr.Tool, pr.Version, pr.Concurrency, pr.Tasks, peerDB(pr), rates(pr.Rounds), pr.Median)
		}
	}
	writeHeadline(p, r.Headline, false)
	if e := r.E2E; e != nil {
		p("")
		p("End to end (%.0f codes/s for %.0fs, %.0f%% SMS, %d connections, medians of %d rounds)", e.Rate, e.DurationSec, e.SMSShare*100, e.Concurrency, len(e.Rounds))
		p("  %-32s %9s %9s %9s %9s", "", "p50 ms", "p90 ms", "p99 ms", "max ms")
		for _, row := range []struct {
			name string
			l    Latency
		}{{"api accept (CO-corrected)", e.Median.Accept}, {"accept → received, all", e.Median.All}, {"accept → received, mail", e.Median.Mail}, {"accept → received, sms", e.Median.SMS}} {
			p("  %-32s %9.2f %9.2f %9.2f %9.2f", row.name, row.l.P50, row.l.P90, row.l.P99, row.l.Max)
		}
		p("  %-8s %9s %9s %6s %6s %6s %8s %5s %6s %6s %9s %9s", "round", "accepted", "received", "dups", "dead", "maxlen", "expired", "lost", "503s", "drain", "api MB", "cons MB")
		for i, rd := range e.Rounds {
			p("  %-8d %9d %9d %6d %6d %6d %8d %5d %6d %5.1fs %9.0f %9.0f", i+1, rd.Accepted, rd.Received, rd.Duplicates, rd.DeadLettered, rd.DeadMaxlen, rd.Expired, rd.Lost, rd.Refused, rd.DrainSec, rd.APIMem.Peak(), rd.ConsumerMem.Peak())
		}
	}
	if d := r.Delay; d != nil {
		p("")
		p("Delay accuracy, delivered − due (mode %s)", d.Mode)
		p("  %-36s %7s %9s %9s %9s %9s", "", "n", "p50 ms", "p95 ms", "p99 ms", "max ms")
		for _, row := range []struct {
			name string
			s    DelaySummary
		}{{"baseline, no delay", d.Baseline}, {"burst floor, no delay", d.Floor}, {"burst due at once", d.Burst}, {fmt.Sprintf("mix up to %.0fs", d.MixMaxSec), d.Mix}} {
			p("  %-36s %7d %9.2f %9.2f %9.2f %9.2f", row.name, row.s.N, row.s.P50, row.s.P95, row.s.P99, row.s.Max)
		}
		p("  p99 over baseline: burst %.1f×, mix %.1f×", d.BurstP99X, d.MixP99X)
	}
	if l := r.Levels; l != nil {
		p("")
		p("Verification codes during a bulk backlog (%d codes at %.0f/s per phase, SMTP sink %.0f ms/mail, CONCURRENCY=%d)", l.Codes, l.CodeRate, l.SMTPLatencyMs, l.ConsumerConcurrency)
		p("  %-52s %9s %9s %9s %9s", "request → SMTP sink", "p50 ms", "p90 ms", "p99 ms", "max ms")
		for _, row := range levelRows(l) {
			p("  %-52s %9.2f %9.2f %9.2f %9.2f", row.name, row.l.P50, row.l.P90, row.l.P99, row.l.Max)
		}
	}
	if len(r.Targets) > 0 {
		p("")
		p("Targets")
		for _, t := range r.Targets {
			p("  %-12s %-72s %-14s %s", t.Status(), t.Figure, t.Want, t.Value)
		}
	}
	for _, e := range r.Errors {
		p("error: %s", e)
	}
}

// GoBench is one benchmark's medians over its -count runs.
type GoBench struct {
	Pkg    string
	Name   string
	Runs   int
	Values map[string]float64 // unit (ns/op, B/op, allocs/op, custom) → median
	Units  []string           // in the order they appeared
}

// ParseGoBench reads `go test -bench` output and returns each benchmark's
// medians, in the order they first appeared, and the benchmarks that
// failed with their first message line.
func ParseGoBench(r io.Reader) ([]GoBench, []string, error) {
	type acc struct {
		b    GoBench
		vals map[string][]float64
	}
	var order []string
	all := map[string]*acc{}
	pkg := ""
	var failed []string
	failing := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if name, ok := strings.CutPrefix(line, "--- FAIL: "); ok {
			failing = strings.Fields(name + " ?")[0]
			failed = append(failed, failing)
			continue
		}
		if failing != "" {
			if msg := strings.TrimSpace(line); msg != "" && strings.HasPrefix(line, "    ") {
				failed[len(failed)-1] += ": " + msg
			}
			failing = ""
		}
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue
		}
		key := pkg + " " + f[0]
		a := all[key]
		if a == nil {
			a = &acc{b: GoBench{Pkg: pkg, Name: f[0]}, vals: map[string][]float64{}}
			all[key] = a
			order = append(order, key)
		}
		a.b.Runs++
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			if _, seen := a.vals[unit]; !seen {
				a.b.Units = append(a.b.Units, unit)
			}
			a.vals[unit] = append(a.vals[unit], v)
		}
	}
	out := make([]GoBench, 0, len(order))
	for _, k := range order {
		a := all[k]
		a.b.Values = map[string]float64{}
		for u, vs := range a.vals {
			a.b.Values[u] = median(vs)
		}
		out = append(out, a.b)
	}
	return out, failed, sc.Err()
}

// MarkdownInput is what BENCHMARKS.md is made of.
type MarkdownInput struct {
	Report   Report
	Commands []string  // how the numbers were produced
	GoBench  []GoBench // may be empty
	GoFailed []string  // benchmarks that failed, with why
	WallTime string    // of the whole make bench, if known
}

// WriteMarkdown renders BENCHMARKS.md.
func WriteMarkdown(w io.Writer, in MarkdownInput) {
	r := in.Report
	p := func(format string, args ...any) { _, _ = fmt.Fprintf(w, format+"\n", args...) }
	p("# Benchmarks")
	p("")
	p("Generated by `make bench` (scripts/bench.sh) on %s; do not edit by hand. Every figure is the median of the rounds shown, measured side by side with the raw limit of the same machine in the same run: on these shared machines absolute numbers drift, ratios hold.", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	p("")
	p("## Commands")
	p("")
	p("```")
	for _, c := range in.Commands {
		p("%s", c)
	}
	p("```")
	if in.WallTime != "" {
		p("")
		p("Wall time of the whole `make bench`: %s.", in.WallTime)
	}
	p("")
	p("## Machine")
	p("")
	p("| | |")
	p("|---|---|")
	p("| CPUs (nproc) | %d |", r.Machine.NProc)
	p("| CPU | %s |", r.Machine.CPU)
	p("| Go | %s |", r.Machine.GoVersion)
	p("| RabbitMQ | %s |", r.Machine.RabbitMQ)
	p("| Redis | %s |", r.Machine.Redis)
	if r.Machine.Kernel != "" {
		p("| Linux | %s |", r.Machine.Kernel)
	}
	p("")
	p("## Targets")
	p("")
	p("| figure | target | measured | |")
	p("|---|---|---|---|")
	for _, t := range r.Targets {
		p("| %s | %s | %s | %s |", t.Figure, t.Want, t.Value, t.Status())
	}
	if a := r.API; a != nil {
		m := a.Median
		p("")
		p("## API")
		p("")
		p("%s, `%s`, %d keep-alive connections, %.0f s per phase, %d rounds. Limits: %s.", a.Target, endpointPath(a.Endpoint), a.Concurrency, a.DurationSec, len(a.Rounds), a.Limits)
		if len(a.Config) > 0 {
			p("")
			p("api configuration: %s.", configLine(a.Config))
		}
		p("")
		p("| | req/s | p50 ms | p90 ms | p99 ms | max ms |")
		p("|---|---:|---:|---:|---:|---:|")
		if m.MaxRPS > 0 {
			p("| api, max (closed loop) | %.0f | %.2f | %.2f | %.2f | %.2f |", m.MaxRPS, m.MaxLatency.P50, m.MaxLatency.P90, m.MaxLatency.P99, m.MaxLatency.Max)
		}
		if m.FixedRate > 0 {
			p("| api at %.0f req/s (open loop, from the intended send time) | %.0f | %.2f | %.2f | %.2f | %.2f |", m.FixedRate, m.FixedRPS, m.FixedLatency.P50, m.FixedLatency.P90, m.FixedLatency.P99, m.FixedLatency.Max)
		}
		if m.BaselineRPS > 0 {
			p("| raw path: echo + one Lua call + one confirmed publish, max | %.0f | %.2f | %.2f | %.2f | %.2f |", m.BaselineRPS, m.BaselineLatency.P50, m.BaselineLatency.P90, m.BaselineLatency.P99, m.BaselineLatency.Max)
			if m.BaselineFixedLatency.N > 0 {
				p("| raw path at %.0f req/s, the api's fixed rate (open loop) | %.0f | %.2f | %.2f | %.2f | %.2f |", m.FixedRate, m.BaselineFixedRPS, m.BaselineFixedLatency.P50, m.BaselineFixedLatency.P90, m.BaselineFixedLatency.P99, m.BaselineFixedLatency.Max)
			}
			p("")
			p("api / raw path = **%.2f**. Raw confirmed publish (one channel, window %d): %.0f msg/s. Raw consume+ack (prefetch %d): %.0f msg/s.", m.Ratio, a.Window, m.RawPublish, a.Window, m.RawConsume)
		}
		if m.APIRSSMB > 0 {
			p("")
			p("api peak RSS under max load (median of rounds): %.0f MB.", m.APIRSSMB)
		}
		p("")
		p("| round | max req/s | status codes | fixed req/s | p99 ms | raw path req/s | raw publish msg/s | raw consume msg/s | api RSS MB |")
		p("|---|---:|---|---:|---:|---:|---:|---:|---:|")
		for i, rd := range a.Rounds {
			var mx, codes, fx, fp, bs string
			if rd.Max != nil {
				mx, codes = fmt.Sprintf("%.0f", rd.Max.AcceptedRPS), codesString(rd.Max.Codes)
			}
			if rd.Fixed != nil {
				fx, fp = fmt.Sprintf("%.0f", rd.Fixed.TargetRate), fmt.Sprintf("%.2f", rd.Fixed.Latency.P99)
			}
			if rd.Baseline != nil {
				bs = fmt.Sprintf("%.0f", rd.Baseline.AcceptedRPS)
			}
			p("| %d | %s | %s | %s | %s | %s | %.0f | %.0f | %.0f |", i+1, mx, codes, fx, fp, bs, rd.RawPublish, rd.RawConsume, rd.APIMem.Peak())
		}
	}
	if c := r.Consumer; c != nil {
		m := c.Median
		p("")
		p("## Consumer")
		p("")
		p("One consumer, %d messages prefilled per run, %d rounds.", c.Messages, len(c.Rounds))
		if len(c.Config) > 0 {
			p("")
			p("Consumer configuration: %s.", configLine(c.Config))
		}
		p("")
		p("| | msg/s | config |")
		p("|---|---:|---|")
		p("| no-op provider (dispatch in-process: claim, status, render, ack) | %.0f | CONCURRENCY=%d PREFETCH=%d |", m.Noop, c.Concurrency, c.Prefetch)
		if m.NoopWide > 0 {
			p("| no-op provider, wider | %.0f | CONCURRENCY=%d PREFETCH=%d |", m.NoopWide, c.WideConcurrency, widePrefetch(c))
		}
		if m.Binary > 0 {
			p("| consumer binary, SMS `log` provider (a line on stdout per message: the real process, no vendor) | %.0f | CONCURRENCY=%d PREFETCH=%d |", m.Binary, c.Concurrency, c.Prefetch)
		}
		if m.BinaryWide > 0 {
			p("| the same, wider | %.0f | CONCURRENCY=%d PREFETCH=%d |", m.BinaryWide, c.WideConcurrency, widePrefetch(c))
		}
		if m.Slow > 0 {
			p("| provider taking %.0f ms per send (consumer binary, webhook SMS provider; %d messages prefilled, at least 20 per send in flight, so that the first and last provider latency weigh under 5%%) | %.0f | CONCURRENCY=%d PREFETCH=%d |", c.ProviderLatencyMs, c.ProviderMessages, m.Slow, c.ProviderConcurrency, c.ProviderPrefetch)
		}
		p("| SMTP sink on loopback (consumer binary) | %.0f | CONCURRENCY=%d SMTP_POOL_SIZE=%d |", m.SMTP, c.Concurrency, c.Concurrency)
		for _, pr := range r.Peers {
			p("| peer: %s %s no-op worker (bench/asynq, its own module; %d tasks prefilled per round, rounds %s%s) | %.0f | concurrency %d |", pr.Tool, pr.Version, pr.Tasks, rates(pr.Rounds), peerDB(pr), pr.Median, pr.Concurrency)
		}
		for _, pr := range r.PeersAlone {
			p("| the same peer run alone on this machine, before the rest of the run (rounds %s%s) | %.0f | concurrency %d |", rates(pr.Rounds), peerDB(pr), pr.Median, pr.Concurrency)
		}
		if m.WeCom > 0 {
			p("| WeCom server answering in %s (consumer binary; notices to one user each, merged into message/send calls within WECOM_MERGE_WINDOW under the application's adaptive rate of 20-50 calls/s) | %.0f | CONCURRENCY=%d PREFETCH=%d |", WeComLatency, m.WeCom, c.ProviderConcurrency, c.ProviderPrefetch)
		}
		if m.RawConsume > 0 {
			p("| raw consume+ack, amqp091-go | %.0f | prefetch %d, multiple acks |", m.RawConsume, c.Prefetch)
			if m.RawConsumeWide > 0 {
				p("| raw consume+ack, amqp091-go, wider | %.0f | prefetch %d, multiple acks |", m.RawConsumeWide, widePrefetch(c))
			}
			p("")
			noop, raw := m.best()
			p("no-op / raw consume+ack = **%.2f** (%.0f / %.0f msg/s: each side at its best concurrency and prefetch of those measured, as against the peer).", m.NoopRatio, noop, raw)
		}
		p("")
		p("| round | no-op | no-op, wider | binary, log provider | wider | slow provider | SMTP | WeCom | raw consume+ack | wider | consumer RSS MB (log, SMTP) | RSS MB, slow provider |")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, rd := range c.Rounds {
			p("| %d | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f |", i+1, rd.Noop, rd.NoopWide, rd.Binary, rd.BinaryWide, rd.Slow, rd.SMTP, rd.WeCom, rd.RawConsume, rd.RawConsumeWide, max(rd.BinaryMem.Peak(), rd.SMTPMem.Peak()), rd.SlowMem.Peak())
		}
	}
	writeCPU(p, r)
	writeHeadline(p, r.Headline, true)
	if e := r.E2E; e != nil {
		p("")
		p("## End to end")
		p("")
		p("Real api and consumer binaries, production queue settings; `POST /api/verification-codes` at %.0f/s for %.0f s (%.0f%% SMS), %d connections, %d rounds. Accept → received: from the 202 to the built-in SMTP sink (mail, `X-Msgpulse-Task-Id`) or SMS webhook sink (`taskId`). Lost = accepted − received − dead-lettered − expired.", e.Rate, e.DurationSec, e.SMSShare*100, e.Concurrency, len(e.Rounds))
		if len(e.Config) > 0 {
			p("")
			p("Configuration: %s. Limits: %s.", configLine(e.Config), e.Limits)
		}
		p("")
		p("| | p50 ms | p90 ms | p99 ms | max ms |")
		p("|---|---:|---:|---:|---:|")
		for _, row := range []struct {
			name string
			l    Latency
		}{{"api accept (open loop)", e.Median.Accept}, {"accept → received, all", e.Median.All}, {"accept → received, mail", e.Median.Mail}, {"accept → received, SMS", e.Median.SMS}} {
			p("| %s | %.2f | %.2f | %.2f | %.2f |", row.name, row.l.P50, row.l.P90, row.l.P99, row.l.Max)
		}
		p("")
		p("| round | accepted | received | duplicates | dead-lettered | of them maxlen | expired | lost | 503 (without Retry-After) | drain s | api RSS MB | consumer RSS MB |")
		p("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, rd := range e.Rounds {
			p("| %d | %d | %d | %d | %d | %d | %d | %d | %d (%d) | %.1f | %.0f | %.0f |", i+1, rd.Accepted, rd.Received, rd.Duplicates, rd.DeadLettered, rd.DeadMaxlen, rd.Expired, rd.Lost, rd.Refused, rd.NoRetryAfter, rd.DrainSec, rd.APIMem.Peak(), rd.ConsumerMem.Peak())
		}
	}
	if d := r.Delay; d != nil {
		p("")
		p("## Delay accuracy")
		p("")
		p("Delivered − due, mode %s.", d.Mode)
		p("")
		p("| | n | p50 ms | p95 ms | p99 ms | max ms |")
		p("|---|---:|---:|---:|---:|---:|")
		for _, row := range []struct {
			name string
			s    DelaySummary
		}{{"baseline: single messages, no delay", d.Baseline}, {"burst floor: the burst at once, no delay", d.Floor}, {"burst due at the same instant", d.Burst}, {fmt.Sprintf("mix of delays up to %.0f s", d.MixMaxSec), d.Mix}} {
			p("| %s | %d | %.2f | %.2f | %.2f | %.2f |", row.name, row.s.N, row.s.P50, row.s.P95, row.s.P99, row.s.Max)
		}
		p("")
		p("p99 over baseline: burst %.1f×, mix %.1f×.", d.BurstP99X, d.MixP99X)
	}
	if l := r.Levels; l != nil {
		p("")
		p("## Verification codes during a bulk backlog")
		p("")
		p("Real api and consumer binaries, one deployment: %d `POST /api/verification-codes` at %.0f/s with nothing else queued, then %d normal notices through `POST /api/messages/send` as fast as the API takes them (%d accepted in %.1f s), then %d codes again while they drain (`queue.mail.normal` held %d when they began, %d after the last arrived). SMTP sink: %.0f ms per mail; consumer CONCURRENCY=%d. Latency: request → SMTP sink.",
			l.Codes, l.CodeRate, l.Backlog, l.BulkAccepted, l.BulkSec, l.Codes, l.DepthAtCodes, l.DepthAfter, l.SMTPLatencyMs, l.ConsumerConcurrency)
		p("")
		p("| codes | p50 ms | p90 ms | p99 ms | max ms |")
		p("|---|---:|---:|---:|---:|")
		for _, row := range levelRows(l) {
			p("| %s | %.2f | %.2f | %.2f | %.2f |", row.name, row.l.P50, row.l.P90, row.l.P99, row.l.Max)
		}
	}
	if len(in.GoBench) > 0 {
		p("")
		p("## Go benchmarks")
		p("")
		p("Medians of `-count` runs.")
		p("")
		p("| package | benchmark | runs | ns/op | B/op | allocs/op | other |")
		p("|---|---|---:|---:|---:|---:|---|")
		for _, b := range in.GoBench {
			var other []string
			for _, u := range b.Units {
				switch u {
				case "ns/op", "B/op", "allocs/op":
				default:
					other = append(other, fmt.Sprintf("%s %s", fmtNum(b.Values[u]), u))
				}
			}
			p("| %s | %s | %d | %s | %s | %s | %s |", strings.TrimPrefix(b.Pkg, "github.com/msgpulse/msgpulse/"), b.Name, b.Runs,
				fmtUnit(b, "ns/op"), fmtUnit(b, "B/op"), fmtUnit(b, "allocs/op"), strings.Join(other, ", "))
		}
	}
	if len(in.GoFailed) > 0 {
		p("")
		p("Failed in this run (no numbers):")
		p("")
		for _, f := range in.GoFailed {
			p("- %s", f)
		}
	}
	if len(r.Errors) > 0 {
		p("")
		p("## Errors")
		p("")
		for _, e := range r.Errors {
			p("- %s", e)
		}
	}
}

// peerDB says which Redis database a peer ran in, when loadgen peer ran it.
func peerDB(pr *PeerResult) string {
	if pr.Started.IsZero() {
		return ""
	}
	return fmt.Sprintf(", Redis database %d", pr.DB)
}

// writeCPU renders the CPU table of the runs whose CPU was read.
func writeCPU(p func(string, ...any), r Report) {
	rows := cpuRows(r)
	if len(rows) == 0 {
		return
	}
	p("")
	p("## CPU per message")
	p("")
	p("The CPU time (user + system) each process used over each timed run, read from `/proc/<pid>/stat` at the run's start and end and divided by the messages it handled, in µs per message; medians of the rounds. msg/s moves with whatever else shares the machine; the CPU a process spends on a message moves far less, so this is the comparison between msgpulse and the peer that holds across machines. The system is the timed process and Redis, with RabbitMQ where it takes part (not for the peer, which uses none): what a message costs the system. The rest of the machine is the busy time of all CPUs (`/proc/stat`) minus the columns: other processes and the kernel's own work. Before each run the load generator waited up to `--quiet-wait` for a second in which at most %.0f%% of the machine's CPU was busy; the last column counts the rounds that began that quiet.", quietBusy*100)
	p("")
	p("| run | msg/s | the process timed | its CPU | RabbitMQ | Redis | load generator | the system | rest of the machine | rounds begun quiet |")
	p("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
	var notes []string
	for _, row := range rows {
		c := row.cells()
		p("| %s | %.0f | %s | %s | %s | %s | %s | %s | %s | %d of %d |", row.Name, row.Rate, row.Role, c[0], c[1], c[2], c[3], c[4], c[5], row.Sum.Rounds-row.Sum.NotQuiet, row.Sum.Rounds)
		if row.Sum.NotQuiet > 0 && len(row.Sum.Others) > 0 {
			notes = append(notes, fmt.Sprintf("%s: %s", row.Name, strings.Join(row.Sum.Others, ", ")))
		}
	}
	if len(notes) > 0 {
		p("")
		p("Busiest processes in the second before a round that did not begin quiet:")
		p("")
		for _, n := range notes {
			p("- %s", n)
		}
	}
	for _, set := range [][]*PeerResult{r.Peers, r.PeersAlone} {
		for _, pr := range set {
			if pr.OtherKeys > 0 {
				p("")
				p("The peer's Redis database %d held %d keys that are not asynq's: it was not a database of its own.", pr.DB, pr.OtherKeys)
				return
			}
		}
	}
}

type latencyRow struct {
	name string
	l    Latency
}

func levelRows(l *LevelsResult) []latencyRow {
	return []latencyRow{{"no backlog", l.Idle}, {fmt.Sprintf("while %d normal notices drain", l.BulkAccepted), l.Loaded}}
}

func endpointPath(e string) string {
	switch e {
	case EndpointSend:
		return "POST /api/messages/send"
	case EndpointMix:
		return "POST /api/verification-codes and /api/messages/send, alternating"
	}
	return "POST /api/verification-codes"
}

func fmtUnit(b GoBench, unit string) string {
	v, ok := b.Values[unit]
	if !ok {
		return ""
	}
	return fmtNum(v)
}

func fmtNum(v float64) string {
	switch {
	case v >= 100 || v == float64(int64(v)):
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

// configLine lists a configuration as `K=V` items, sorted.
func configLine(m map[string]string) string {
	items := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		items = append(items, "`"+k+"="+m[k]+"`")
	}
	return strings.Join(items, ", ")
}

// sortedKeys returns m's keys in order.
func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
