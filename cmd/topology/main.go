// Command topology declares, plans and exports msgpulse's RabbitMQ topology.
package main

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/declare"
)

func main() {
	os.Exit(cli.Main(cli.Command[config.Topology]{
		Name:      "topology",
		Synopsis:  declare.Usage,
		Load:      config.LoadTopology,
		TakesArgs: true,
		Quiet:     true,
		Run: func(ctx context.Context, cfg config.Topology, log *zap.Logger, args []string) int {
			return declare.Main(ctx, cfg, log, args, os.Stdout, os.Stderr)
		},
	}))
}
