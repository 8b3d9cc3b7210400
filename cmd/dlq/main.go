// Command dlq is the on-call tool for msgpulse's dead-letter queues: stats,
// list, show, replay and purge, without ever losing a dead letter. See
// docs/oncall.md.
package main

import (
	"os"

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
		Run:       dlq.Command,
	}))
}
