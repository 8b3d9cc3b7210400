// Command topology declares, plans and exports msgpulse's RabbitMQ topology.
package main

import (
	"os"

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
		Run:       declare.Command,
	}))
}
