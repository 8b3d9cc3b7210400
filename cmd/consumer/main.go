// Command consumer sends queued mail, SMS and WeCom messages: it consumes the main queues
// with manual acks, claims each message in Redis so it is sent at most once,
// retries through the delay queues and dead-letters what cannot be sent.
// It also runs the delay relay (RELAY=on). Run as many as you need.
package main

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
)

func main() {
	os.Exit(cli.Main(cli.Command[config.Consumer]{
		Name:     "consumer",
		Synopsis: "usage: consumer\n\nSends queued mail, SMS and WeCom messages, and relays delayed messages. Configured by environment variables.\n",
		Load:     config.LoadConsumer,
		Run: cli.Service("consumer", func(ctx context.Context, cfg config.Consumer, log *zap.Logger) error {
			return dispatch.Run(ctx, cfg, log)
		}),
	}))
}
