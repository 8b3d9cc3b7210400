// Command api serves msgpulse's HTTP API: verification codes and messages,
// with Redis frequency control and confirmed publishing to RabbitMQ.
package main

import (
	"os"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
)

func main() {
	os.Exit(cli.Main(cli.Command[config.API]{
		Name:     "api",
		Synopsis: "usage: api\n\nServes the msgpulse HTTP API (api/openapi.yaml). Configured by environment variables.\n",
		Load:     config.LoadAPI,
		Run:      cli.Service("api", api.Run),
	}))
}
