// Command api serves msgpulse's HTTP API: verification codes and messages,
// with Redis frequency control and confirmed publishing to RabbitMQ. Its
// callback-key command prints a tenant's callback key.
package main

import (
	"os"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
)

func main() {
	os.Exit(cli.Main(cli.Command[config.API]{
		Name:      "api",
		Synopsis:  api.Synopsis,
		Load:      config.LoadAPI,
		TakesArgs: true,
		Run:       api.Command,
	}))
}
