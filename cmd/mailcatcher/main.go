// Command mailcatcher is a local SMTP server that keeps what it receives:
// it prints each message to stdout and shows it on a web page, standing in
// for the recipients' inboxes during development (make run).
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
)

const usage = `mailcatcher: a local SMTP server for development. It accepts every
message, prints it here and shows it on a web page; it delivers nothing.

Usage: mailcatcher
`

func main() { os.Exit(run()) }

func run() int {
	cfg, env := config.LoadMailcatcher(os.LookupEnv)
	args := os.Args[1:]
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		_, _ = fmt.Fprint(os.Stdout, usage, "\nEnvironment:\n")
		env.Usage(os.Stdout)
		return 0
	}
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "mailcatcher: unexpected argument %q (try -h)\n", args[0])
		return 2
	}
	if err := env.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "mailcatcher:", err)
		return 2
	}
	log, err := logging.New(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mailcatcher:", err)
		return 2
	}
	defer func() { _ = log.Sync() }()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = mailcatcher.Run(ctx, mailcatcher.RunConfig{
		Catcher: mailcatcher.Config{
			SMTPAddr: cfg.SMTPAddr,
			Max:      cfg.Max,
			Username: cfg.Username,
			Password: cfg.Password,
		},
		HTTPAddr: cfg.HTTPAddr,
		Out:      os.Stdout,
	}, log)
	if err != nil {
		log.Error("mailcatcher stopped", zap.Error(err))
		return 1
	}
	return 0
}
