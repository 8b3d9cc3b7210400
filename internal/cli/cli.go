// Package cli is the entry plumbing every msgpulse command shares: -h
// prints the synopsis and the environment variables, a bad variable or an
// unexpected argument exits 2 with one line naming it, then comes a logger
// from LOG_LEVEL/LOG_FORMAT, a service's garbage collector target
// (GCTuner), and a context that SIGINT or SIGTERM cancels.
//
// It never decides what a command does, and it is the only place besides a
// main that turns outcomes into exit codes.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/logging"
)

// Exit codes shared by the commands.
const (
	ExitOK    = 0
	ExitError = 1
	ExitUsage = 2
)

// Config is what every program's configuration provides.
type Config interface {
	LogSettings() (level, format string)
}

// GCTuner is a Config that sets its process's garbage collector target: a
// long-running service whose default differs from Go's (config.GC).
type GCTuner interface {
	GCPercent() int
}

// Command describes one program.
type Command[C Config] struct {
	Name     string
	Synopsis string // printed by -h, above the environment variables
	Load     func(lookup func(string) (string, bool)) (C, *envconf.Loader)
	// TakesArgs: the command reads arguments (subcommands, flags);
	// otherwise any argument is a usage error.
	TakesArgs bool
	// Quiet: a command-line tool, silent on stderr unless something is
	// wrong (warnings and errors) or -v asks for its info lines. -v is
	// taken out of the arguments before Run sees them.
	Quiet bool
	Run   func(ctx context.Context, cfg C, log *zap.Logger, args []string) int
}

// Main runs c with the process's arguments and environment and returns the
// exit code.
func Main[C Config](c Command[C]) int {
	return main(c, os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)
}

func main[C Config](c Command[C], args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	cfg, env := c.Load(lookup)
	level, format := cfg.LogSettings()
	if c.Quiet {
		var verbose bool
		if args, verbose = takeVerbose(args); !verbose && (level == "debug" || level == "info") {
			level = "warn"
		}
	}
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		fmt.Fprint(stdout, c.Synopsis, "\nEnvironment:\n")
		env.Usage(stdout)
		return ExitOK
	}
	if len(args) > 0 && !c.TakesArgs {
		fmt.Fprintf(stderr, "%s: unexpected argument %q (configure with environment variables; see %s -h)\n", c.Name, args[0], c.Name)
		return ExitUsage
	}
	if err := env.Err(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return ExitUsage
	}
	log, err := logging.NewTo(stderr, level, format)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return ExitUsage
	}
	defer func() { _ = log.Sync() }()
	if g, ok := any(cfg).(GCTuner); ok {
		debug.SetGCPercent(g.GCPercent())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return c.Run(ctx, cfg, log, args)
}

// takeVerbose removes -v (or --verbose) wherever it is among args.
func takeVerbose(args []string) ([]string, bool) {
	out := make([]string, 0, len(args))
	verbose := false
	for _, a := range args {
		if a == "-v" || a == "--verbose" || a == "-verbose" {
			verbose = true
			continue
		}
		out = append(out, a)
	}
	return out, verbose
}

// Service adapts a long-running program's Run: an error is logged and
// exits 1; a return after the context ended is a clean stop.
func Service[C Config](name string, run func(context.Context, C, *zap.Logger) error) func(context.Context, C, *zap.Logger, []string) int {
	return func(ctx context.Context, cfg C, log *zap.Logger, _ []string) int {
		if err := run(ctx, cfg, log); err != nil {
			log.Error(name+" stopped", zap.Error(err))
			return ExitError
		}
		return ExitOK
	}
}
