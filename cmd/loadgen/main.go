// Command loadgen measures msgpulse on this machine and prints the numbers:
// API latency, consumer throughput and delay accuracy. Each run uses a
// throwaway vhost and Redis prefix.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/msgpulse/msgpulse/internal/loadgen"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func main() { os.Exit(run()) }

const usage = `usage: loadgen [flags] api|consumer|delay|all

  api       POST /api/messages/send latency at -rate req/s vs GET /healthz
  consumer  messages/s of one consumer: no-op provider vs SMTP server
  delay     delivered − due: a burst due at once, and a mix of delays
  all       all three

Broker and Redis come from AMQP_URL, RABBITMQ_MANAGEMENT_URL and REDIS_URL
(local defaults).
`

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func run() int {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(os.Stderr, usage, "\nFlags:\n"); fs.PrintDefaults() }
	rate := fs.Int("rate", 200, "api: requests per second")
	dur := fs.Duration("duration", 10*time.Second, "api: duration per round")
	rounds := fs.Int("rounds", 3, "api, consumer: rounds (medians are reported)")
	msgs := fs.Int("messages", 5000, "consumer: messages per round")
	conc := fs.Int("concurrency", 16, "consumer: CONCURRENCY")
	mix := fs.Int("mix", 1000, "delay: messages in the mix")
	mixMax := fs.Duration("mix-max", 3*time.Minute, "delay: longest delay of the mix")
	burst := fs.Int("burst", 2000, "delay: messages due at the same instant")
	burstIn := fs.Duration("burst-in", 10*time.Second, "delay: how far ahead the burst is due")
	relay := fs.Int("relay", 16, "delay: relay concurrency")
	relayPrefetch := fs.Int("relay-prefetch", 64, "delay: relay prefetch")
	mode := fs.String("mode", "exact", "delay: exact or round-up")
	worst := fs.Int("worst", 0, "delay: also print the N latest messages of the mix and their delays")
	if err := fs.Parse(os.Args[1:]); err != nil || fs.NArg() != 1 {
		if err == nil {
			fs.Usage()
		}
		return 2
	}
	o := loadgen.Options{
		AMQPURL:       env("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
		ManagementURL: env("RABBITMQ_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15672"),
		RedisURL:      env("REDIS_URL", "redis://127.0.0.1:6379/0"),
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	what := fs.Arg(0)
	var err error
	do := func(name string, f func() error) {
		if err == nil && (what == name || what == "all") {
			err = f()
			fmt.Println()
		}
	}
	do("api", func() error {
		return loadgen.API(ctx, o, loadgen.APIOptions{Rate: *rate, Duration: *dur, Rounds: *rounds}, os.Stdout)
	})
	do("consumer", func() error {
		return loadgen.Consumer(ctx, o, loadgen.ConsumerOptions{Messages: *msgs, Concurrency: *conc, Rounds: *rounds}, os.Stdout)
	})
	do("delay", func() error {
		return loadgen.Delay(ctx, o, loadgen.DelayOptions{Mix: *mix, MixMax: *mixMax, Burst: *burst, BurstIn: *burstIn, Relay: *relay, Prefetch: *relayPrefetch,
			Mode: topology.DelayMode(*mode), Baseline: 200, Margin: 20 * time.Millisecond, Tolerance: 2 * time.Millisecond, Worst: *worst}, os.Stdout)
	})
	switch what {
	case "api", "consumer", "delay", "all":
	default:
		fmt.Fprintf(os.Stderr, "loadgen: unknown measurement %q\n\n", what)
		fs.Usage()
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		return 1
	}
	return 0
}
