// Command loadgen measures msgpulse on the machine it runs on, side by side
// with the raw limit of the same machine: API throughput and latency,
// end-to-end latency and loss, consumer throughput, delay accuracy. Each
// run uses a throwaway vhost and Redis prefix and the real binaries.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/msgpulse/msgpulse/internal/loadgen"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const usage = `usage: loadgen <mode> [flags]

Modes:
  api        API max throughput (closed loop, --max) and latency at a fixed
             rate (open loop, --rate R); by default both, the fixed rate being
             half of the measured max
  e2e        verification codes at --rate through the real api and consumer to
             built-in SMTP and SMS webhook sinks: accept → received latency,
             and accepted / sent / dead-lettered / expired / lost (lost must be 0)
  consumer   one consumer's throughput on a prefilled queue of notices: no-op
             provider, the binary with the SMS log provider, a provider taking
             --provider-latency per send, an SMTP sink
  delay      delayed delivery accuracy (delivered − due): a burst, a mix
  levels     verification code latency (request → SMTP sink) while a backlog
             of normal notices drains, next to the same with no backlog
  headline   seed 004's headline: the highest offered rate holding p99 (202 →
             sink) under --p99 for a whole --step, stepping the load up, for
             single mail sends and WeCom batches, in recipients/s (not in all)
  peer       hibiken/asynq's no-op worker (bench/asynq) in a Redis database of
             its own, with the CPU time of its process and Redis per task
             (not in all)
  all        api, consumer, e2e, delay and levels with --baseline: what make bench runs
  report     render BENCHMARKS.md from the JSON of a run

Every mode prints a table, or with --json one JSON object on stdout (progress
goes to stderr). --baseline adds the raw limits measured in the same run (a
bare echo + Redis Lua + confirmed amqp091-go publish server; raw confirmed
publish; raw consume+ack) and the ratios. --rounds N (default 3) repeats each
measurement; tables show medians. 'loadgen <mode> -h' lists a mode's flags.

The api and consumer measured are the real binaries, built once from this
source tree (or taken from --bin-dir), in a throwaway vhost and Redis prefix.
Broker and Redis: AMQP_URL, RABBITMQ_MANAGEMENT_URL (comma-separated lists on a cluster), REDIS_URL, REDIS_MODE (local defaults).

Exit codes: 0 ok, 1 the run failed (or lost messages), 2 usage.
`

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// envFlags collects repeated --env KEY=VALUE.
type envFlags []string

func (e *envFlags) String() string { return strings.Join(*e, ",") }
func (e *envFlags) Set(s string) error {
	if k, _, ok := strings.Cut(s, "="); !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	*e = append(*e, s)
	return nil
}

type common struct {
	json      bool
	baseline  bool
	rounds    int
	binDir    string
	extraEnv  envFlags
	profile   string
	quietWait time.Duration
}

func (c *common) register(fs *flag.FlagSet, baseline bool) {
	fs.BoolVar(&c.json, "json", false, "print one JSON object on stdout instead of the table")
	fs.BoolVar(&c.baseline, "baseline", baseline, "also measure the raw limits in the same run and print the ratios")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds of each measurement (medians are reported)")
	fs.StringVar(&c.binDir, "bin-dir", "", "directory with prebuilt api and consumer binaries (default: build them once into a temp dir)")
	fs.StringVar(&c.profile, "profile", "", "directory for CPU profiles under load: api (max phase), consumer (each run), e2e (first round), via the binaries' PPROF_ADDR; adds a little load to the first round")
	fs.Var(&c.extraEnv, "env", "KEY=VALUE added to the api's and consumer's environment (repeatable), e.g. --env PPROF_ADDR=127.0.0.1:6060")
	fs.DurationVar(&c.quietWait, "quiet-wait", 10*time.Second, "before each run whose CPU is read (api and raw path max, the consumer binary, the peer), wait up to this long for a second in which at most 10% of the machine's CPU is busy; the report says when it was not (0: do not wait)")
}

type apiFlags struct {
	rate        float64
	max         bool
	duration    time.Duration
	concurrency int
	endpoint    string
	mix         bool
	target      string
	apiKey      string
	window      int
	rawMessages int
}

func (a *apiFlags) register(fs *flag.FlagSet, full bool, duration time.Duration) {
	if full {
		fs.Float64Var(&a.rate, "rate", 0, "fixed rate in requests/s (open loop; latency from each request's intended send time)")
		fs.BoolVar(&a.max, "max", false, "closed loop: max throughput at --concurrency (with no --rate: then also the fixed rate at half of it)")
		fs.StringVar(&a.target, "target", "", "drive this deployment (base URL) instead of starting the api; no RSS, no --baseline")
		// The key is read from the environment only: a flag would show it
		// in ps and in shell history.
		a.apiKey = os.Getenv("LOADGEN_API_KEY")
		fs.StringVar(&a.endpoint, "endpoint", loadgen.EndpointCodes, "codes (POST /api/verification-codes), send (POST /api/messages/send) or mix")
		fs.BoolVar(&a.mix, "mix", false, "same as --endpoint mix")
	} else {
		a.endpoint = loadgen.EndpointCodes
	}
	fs.DurationVar(&a.duration, "duration", duration, "api: duration of each phase")
	fs.IntVar(&a.concurrency, "concurrency", 64, "api: keep-alive connections (closed loop: requests in flight)")
	fs.IntVar(&a.window, "window", 256, "api --baseline: unconfirmed publishes in flight on the raw path's one channel")
	fs.IntVar(&a.rawMessages, "raw-messages", 20000, "api --baseline: messages for raw publish and raw consume+ack")
}

func (a *apiFlags) options(c common) loadgen.APIOptions {
	ep := a.endpoint
	if a.mix {
		ep = loadgen.EndpointMix
	}
	return loadgen.APIOptions{Rate: a.rate, Max: a.max, Duration: a.duration, Concurrency: a.concurrency, Rounds: c.rounds, Endpoint: ep,
		Baseline: c.baseline, Target: a.target, APIKey: a.apiKey, Window: a.window, RawMessages: a.rawMessages}
}

type e2eFlags struct {
	rate        float64
	duration    time.Duration
	concurrency int
	smsShare    float64
	consumerC   int
	drain       time.Duration
}

func (e *e2eFlags) register(fs *flag.FlagSet, prefix string, duration time.Duration) {
	fs.Float64Var(&e.rate, prefix+"rate", 1000, "e2e: verification codes per second")
	fs.DurationVar(&e.duration, prefix+"duration", duration, "e2e: duration of each round")
	fs.IntVar(&e.concurrency, prefix+"concurrency", 64, "e2e: HTTP connections")
	fs.Float64Var(&e.smsShare, prefix+"sms-share", 0.1, "e2e: fraction of codes sent by SMS (through the webhook provider)")
	fs.IntVar(&e.consumerC, prefix+"consumer-concurrency", 64, "e2e: the consumer's CONCURRENCY")
	fs.DurationVar(&e.drain, prefix+"drain", 60*time.Second, "e2e: longest wait for the tail after the load stops")
}

func (e *e2eFlags) options(c common) loadgen.E2EOptions {
	return loadgen.E2EOptions{Rate: e.rate, Duration: e.duration, Concurrency: e.concurrency, SMSShare: e.smsShare,
		ConsumerConcurrency: e.consumerC, Rounds: c.rounds, Drain: e.drain}
}

type consumerFlags struct {
	messages    int
	latency     time.Duration
	concurrency int
	prefetch    int
	providerC   int
	wideC       int
}

func (f *consumerFlags) register(fs *flag.FlagSet, prefix string, latency time.Duration) {
	fs.IntVar(&f.messages, "messages", 10000, "consumer: messages prefilled for each run")
	fs.DurationVar(&f.latency, "provider-latency", latency, "consumer: also run a provider taking this long per send (0: skip)")
	fs.IntVar(&f.concurrency, prefix+"concurrency", 64, "consumer: CONCURRENCY of the no-op and SMTP runs")
	fs.IntVar(&f.prefetch, "prefetch", 256, "consumer: PREFETCH of every run, and of raw consume+ack")
	fs.IntVar(&f.providerC, "provider-concurrency", 512, "consumer: CONCURRENCY of the --provider-latency run")
	fs.IntVar(&f.wideC, "wide-concurrency", 0, "consumer: also run the binary with the SMS log provider at this CONCURRENCY (PREFETCH 4×), to meet a peer measured at it (0: skip)")
}

func (f *consumerFlags) options(c common) loadgen.ConsumerOptions {
	return loadgen.ConsumerOptions{Messages: f.messages, Concurrency: f.concurrency, Prefetch: f.prefetch, ProviderLatency: f.latency,
		ProviderConcurrency: f.providerC, WideConcurrency: f.wideC, Rounds: c.rounds, Baseline: c.baseline}
}

type delayFlags struct {
	mix, burst, relay, relayPrefetch, worst int
	mixMax, burstIn                         time.Duration
	mode                                    string
}

func (d *delayFlags) register(fs *flag.FlagSet, mixMax, burstIn time.Duration) {
	fs.IntVar(&d.mix, "mix", 1000, "delay: messages in the mix")
	fs.DurationVar(&d.mixMax, "mix-max", mixMax, "delay: longest delay of the mix")
	fs.IntVar(&d.burst, "burst", 2000, "delay: messages due at the same instant")
	fs.DurationVar(&d.burstIn, "burst-in", burstIn, "delay: how far ahead the burst is due")
	fs.IntVar(&d.relay, "relay", 16, "delay: relay concurrency")
	fs.IntVar(&d.relayPrefetch, "relay-prefetch", 64, "delay: relay prefetch")
	fs.StringVar(&d.mode, "mode", "exact", "delay: exact or round-up")
	fs.IntVar(&d.worst, "worst", 0, "delay: also print the N latest messages of the mix and their delays")
}

func (d *delayFlags) options() loadgen.DelayOptions {
	return loadgen.DelayOptions{Mix: d.mix, MixMax: d.mixMax, Burst: d.burst, BurstIn: d.burstIn, Relay: d.relay, Prefetch: d.relayPrefetch,
		Mode: topology.DelayMode(d.mode), Baseline: 200, Margin: 20 * time.Millisecond, Tolerance: 2 * time.Millisecond, Worst: d.worst}
}

type peerFlags struct {
	bin           string
	concurrencies string
	tasks         int
	db            int
}

func (f *peerFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.bin, "bin", "", "the built bench/asynq binary (default: build it from the source tree into a temp dir)")
	fs.StringVar(&f.concurrencies, "concurrency", "64,256", "asynq server concurrencies, comma-separated: one run each")
	fs.IntVar(&f.tasks, "tasks", 8000, "tasks enqueued per round")
	fs.IntVar(&f.db, "db", 15, "the peer's own Redis database (never the one REDIS_URL names for msgpulse and the tests); only its own keys are deleted there")
}

func (f *peerFlags) options(c common) (loadgen.PeerOptions, error) {
	o := loadgen.PeerOptions{Bin: f.bin, Tasks: f.tasks, Rounds: c.rounds, DB: f.db}
	for _, v := range strings.Split(f.concurrencies, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 1 {
			return o, fmt.Errorf("--concurrency %q: want positive numbers, comma-separated", f.concurrencies)
		}
		o.Concurrencies = append(o.Concurrencies, n)
	}
	if f.tasks < 1 || f.db < 0 {
		return o, fmt.Errorf("--tasks must be positive and --db a database number")
	}
	return o, nil
}

type levelsFlags struct {
	backlog, codes, consumerC int
	codeRate                  float64
	smtpLatency, wait         time.Duration
}

func (f *levelsFlags) register(fs *flag.FlagSet, prefix string) {
	fs.IntVar(&f.backlog, prefix+"backlog", 8000, "levels: normal notices flooded through the API before the second round of codes")
	fs.IntVar(&f.codes, prefix+"codes", 100, "levels: verification codes in each phase")
	fs.Float64Var(&f.codeRate, prefix+"code-rate", 20, "levels: codes per second")
	fs.DurationVar(&f.smtpLatency, prefix+"smtp-latency", 20*time.Millisecond, "levels: time the SMTP sink takes per mail")
	fs.IntVar(&f.consumerC, prefix+"consumer-concurrency", 16, "levels: the consumer's CONCURRENCY (and SMTP_POOL_SIZE)")
	fs.DurationVar(&f.wait, prefix+"wait", time.Minute, "levels: longest wait for a phase's codes to arrive")
}

func (f *levelsFlags) options() loadgen.LevelsOptions {
	return loadgen.LevelsOptions{Backlog: f.backlog, Codes: f.codes, CodeRate: f.codeRate, SMTPLatency: f.smtpLatency, ConsumerConcurrency: f.consumerC, Wait: f.wait}
}

func newFlagSet(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("loadgen "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		_, _ = fmt.Fprintf(stderr, "usage: loadgen %s [flags]\n\n%s\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

const (
	synAPI = `Drives the API over keep-alive HTTP with --concurrency connections, with
recipients unique per request and client IPs spread so that frequency
control does not reject the load (the per-key and per-channel caps are
raised through config; the report says so). Reports accepted req/s, status
code counts and latency p50/p90/p99/max (HDR histogram). --max: closed loop
for --duration; --rate R: open loop, latency measured from each request's
intended send time (coordinated omission corrected); neither: max, then
the fixed rate at half of it. The api is the real binary, its peak RSS
sampled under max load. --target URL drives an existing deployment
instead, with the key in $LOADGEN_API_KEY (capacity planning; use one whose
SMTP/SMS go to a sink: every request sends a real code).
`
	synE2E = `Starts the real api and consumer against a built-in SMTP sink and SMS
webhook sink, sends verification codes at --rate for --duration, and
follows each accepted one: received by a sink (latency from the 202),
dead-lettered (maxlen, i.e. dropped by a full queue, counted apart) or
expired (read from the DLQs), or lost. Counts the 503s (admission: the
queue is near its bound) and those without Retry-After. Exits 1 if any was
lost. Reports peak RSS of api and consumer.
`
	synConsumer = `Prefills --messages notices (the normal level, where the API puts them)
and measures one consumer's messages/s: with a no-op provider
(in-process), the consumer binary with the SMS log provider (a line on
stdout per message: the match for a peer's no-op worker), with a provider
taking --provider-latency per send (the consumer binary with the webhook
SMS provider against a sink that answers after that long), and with the
SMTP provider against a lean SMTP sink (the consumer binary). --baseline
adds raw consume+ack (amqp091-go, same queue and prefetch, multiple acks)
and the ratio.
`
	synDelay = `Measures delivered − due for a burst of messages due at the same instant
and for a mix of delays, with the relay and a recording consumer in this
process, against the same path with no delay.
`
	synHeadline = `Starts the real api and consumer (mail, WeCom) against the SMTP sink and the
WeCom test server, and for each --kinds offers --start recipients/s, then
--factor times more per step, each held for --step, until a step does not
hold: p99 from the API's 202 to the sink under --p99, nothing lost, and the
API accepting at least 99% of the offered rate: recipients accepted over
the step, or over the time sending them took when the offered load fell
behind (not until the last answer, which is latency). Reports every step
and the best offered rate that held. Mail: single sends; WeCom: batches of
--batch; raw (from --raw-start messages/s): the broker path alone, a
confirmed publish to a quorum queue consumed in-process, timed from
confirm to delivery, the baseline the other two are read against.
`
	synLevels = `Starts the real api and consumer against an SMTP sink that takes
--smtp-latency per mail, requests --codes verification codes at --code-rate
with nothing else queued, then floods --backlog normal notices through
POST /api/messages/send and requests the codes again while they drain.
Reports request → SMTP sink latency of the codes in both phases (one run,
one deployment) and the depth of queue.mail.normal around the second.
`
	synPeer = `Runs hibiken/asynq's no-op worker (bench/asynq, a module of its own) once
per --concurrency, in Redis database --db of REDIS_URL's server (its own:
it deletes only what its interrupted runs left there, and reports other
keys it finds), and reads from /proc the CPU time of its process and of
Redis around each round's enqueue and timed part, per task. Each timed
part starts once the machine is quiet (--quiet-wait), as the consumer
binary's runs in 'loadgen consumer' do. make bench runs it alone before
anything else, and again after 'loadgen all', and prints both.
`
	synAll = `Runs api (max, then half of max), consumer, e2e, delay and levels, with
--baseline on by default; what make bench runs. --skip names modes to leave out.
`
	synReport = `Renders BENCHMARKS.md (or --out) from the JSON of 'loadgen all --json',
with the Go benchmark medians of --gobench (go test -bench output).
`
)

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		_, _ = fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	mode, rest := args[0], args[1:]
	o := &loadgen.Options{
		AMQPURL:       env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		ManagementURL: env("RABBITMQ_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15672"),
		RedisURL:      env("REDIS_URL", "redis://127.0.0.1:6379/0"),
		RedisMode:     env("REDIS_MODE", "single"),
		Progress:      stderr,
	}
	var c common
	var (
		af apiFlags
		ef e2eFlags
		cf consumerFlags
		df delayFlags
		lf levelsFlags
		hf headlineFlags
		pf peerFlags
	)
	var fs *flag.FlagSet
	skip := ""
	switch mode {
	case "api":
		fs = newFlagSet(mode, synAPI, stderr)
		c.register(fs, false)
		af.register(fs, true, 10*time.Second)
	case "e2e":
		fs = newFlagSet(mode, synE2E, stderr)
		c.register(fs, false)
		ef.register(fs, "", 10*time.Second)
	case "consumer":
		fs = newFlagSet(mode, synConsumer, stderr)
		c.register(fs, false)
		cf.register(fs, "", 0)
	case "delay":
		fs = newFlagSet(mode, synDelay, stderr)
		c.register(fs, false)
		df.register(fs, 3*time.Minute, 10*time.Second)
	case "headline":
		fs = newFlagSet(mode, synHeadline, stderr)
		c.register(fs, false)
		hf.register(fs)
	case "peer":
		fs = newFlagSet(mode, synPeer, stderr)
		c.register(fs, false)
		pf.register(fs)
	case "levels":
		fs = newFlagSet(mode, synLevels, stderr)
		c.register(fs, false)
		lf.register(fs, "")
	case "all":
		fs = newFlagSet(mode, synAll, stderr)
		c.register(fs, true)
		af.register(fs, false, 5*time.Second)
		ef.register(fs, "e2e-", 10*time.Second)
		cf.register(fs, "consumer-", 200*time.Millisecond)
		df.register(fs, 30*time.Second, 5*time.Second)
		lf.register(fs, "levels-")
		fs.StringVar(&skip, "skip", "", "comma-separated modes to leave out (api, consumer, e2e, delay, levels)")
	case "report":
		return report(rest, stdout, stderr)
	case "baseline-server":
		return baselineServer(rest, stderr)
	default:
		_, _ = fmt.Fprintf(stderr, "loadgen: unknown mode %q\n\n%s", mode, usage)
		return 2
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		_, _ = fmt.Fprintf(stderr, "loadgen %s: unexpected argument %q (flags come after the mode)\n", mode, fs.Arg(0))
		return 2
	}
	if msg := validate(mode, c, af, ef, cf, lf); msg != "" {
		_, _ = fmt.Fprintf(stderr, "loadgen %s: %s\n", mode, msg)
		return 2
	}
	ho, err := hf.options()
	if err != nil && mode == "headline" {
		_, _ = fmt.Fprintf(stderr, "loadgen %s: %v\n", mode, err)
		return 2
	}
	po, err := pf.options(c)
	if err != nil && mode == "peer" {
		_, _ = fmt.Fprintf(stderr, "loadgen %s: %v\n", mode, err)
		return 2
	}
	o.BinDir, o.ExtraEnv, o.ProfileDir, o.QuietWait = c.binDir, c.extraEnv, c.profile, c.quietWait
	if c.profile != "" {
		if err := os.MkdirAll(c.profile, 0o750); err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen:", err)
			return 2
		}
	}
	defer o.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	rep := loadgen.Report{Command: "loadgen " + strings.Join(args, " "), Started: time.Now().UTC(), Machine: loadgen.Describe(ctx, *o)}
	failed := false
	do := func(name string, f func() error) {
		if (mode != name && mode != "all") || strings.Contains(","+skip+",", ","+name+",") || ctx.Err() != nil {
			return
		}
		if err := f(); err != nil {
			failed = true
			rep.Errors = append(rep.Errors, name+": "+err.Error())
			_, _ = fmt.Fprintf(stderr, "loadgen %s: %v\n", name, err)
		}
	}
	do("api", func() (err error) {
		rep.API, err = loadgen.API(ctx, o, af.options(c))
		return err
	})
	do("consumer", func() (err error) {
		rep.Consumer, err = loadgen.Consumer(ctx, o, cf.options(c))
		return err
	})
	do("e2e", func() (err error) {
		rep.E2E, err = loadgen.E2E(ctx, o, ef.options(c))
		return err
	})
	do("delay", func() (err error) {
		rep.Delay, err = loadgen.Delay(ctx, o, df.options(), stderr)
		return err
	})
	if mode == "headline" { // not part of all: its steps take minutes each
		do("headline", func() (err error) {
			rep.Headline, err = loadgen.Headline(ctx, o, ho)
			return err
		})
	}
	if mode == "peer" { // not part of all: make bench runs it alone, and after all
		do("peer", func() (err error) {
			rep.Peers, err = loadgen.Peer(ctx, o, po)
			return err
		})
	}
	do("levels", func() (err error) {
		rep.Levels, err = loadgen.Levels(ctx, o, lf.options())
		return err
	})
	rep.Targets = loadgen.Evaluate(rep)
	if c.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen:", err)
			return 1
		}
	} else {
		loadgen.WriteText(stdout, rep)
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// validate checks what flag parsing cannot; "" when fine.
func validate(mode string, c common, a apiFlags, e e2eFlags, cf consumerFlags, lf levelsFlags) string {
	switch {
	case c.rounds < 1:
		return "--rounds must be at least 1"
	case (mode == "api" || mode == "all") && (a.concurrency < 1 || a.duration <= 0):
		return "--concurrency and --duration must be positive"
	case mode == "api" && a.rate < 0:
		return "--rate must be positive"
	case mode == "api" && a.endpoint != loadgen.EndpointCodes && a.endpoint != loadgen.EndpointSend && a.endpoint != loadgen.EndpointMix:
		return fmt.Sprintf("--endpoint %q: want codes, send or mix", a.endpoint)
	case mode == "api" && a.target != "" && a.apiKey == "":
		return "--target needs the API key in $LOADGEN_API_KEY"
	case mode == "api" && a.target != "" && c.baseline:
		return "--baseline needs the local broker and Redis; it cannot be combined with --target"
	case (mode == "e2e" || mode == "all") && (e.rate <= 0 || e.duration <= 0 || e.concurrency < 1 || e.smsShare < 0 || e.smsShare > 1):
		return "e2e: --rate, --duration and --concurrency must be positive, --sms-share within 0..1"
	case (mode == "levels" || mode == "all") && (lf.backlog < 1 || lf.codes < 1 || lf.codeRate <= 0 || lf.consumerC < 1 || lf.smtpLatency < 0 || lf.wait <= 0):
		return "levels: --backlog, --codes, --code-rate, --consumer-concurrency and --wait must be positive"
	case (mode == "consumer" || mode == "all") && (cf.messages < 2 || cf.concurrency < 1 || cf.prefetch < 1 || cf.providerC < 1):
		return "consumer: --messages must be at least 2, --concurrency, --prefetch and --provider-concurrency positive"
	}
	return ""
}

func report(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("report", synReport, stderr)
	in := fs.String("in", "", "JSON written by 'loadgen all --json' (required)")
	gobench := fs.String("gobench", "", "go test -bench output to include (medians per benchmark)")
	out := fs.String("out", "BENCHMARKS.md", "file to write; - for stdout")
	wall := fs.String("wall", "", "wall time of the whole run, to print")
	headline := fs.String("headline", "", "JSON written by 'loadgen headline --json' in the same run: its headline section joins the report")
	var peers, alone envFlags
	fs.Func("peer", "JSON written by 'loadgen peer --json' (or by bench/asynq -json): asynq's no-op worker from the same run, printed next to the consumer (repeatable)", func(s string) error { peers = append(peers, s); return nil })
	fs.Func("peer-alone", "JSON written by 'loadgen peer --json' run alone on the same machine minutes apart: --peer is checked against it (repeatable)", func(s string) error { alone = append(alone, s); return nil })
	var cmds envFlags
	fs.Func("command", "a command that produced the numbers, to list (repeatable)", func(s string) error { cmds = append(cmds, s); return nil })
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *in == "" || fs.NArg() > 0 {
		fs.Usage()
		return 2
	}
	b, err := os.ReadFile(*in)
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "loadgen report:", err)
		return 1
	}
	var rep loadgen.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		_, _ = fmt.Fprintf(stderr, "loadgen report: %s: %v\n", *in, err)
		return 1
	}
	if *headline != "" {
		hb, err := os.ReadFile(*headline)
		var hr loadgen.Report
		if err == nil {
			err = json.Unmarshal(hb, &hr)
		}
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen report: --headline:", err)
			return 1
		}
		rep.Headline = hr.Headline
	}
	for _, f := range []struct {
		paths []string
		to    *[]*loadgen.PeerResult
	}{{peers, &rep.Peers}, {alone, &rep.PeersAlone}} {
		for _, path := range f.paths {
			ps, err := loadgen.ReadPeers(path)
			if err != nil {
				_, _ = fmt.Fprintln(stderr, "loadgen report:", err)
				return 1
			}
			*f.to = append(*f.to, ps...)
		}
	}
	rep.Targets = loadgen.Evaluate(rep)
	mi := loadgen.MarkdownInput{Report: rep, Commands: cmds, WallTime: *wall}
	if len(mi.Commands) == 0 {
		mi.Commands = []string{rep.Command}
	}
	if *gobench != "" {
		f, err := os.Open(*gobench)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen report:", err)
			return 1
		}
		mi.GoBench, mi.GoFailed, err = loadgen.ParseGoBench(f)
		_ = f.Close()
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen report:", err)
			return 1
		}
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			_, _ = fmt.Fprintln(stderr, "loadgen report:", err)
			return 1
		}
		defer func() { _ = f.Close() }()
		w = f
	}
	loadgen.WriteMarkdown(w, mi)
	return 0
}

// baselineServer is the hidden mode startBaseline runs.
func baselineServer(args []string, stderr io.Writer) int {
	fs := newFlagSet("baseline-server", "The raw path the api mode's --baseline measures (started by loadgen itself).\n", stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on")
	window := fs.Int("window", 256, "unconfirmed publishes in flight")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := loadgen.ServeBaseline(ctx, loadgen.BaselineConfig{Listen: *listen, AMQPURL: env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		RedisURL: env("REDIS_URL", "redis://127.0.0.1:6379/0"), RedisMode: env("REDIS_MODE", "single"), Prefix: env("REDIS_PREFIX", "loadgen:"), Window: *window},
		func(addr string) { _, _ = fmt.Fprintln(stderr, "baseline listening on", addr) })
	if err != nil {
		_, _ = fmt.Fprintln(stderr, "baseline-server:", err)
		return 1
	}
	return 0
}

type headlineFlags struct {
	start, factor, max float64
	step, p99, drain   time.Duration
	concurrency        int
	consumerC          int
	batch              int
	kinds              string
	rawStart           float64
	targets            string
	refine             int
}

func (h *headlineFlags) register(fs *flag.FlagSet) {
	fs.Float64Var(&h.start, "start", 1000, "headline: first offered rate, recipients/s")
	fs.Float64Var(&h.factor, "factor", 1.5, "headline: each step offers this many times more")
	fs.Float64Var(&h.max, "max", 100000, "headline: highest rate tried, recipients/s")
	fs.DurationVar(&h.step, "step", 60*time.Second, "headline: how long each rate is held")
	fs.DurationVar(&h.p99, "p99", 100*time.Millisecond, "headline: the p99 (202 → sink) a step must hold")
	fs.DurationVar(&h.drain, "drain", 30*time.Second, "headline: longest wait for a step's tail")
	fs.IntVar(&h.concurrency, "concurrency", 64, "headline: HTTP connections")
	fs.IntVar(&h.consumerC, "consumer-concurrency", 64, "headline: the consumer's CONCURRENCY")
	fs.IntVar(&h.batch, "batch", 1000, "headline: WeCom recipients per batch")
	fs.StringVar(&h.kinds, "kinds", "mail,wecom,raw", "headline: which kinds to step, in order (raw: the broker path alone, confirmed publish → consume, the baseline)")
	fs.Float64Var(&h.rawStart, "raw-start", 2000, "headline: first offered rate of the raw kind, messages/s")
	fs.StringVar(&h.targets, "targets", "mail=3000,wecom=10000", "headline: kind=rate, the first offered rate of those kinds (issue 22's targets, so that the target itself is a step: up by --factor from it while steps hold, else down); others start at --start")
	fs.IntVar(&h.refine, "refine", 2, "headline: steps between the best rate that held and the lowest that did not (geometric means)")
}

func (h *headlineFlags) options() (loadgen.HeadlineOptions, error) {
	targets := map[string]float64{}
	for _, kv := range strings.Split(h.targets, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		r, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if !ok || err != nil || r <= 0 {
			return loadgen.HeadlineOptions{}, fmt.Errorf("--targets: %q: want kind=rate, the rate positive", kv)
		}
		targets[strings.TrimSpace(k)] = r
	}
	return loadgen.HeadlineOptions{Start: h.start, Factor: max(h.factor, 1.01), Max: h.max, Step: h.step, P99: h.p99, Drain: h.drain,
		Concurrency: h.concurrency, ConsumerConcurrency: h.consumerC, Batch: max(h.batch, 1), Kinds: strings.Split(h.kinds, ","), RawStart: h.rawStart,
		Targets: targets, Refine: max(h.refine, 0)}, nil
}
