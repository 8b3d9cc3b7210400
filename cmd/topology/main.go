// Command topology declares, plans and exports msgpulse's RabbitMQ topology.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/declare"
	"github.com/msgpulse/msgpulse/internal/logging"
)

func main() { os.Exit(run()) }

func run() int {
	cfg, env := config.LoadTopology(os.LookupEnv)
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(os.Stdout, declare.Usage, "\nEnvironment:\n")
		env.Usage(os.Stdout)
		return 0
	}
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "topology:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "topology:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return declare.Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
}
