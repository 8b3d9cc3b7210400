// Command consumer sends queued mail and SMS: it consumes the main queues
// with manual acks, claims each message in Redis so it is sent at most once,
// retries through the delay queues and dead-letters what cannot be sent.
// It also runs the delay relay (RELAY=on). Run as many as you need.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/logging"
)

func main() { os.Exit(run()) }

func run() int {
	cfg, env := config.LoadConsumer(os.LookupEnv)
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		fmt.Print("usage: consumer\n\nSends queued mail and SMS, and relays delayed messages. Configured by environment:\n\n")
		env.Usage(os.Stdout)
		return 0
	}
	if len(os.Args) > 1 {
		fmt.Fprintf(os.Stderr, "consumer: unexpected argument %q (configure with environment variables; see consumer -h)\n", os.Args[1])
		return 2
	}
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "consumer:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := dispatch.Run(ctx, cfg, log); err != nil {
		log.Error("consumer stopped", zap.Error(err))
		return 1
	}
	return 0
}
