// Command dlq is the on-call tool for msgpulse's dead-letter queues: stats,
// list, show, replay and purge, without ever losing a dead letter. See
// docs/oncall.md.
package main

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dlq"
)

func main() {
	os.Exit(cli.Main(cli.Command[config.DLQ]{
		Name:      "dlq",
		Synopsis:  dlq.Usage,
		Load:      config.LoadDLQ,
		TakesArgs: true,
		Quiet:     true,
		// SIGINT stops a replay or purge between two messages; whatever it
		// holds goes back to the DLQ.
		Run: func(ctx context.Context, cfg config.DLQ, log *zap.Logger, args []string) int {
			return dlq.Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
		},
	}))
}
