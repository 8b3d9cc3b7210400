// Command api serves msgpulse's HTTP API: verification codes and messages,
// with Redis frequency control and confirmed publishing to RabbitMQ.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/logging"
)

func main() { os.Exit(run()) }

func run() int {
	cfg, env := config.LoadAPI(os.LookupEnv)
	if len(os.Args) > 1 && (os.Args[1] == "-h" || os.Args[1] == "--help" || os.Args[1] == "help") {
		fmt.Print("usage: api\n\nServes the msgpulse HTTP API (see api/openapi.yaml). Configured by environment:\n\n")
		env.Usage(os.Stdout)
		return 0
	}
	if len(os.Args) > 1 {
		fmt.Fprintf(os.Stderr, "api: unexpected argument %q (configure with environment variables; see api -h)\n", os.Args[1])
		return 2
	}
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "api:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := api.Run(ctx, cfg, log); err != nil {
		log.Error("api stopped", zap.Error(err))
		return 1
	}
	return 0
}
