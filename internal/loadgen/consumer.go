package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// ConsumerOptions shape the throughput run.
type ConsumerOptions struct {
	Messages            int
	Concurrency         int           // CONCURRENCY of the no-op and SMTP runs
	Prefetch            int           // PREFETCH of every run, and of raw consume+ack
	ProviderLatency     time.Duration // 0: no slow-provider run
	ProviderConcurrency int           // CONCURRENCY of the slow-provider run
	WideConcurrency     int           // >0: the log-provider run again at this CONCURRENCY (PREFETCH 4×)
	Rounds              int
	Baseline            bool
}

// ConsumerResult is the consumer mode's section of the report.
type ConsumerResult struct {
	Messages            int               `json:"messages"`
	Concurrency         int               `json:"concurrency"`
	Prefetch            int               `json:"prefetch"`
	ProviderLatencyMs   float64           `json:"providerLatencyMs,omitempty"`
	ProviderConcurrency int               `json:"providerConcurrency,omitempty"`
	ProviderPrefetch    int               `json:"providerPrefetch,omitempty"`
	ProviderMessages    int               `json:"providerMessages,omitempty"` // prefilled for the slow-provider run
	WideConcurrency     int               `json:"wideConcurrency,omitempty"`
	Config              map[string]string `json:"config"`
	Rounds              []ConsumerRound   `json:"rounds"`
	Median              ConsumerMedian    `json:"median"`
}

// ConsumerRound is one round's messages per second.
type ConsumerRound struct {
	Noop       float64 `json:"noopPerSec"`
	NoopWide   float64 `json:"noopWidePerSec,omitempty"`   // the same at WideConcurrency
	Binary     float64 `json:"binaryNoopPerSec,omitempty"` // the binary, SMS "log" provider
	BinaryMem  Mem     `json:"binaryNoopConsumerMem"`
	BinaryWide float64 `json:"binaryNoopWidePerSec,omitempty"` // the same at WideConcurrency
	// The CPU time of the consumer binary, Redis, RabbitMQ and the load
	// generator over the log-provider runs and the SMTP run, per message.
	BinaryCPU     *CPU    `json:"binaryNoopCpu,omitempty"`
	BinaryWideCPU *CPU    `json:"binaryNoopWideCpu,omitempty"`
	SMTPCPU       *CPU    `json:"smtpCpu,omitempty"`
	Slow          float64 `json:"slowProviderPerSec,omitempty"`
	SMTP          float64 `json:"smtpPerSec"`
	WeCom         float64 `json:"wecomPerSec,omitempty"`
	RawConsume    float64 `json:"rawConsumePerSec,omitempty"`
	// RawConsumeWide is raw consume+ack at the wide runs' prefetch.
	RawConsumeWide float64 `json:"rawConsumeWidePerSec,omitempty"`
	SlowMem        Mem     `json:"slowProviderConsumerMem"`
	SMTPMem        Mem     `json:"smtpConsumerMem"`
}

// ConsumerMedian holds the medians over rounds.
type ConsumerMedian struct {
	Noop       float64 `json:"noopPerSec"`
	Binary     float64 `json:"binaryNoopPerSec"`
	BinaryWide float64 `json:"binaryNoopWidePerSec,omitempty"`
	Slow       float64 `json:"slowProviderPerSec"`
	SMTP       float64 `json:"smtpPerSec"`
	WeCom      float64 `json:"wecomPerSec"`
	RawConsume float64 `json:"rawConsumePerSec"`
	// The ratio is the no-op's best over raw consume+ack's best: each side
	// at the concurrency and prefetch that suit it, as against the peer.
	NoopWide       float64 `json:"noopWidePerSec,omitempty"`
	RawConsumeWide float64 `json:"rawConsumeWidePerSec,omitempty"`
	NoopRatio      float64 `json:"noopOverRaw"`
	RSSMB          float64 `json:"consumerPeakRssMb"`
}

// best is the no-op's best rate and raw consume+ack's best, each over the
// concurrencies and prefetches measured: what the ratio compares.
func (m ConsumerMedian) best() (noop, raw float64) {
	return max(m.Noop, m.NoopWide), max(m.RawConsume, m.RawConsumeWide)
}

// noop is a provider that accepts every message at once: the consumer's
// own cost (claim, status, render, ack) is all that remains.
type noop struct{ n atomic.Int64 }

func (p *noop) Name() string { return "noop" }
func (p *noop) SendSMS(context.Context, provider.SMS) (provider.Receipt, error) {
	p.n.Add(1)
	return provider.Receipt{Provider: "noop"}, nil
}

// Consumer measures one consumer's throughput on a prefilled queue of
// notices: the no-op provider (dispatch in this process: there is no such
// provider in the binary), the consumer binary with the SMS log provider
// (a line on stdout per message), a provider that takes ProviderLatency
// per send (the binary and its webhook SMS provider against a sink that
// answers after that long), the SMTP provider against a lean SMTP sink
// (the binary), and with Baseline raw consume+ack of the same queue with
// the same prefetch.
func Consumer(ctx context.Context, o *Options, c ConsumerOptions) (*ConsumerResult, error) {
	res := &ConsumerResult{Messages: c.Messages, Concurrency: c.Concurrency, Prefetch: c.Prefetch, WideConcurrency: c.WideConcurrency,
		ProviderLatencyMs: float64(c.ProviderLatency) / float64(time.Millisecond), ProviderConcurrency: c.ProviderConcurrency}
	if c.ProviderLatency > 0 {
		res.ProviderPrefetch, res.ProviderMessages = slowPrefetch(c), slowMessages(c)
	} else {
		res.ProviderConcurrency = 0
	}
	env, err := NewEnv(ctx, *o, "consumer")
	if err != nil {
		return nil, err
	}
	defer env.Close()
	if err := declare(ctx, env, benchTopology()); err != nil {
		return nil, err
	}
	conn, err := broker.Dial(ctx, broker.Config{URL: env.AMQPURL})
	if err != nil {
		return nil, err
	}
	defer func() { _ = conn.Close() }()
	bins, err := o.Binaries(ctx)
	if err != nil {
		return nil, err
	}
	res.Config = publicConfig(consumerEnv(env, c.Concurrency, c.Prefetch), o.ExtraEnv)
	if c.ProviderLatency > 0 {
		res.Config["slow provider run"] = fmt.Sprintf("SMS_PROVIDER=webhook (answers after %s), CONCURRENCY=%d, PREFETCH=%d, %d messages", c.ProviderLatency, c.ProviderConcurrency, slowPrefetch(c), slowMessages(c))
	}
	for r := 1; r <= c.Rounds; r++ {
		var rd ConsumerRound
		if rd.Noop, err = noopRound(ctx, o, env, conn, c); err != nil {
			return nil, fmt.Errorf("no-op provider: %w", err)
		}
		o.progress("consumer round %d: no-op provider %.0f msg/s (CONCURRENCY=%d PREFETCH=%d, in-process)", r, rd.Noop, c.Concurrency, c.Prefetch)
		if c.WideConcurrency > 0 {
			w := c
			w.Concurrency, w.Prefetch = c.WideConcurrency, widePrefetch(res)
			if rd.NoopWide, err = noopRound(ctx, o, env, conn, w); err != nil {
				return nil, fmt.Errorf("no-op provider, CONCURRENCY=%d: %w", w.Concurrency, err)
			}
			o.progress("consumer round %d: no-op provider %.0f msg/s (CONCURRENCY=%d PREFETCH=%d, in-process)", r, rd.NoopWide, w.Concurrency, w.Prefetch)
		}
		if rd.Binary, rd.BinaryMem, rd.BinaryCPU, err = binaryRound(ctx, o, bins, env, conn, c, logProvider); err != nil {
			return nil, fmt.Errorf("consumer binary, SMS log provider: %w", err)
		}
		o.progress("consumer round %d: consumer binary, SMS log provider %.0f msg/s (CONCURRENCY=%d), rss %.0f MB", r, rd.Binary, c.Concurrency, rd.BinaryMem.Peak())
		if c.WideConcurrency > 0 {
			w := c
			w.Concurrency, w.Prefetch = c.WideConcurrency, widePrefetch(res)
			var mem Mem
			if rd.BinaryWide, mem, rd.BinaryWideCPU, err = binaryRound(ctx, o, bins, env, conn, w, logProvider); err != nil {
				return nil, fmt.Errorf("consumer binary, SMS log provider, CONCURRENCY=%d: %w", w.Concurrency, err)
			}
			rd.BinaryMem.PeakRSSMB = max(rd.BinaryMem.PeakRSSMB, mem.PeakRSSMB)
			rd.BinaryMem.HWMMB = max(rd.BinaryMem.HWMMB, mem.HWMMB)
			o.progress("consumer round %d: the same at CONCURRENCY=%d PREFETCH=%d: %.0f msg/s, rss %.0f MB", r, w.Concurrency, w.Prefetch, rd.BinaryWide, mem.Peak())
		}
		if c.ProviderLatency > 0 {
			sc := c
			sc.Messages = slowMessages(c)
			if rd.Slow, rd.SlowMem, _, err = binaryRound(ctx, o, bins, env, conn, sc, topology.SMS); err != nil {
				return nil, fmt.Errorf("provider taking %s: %w", c.ProviderLatency, err)
			}
			o.progress("consumer round %d: provider taking %s: %.0f msg/s (CONCURRENCY=%d), rss %.0f MB", r, c.ProviderLatency, rd.Slow, c.ProviderConcurrency, rd.SlowMem.Peak())
		}
		if rd.SMTP, rd.SMTPMem, rd.SMTPCPU, err = binaryRound(ctx, o, bins, env, conn, c, topology.Mail); err != nil {
			return nil, fmt.Errorf("SMTP: %w", err)
		}
		o.progress("consumer round %d: SMTP sink %.0f msg/s (CONCURRENCY=%d), rss %.0f MB", r, rd.SMTP, c.Concurrency, rd.SMTPMem.Peak())
		if c.ProviderLatency > 0 {
			if rd.WeCom, _, _, err = binaryRound(ctx, o, bins, env, conn, c, topology.WeCom); err != nil {
				return nil, fmt.Errorf("WeCom: %w", err)
			}
			o.progress("consumer round %d: WeCom server answering in %s: %.0f msg/s (CONCURRENCY=%d)", r, WeComLatency, rd.WeCom, c.ProviderConcurrency)
		}
		if c.Baseline {
			if rd.RawConsume, err = rawConsumeRound(ctx, conn, c); err != nil {
				return nil, err
			}
			o.progress("consumer round %d: raw consume+ack %.0f msg/s (prefetch %d)", r, rd.RawConsume, c.Prefetch)
			if c.WideConcurrency > 0 {
				w := c
				w.Prefetch = widePrefetch(res)
				if rd.RawConsumeWide, err = rawConsumeRound(ctx, conn, w); err != nil {
					return nil, err
				}
				o.progress("consumer round %d: raw consume+ack %.0f msg/s (prefetch %d)", r, rd.RawConsumeWide, w.Prefetch)
			}
		}
		res.Rounds = append(res.Rounds, rd)
	}
	res.Median = consumerMedian(res.Rounds)
	return res, nil
}

func consumerMedian(rounds []ConsumerRound) ConsumerMedian {
	var noops, noopWides, bins, wides, slows, smtps, wecoms, raws, rawWides, rss []float64
	for _, r := range rounds {
		noops, smtps = append(noops, r.Noop), append(smtps, r.SMTP)
		if r.NoopWide > 0 {
			noopWides = append(noopWides, r.NoopWide)
		}
		if r.RawConsumeWide > 0 {
			rawWides = append(rawWides, r.RawConsumeWide)
		}
		if r.Binary > 0 {
			bins = append(bins, r.Binary)
		}
		if r.BinaryWide > 0 {
			wides = append(wides, r.BinaryWide)
		}
		if r.WeCom > 0 {
			wecoms = append(wecoms, r.WeCom)
		}
		if r.Slow > 0 {
			slows = append(slows, r.Slow)
		}
		if r.RawConsume > 0 {
			raws = append(raws, r.RawConsume)
		}
		rss = append(rss, max(r.BinaryMem.Peak(), r.SMTPMem.Peak()))
	}
	m := ConsumerMedian{Noop: round2(median(noops)), Binary: round2(median(bins)), BinaryWide: round2(median(wides)), Slow: round2(median(slows)), SMTP: round2(median(smtps)), WeCom: round2(median(wecoms)), RawConsume: round2(median(raws)), RSSMB: round2(median(rss))}
	m.NoopWide, m.RawConsumeWide = round2(median(noopWides)), round2(median(rawWides))
	if noop, raw := m.best(); raw > 0 {
		m.NoopRatio = round2(noop / raw)
	}
	return m
}

// consumerEnv is the consumer's configuration for a throughput run.
func consumerEnv(env *Env, concurrency, prefetch int) map[string]string {
	return map[string]string{
		"AMQP_URL": env.AMQPURL, "REDIS_URL": env.RedisURL, "REDIS_MODE": env.RedisMode, "REDIS_PREFIX": env.Prefix, "RABBITMQ_MANAGEMENT_URL": env.ManagementURL,
		"CONCURRENCY": strconv.Itoa(concurrency), "PREFETCH": strconv.Itoa(prefetch), "METRICS_ADDR": "off", "RELAY": "off", "LOG_FORMAT": "json",
		"MAIL_QUEUE_TTL": "0s", "MAIL_QUEUE_MAX_LENGTH": "0", "SMS_QUEUE_TTL": "0s", "SMS_QUEUE_MAX_LENGTH": "0",
		"WECOM_QUEUE_TTL": "0s", "WECOM_QUEUE_MAX_LENGTH": "0",
	}
}

func noopRound(ctx context.Context, o *Options, env *Env, conn *amqp.Connection, c ConsumerOptions) (float64, error) {
	if err := prefill(ctx, conn, topology.SMS, c.Messages); err != nil {
		return 0, err
	}
	m := consumerEnv(env, c.Concurrency, c.Prefetch)
	m["CHANNELS"] = topology.SMS
	// --env reaches this in-process consumer too, as it does the binaries
	// (REDIS_AUTOPIPELINE was measured this way).
	for _, kv := range o.ExtraEnv {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	cfg, l := config.LoadConsumer(envconf.FromMap(m))
	if err := l.Err(); err != nil {
		return 0, err
	}
	// The collector target the consumer binary would run with (GOGC, its
	// default included), for the time this process is that consumer.
	defer debug.SetGCPercent(debug.SetGCPercent(cfg.GCPercent()))
	p := &noop{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	started := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- dispatch.Run(cctx, cfg, zap.NewNop(), dispatch.WithSMS(p), dispatch.WithReady(func() { started <- time.Now() }))
	}()
	var t0 time.Time
	select {
	case t0 = <-started:
	case err := <-done:
		return 0, err
	}
	stopProfile := o.profiler().self("consumer-noop-inprocess", o.progress)
	err := waitCount(ctx, c.Messages, 2*time.Minute, func() int { return int(p.n.Load()) }, func() error {
		select {
		case err := <-done:
			return fmt.Errorf("consumer stopped: %w", err)
		default:
			return nil
		}
	})
	elapsed := time.Since(t0)
	stopProfile()
	cancel()
	if derr := <-done; err == nil && derr != nil {
		err = fmt.Errorf("consumer stopped with: %w", derr)
	}
	if err != nil {
		return 0, err
	}
	return round2(float64(c.Messages) / elapsed.Seconds()), nil
}

// binaryRound runs the consumer binary on a prefilled queue of channel:
// SMS through the webhook provider to a sink answering after
// ProviderLatency, mail through SMTP to the lean sink. It starts the
// consumer once the machine is quiet after the prefill (Options.QuietWait)
// and reads the CPU time of the consumer, Redis, RabbitMQ and this process
// from the consumer's first message to its last.
func binaryRound(ctx context.Context, o *Options, bins *Binaries, env *Env, conn *amqp.Connection, c ConsumerOptions, channel string) (float64, Mem, *CPU, error) {
	logRun := channel == logProvider
	if logRun {
		channel = topology.SMS
	}
	if err := prefill(ctx, conn, channel, c.Messages); err != nil {
		return 0, Mem{}, nil, err
	}
	arr := NewArrivals()
	m := consumerEnv(env, c.Concurrency, c.Prefetch)
	m["CHANNELS"] = channel
	queue := queueOf(channel)
	switch channel {
	case topology.WeCom:
		sink, err := NewWeComSink(arr, WeComLatency)
		if err != nil {
			return 0, Mem{}, nil, err
		}
		defer sink.Close()
		m["WECOM_API_BASE"], m["WECOM_CORP_ID"], m["WECOM_CORP_SECRET"], m["WECOM_AGENT_ID"] = sink.URL(), "loadgen", "loadgen-secret", "1000002"
		m["CONCURRENCY"] = strconv.Itoa(c.ProviderConcurrency)
		m["PREFETCH"] = strconv.Itoa(slowPrefetch(c))
		// Over its adaptive rate a message waits in the delay queues, whose
		// intermediate hops the relay moves on.
		m["RELAY"] = "on"
	case topology.SMS:
		if logRun {
			// The peer's fair match (issue 22): a provider that costs
			// nothing but a line on stdout, counted from the consumer's
			// output file; CONCURRENCY and PREFETCH as the no-op run's.
			m["SMS_PROVIDER"] = sms.NameLog
			break
		}
		sink, err := NewWebhookSink(arr, c.ProviderLatency)
		if err != nil {
			return 0, Mem{}, nil, err
		}
		defer sink.Close()
		m["SMS_PROVIDER"], m["SMS_WEBHOOK_URL"], m["SMS_WEBHOOK_SECRET"] = "webhook", sink.URL(), sink.Secret
		m["CONCURRENCY"] = strconv.Itoa(c.ProviderConcurrency)
		m["PREFETCH"] = strconv.Itoa(slowPrefetch(c))
		m["SMS_TIMEOUT"] = (c.ProviderLatency + 10*time.Second).String()
	default:
		sink, err := NewSMTPSink(arr)
		if err != nil {
			return 0, Mem{}, nil, err
		}
		defer sink.Close()
		host, port, _ := net.SplitHostPort(sink.Addr())
		m["SMTP_HOST"], m["SMTP_PORT"], m["SMTP_TLS"], m["SMTP_POOL_SIZE"] = host, port, "none", strconv.Itoa(min(c.Concurrency, 1000))
	}
	pprofAddr := o.profiler().addr()
	if pprofAddr != "" {
		m["PPROF_ADDR"] = pprofAddr
	}
	name := "consumer-" + map[string]string{topology.SMS: "slow-provider", topology.Mail: "smtp", topology.WeCom: "wecom"}[channel]
	if logRun {
		name = "consumer-log-provider"
	}
	before := o.quiet(ctx, name)
	p, err := Start("consumer", filepath.Join(bins.Dir, "consumer"), nil, append(envList(m), o.ExtraEnv...), bins.LogDir)
	if err != nil {
		return 0, Mem{}, nil, err
	}
	defer func() { _ = p.Stop(30 * time.Second) }()
	if err := waitConsumers(ctx, conn, queue, p, 30*time.Second); err != nil {
		return 0, Mem{}, nil, err
	}
	count := arr.Count
	if logRun {
		count = lineCounter(p.LogPath, sms.LogLinePrefix)
	}
	t0 := time.Now()
	meter := o.meter(ctx, map[string]int{RoleConsumer: p.Pid()}, before)
	// What the consumer handled before the meter started is not in its
	// CPU reading.
	early := count()
	sampler := SampleRSS(ctx, p.Pid())
	profiled := o.profiler().fetch(ctx, pprofAddr, name, time.Second, o.progress)
	defer profiled()
	err = waitCount(ctx, c.Messages, 2*time.Minute+time.Duration(c.Messages)*c.ProviderLatency/time.Duration(max(c.ProviderConcurrency, 1)), count, func() error {
		if exited, _ := p.Exited(); exited {
			return p.exitError()
		}
		return nil
	})
	elapsed := time.Since(t0)
	cpu := meter.stop(c.Messages - early)
	mem := sampler.Stop()
	if err != nil {
		return 0, mem, nil, fmt.Errorf("%w\nconsumer log:\n%s", err, p.Tail(20))
	}
	if err := p.Stop(30 * time.Second); err != nil {
		return 0, mem, nil, fmt.Errorf("consumer stop: %w\n%s", err, p.Tail(20))
	}
	return round2(float64(c.Messages) / elapsed.Seconds()), mem, cpu, nil
}

// logProvider names binaryRound's run of the consumer binary with the SMS
// "log" provider, which prints a line starting with sms.LogLinePrefix per
// message to stdout.
const logProvider = "sms-log"

// lineCounter counts the lines holding marker that a process has written
// to path so far, reading only what was added since the last call.
func lineCounter(path, marker string) func() int {
	var (
		off  int64
		n    int
		tail []byte // an unfinished line
	)
	return func() int {
		f, err := os.Open(path)
		if err != nil {
			return n
		}
		defer func() { _ = f.Close() }()
		buf, err := io.ReadAll(io.NewSectionReader(f, off, 1<<40))
		if err != nil {
			return n
		}
		off += int64(len(buf))
		buf = append(tail, buf...)
		end := bytes.LastIndexByte(buf, '\n') + 1
		n += bytes.Count(buf[:end], []byte(marker))
		tail = append([]byte(nil), buf[end:]...)
		return n
	}
}

// rawConsumeRound is the baseline: amqp091-go consuming the same messages
// with the same prefetch, acking (multiple) and doing nothing else.
func rawConsumeRound(ctx context.Context, conn *amqp.Connection, c ConsumerOptions) (float64, error) {
	if err := prefill(ctx, conn, topology.SMS, c.Messages); err != nil {
		return 0, err
	}
	r, err := consumeN(ctx, conn, queueOf(topology.SMS), c.Prefetch, c.Messages)
	return round2(r), err
}

func queueOf(channel string) string {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return ""
	}
	ct, err := m.Channel(channel)
	if err != nil {
		return ""
	}
	return ct.Level(noticeLevel).Queue
}

// noticeLevel is where the API puts notices, which the consumer runs are
// made of: codes go to high, which flushes each delivery's Redis work at
// once for latency, while normal batches a burst's (dispatch/burst.go).
const noticeLevel = topology.Normal

// prefill publishes n notices to a channel's notice queue through the raw
// windowed publisher.
func prefill(ctx context.Context, conn *amqp.Connection, channel string, n int) error {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return err
	}
	ct, err := m.Channel(channel)
	if err != nil {
		return err
	}
	msgs := make([]amqp.Publishing, n)
	for i := range n {
		if msgs[i], err = envelope.Publishing(sampleMessage(channel, i)); err != nil {
			return err
		}
	}
	lt := ct.Level(noticeLevel)
	if _, err := publishN(ctx, conn, 512, ct.Exchange, lt.RoutingKey, n, func(i int) amqp.Publishing { return msgs[i] }); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	return nil
}

// WeComLatency is how long the WeCom test server takes to answer. The
// WeCom row's notices, one user each, are merged into message/send calls
// (WECOM_MERGE_WINDOW), so the application's adaptive rate of 20-50 calls
// a second carries thousands of them.
const WeComLatency = 50 * time.Millisecond

// widePrefetch is the wide log-provider run's PREFETCH: four deliveries
// per worker, as the default run's 256 for 64.
func widePrefetch(c *ConsumerResult) int { return 4 * c.WideConcurrency }

// slowMessages is how many messages the slow-provider run prefills: at
// least 20 per send in flight. Its first provider latency completes
// nothing and its last drains with fewer sends in flight, about one latency
// lost per run; 20 of them at full speed keep that under 5% of the run, as
// a throughput figure should, where --messages (a few thousand, sized for
// the fast runs) would make the fill and the 2,048 connections' dials half
// of it.
func slowMessages(c ConsumerOptions) int { return max(c.Messages, 20*c.ProviderConcurrency) }

// slowPrefetch is the slow-provider run's PREFETCH: at least two
// deliveries per worker (the consumer's own default), so the prefetch never
// caps the sends in flight.
func slowPrefetch(c ConsumerOptions) int { return max(c.Prefetch, 2*c.ProviderConcurrency) }
