// Command dlq is the on-call tool for msgpulse's dead-letter queues: stats,
// list, show, replay and purge, without ever losing a dead letter. See
// docs/oncall.md.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/logging"
)

func main() { os.Exit(run()) }

func run() int {
	cfg, env := config.LoadDLQ(os.LookupEnv)
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(os.Stdout, dlq.Usage, "\nEnvironment:\n")
		env.Usage(os.Stdout)
		return dlq.ExitOK
	}
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "dlq:", err)
		return dlq.ExitUsage
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "dlq:", err)
		return dlq.ExitUsage
	}
	defer func() { _ = log.Sync() }()
	// SIGINT stops a replay or purge between two messages; whatever it
	// holds goes back to the DLQ.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return dlq.Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
}
