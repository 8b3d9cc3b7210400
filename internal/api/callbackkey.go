package api

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/cli"
	"github.com/msgpulse/msgpulse/internal/config"
)

// Synopsis is cmd/api's -h text above the environment variables.
const Synopsis = `usage: api
       api callback-key -tenant NAME

Serves the msgpulse HTTP API (api/openapi.yaml). Configured by environment variables.

callback-key prints the key that signs tenant NAME's status callbacks (its
CALLBACK_SECRETS entry, else derived from CALLBACK_SECRET), for the operator
to hand to that tenant; run it with the API's environment. It never prints
CALLBACK_SECRET or CODE_SECRET.
`

// Command is cmd/api's Run: without arguments it serves until ctx ends;
// "callback-key -tenant NAME" prints that tenant's callback key.
func Command(ctx context.Context, cfg config.API, log *zap.Logger, args []string) int {
	if len(args) == 0 {
		return cli.Service("api", Run)(ctx, cfg, log, nil)
	}
	if args[0] != "callback-key" {
		fmt.Fprintf(os.Stderr, "api: unknown command %q (see api -h)\n", args[0])
		return cli.ExitUsage
	}
	return PrintCallbackKey(os.Stdout, os.Stderr, cfg.CallbackKeys, args[1:])
}

// PrintCallbackKey writes the callback key of the tenant named by -tenant,
// one line, to w.
func PrintCallbackKey(w, errw io.Writer, keys callbackkey.Keys, args []string) int {
	fs := flag.NewFlagSet("callback-key", flag.ContinueOnError)
	fs.SetOutput(errw)
	tenant := fs.String("tenant", "", "the tenant (an API key name's part before /, else default)")
	if err := fs.Parse(args); err != nil {
		return cli.ExitUsage
	}
	if *tenant == "" || fs.NArg() > 0 {
		fmt.Fprintln(errw, "usage: api callback-key -tenant NAME")
		return cli.ExitUsage
	}
	key, err := keys.For(*tenant)
	if errors.Is(err, callbackkey.ErrNoKey) {
		fmt.Fprintf(errw, "api callback-key: %v\n", err)
		return cli.ExitError
	}
	fmt.Fprintln(w, key)
	return cli.ExitOK
}
