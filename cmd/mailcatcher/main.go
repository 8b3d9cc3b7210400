// Command mailcatcher is a local SMTP server that keeps what it receives:
// it prints each message to stdout and shows it on a web page, standing in
// for the recipients' inboxes during development (make run).
package main

import (
	"context"
	"os"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
)

const usage = `mailcatcher: a local SMTP server for development. It accepts every
message, prints it here and shows it on a web page; it delivers nothing.

Usage: mailcatcher
`

func main() {
	os.Exit(cli.Main(cli.Command[config.Mailcatcher]{
		Name:     "mailcatcher",
		Synopsis: usage,
		Load:     config.LoadMailcatcher,
		Run: cli.Service("mailcatcher", func(ctx context.Context, cfg config.Mailcatcher, log *zap.Logger) error {
			return mailcatcher.Run(ctx, mailcatcher.RunConfig{
				Catcher:  mailcatcher.Config{SMTPAddr: cfg.SMTPAddr, Max: cfg.Max, Username: cfg.Username, Password: cfg.Password},
				HTTPAddr: cfg.HTTPAddr,
				Out:      os.Stdout,
			}, log)
		}),
	}))
}
