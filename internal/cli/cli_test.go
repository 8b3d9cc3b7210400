package cli

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envconf"
)

type cfg struct{ level, format string }

func (c cfg) LogSettings() (string, string) { return c.level, c.format }

func load(lookup func(string) (string, bool)) (cfg, *envconf.Loader) {
	l := envconf.New(lookup)
	return cfg{l.Enum("LOG_LEVEL", "info", []string{"info", "debug"}, "level"), l.Enum("LOG_FORMAT", "json", []string{"json", "console"}, "format")}, l
}

func TestMain(t *testing.T) {
	t.Parallel()
	ran := 0
	cmd := Command[cfg]{Name: "demo", Synopsis: "usage: demo\n", Load: load,
		Run: func(_ context.Context, _ cfg, _ *zap.Logger, args []string) int { ran++; return len(args) }}
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		takes   bool
		code    int
		out     string
		errText string
	}{
		{name: "help", args: []string{"-h"}, code: ExitOK, out: "LOG_FORMAT"},
		{name: "bad variable", env: map[string]string{"LOG_LEVEL": "loud"}, code: ExitUsage, errText: `demo: LOG_LEVEL="loud": must be one of`},
		{name: "unexpected argument", args: []string{"x"}, code: ExitUsage, errText: `unexpected argument "x"`},
		{name: "runs", code: 0},
		{name: "passes arguments", args: []string{"a", "b"}, takes: true, code: 2},
	} {
		var out, errOut bytes.Buffer
		c := cmd
		c.TakesArgs = tc.takes
		got := main(c, tc.args, envconf.FromMap(tc.env), &out, &errOut)
		require.Equal(t, tc.code, got, tc.name)
		require.Contains(t, out.String(), tc.out, tc.name)
		require.Contains(t, errOut.String(), tc.errText, tc.name)
	}
	require.Equal(t, 2, ran)
	svc := Service("demo", func(context.Context, cfg, *zap.Logger) error { return errors.New("boom") })
	require.Equal(t, ExitError, svc(context.Background(), cfg{}, zap.NewNop(), nil))
}

// A quiet command (a tool such as dlq or topology) prints nothing on stderr
// for a run that went well; warnings still show, and -v, wherever it is,
// brings the info lines back without reaching Run.
func TestQuietCommand(t *testing.T) {
	t.Parallel()
	var gotArgs []string
	cmd := Command[cfg]{Name: "tool", Synopsis: "usage: tool\n", Load: load, TakesArgs: true, Quiet: true,
		Run: func(_ context.Context, _ cfg, log *zap.Logger, args []string) int {
			gotArgs = args
			log.Info("broker connected")
			if len(args) > 0 && args[0] == "warn" {
				log.Warn("something is wrong")
			}
			return ExitOK
		}}
	for _, tc := range []struct {
		name     string
		args     []string
		env      map[string]string
		wantArgs []string
		shown    []string
		hidden   []string
	}{
		{name: "quiet", args: []string{"stats"}, wantArgs: []string{"stats"}, hidden: []string{"broker connected"}},
		{name: "quiet at debug too", args: []string{"stats"}, env: map[string]string{"LOG_LEVEL": "debug"}, wantArgs: []string{"stats"}, hidden: []string{"broker connected"}},
		{name: "warnings show", args: []string{"warn"}, wantArgs: []string{"warn"}, shown: []string{"something is wrong"}, hidden: []string{"broker connected"}},
		{name: "-v first", args: []string{"-v", "stats"}, wantArgs: []string{"stats"}, shown: []string{"broker connected"}},
		{name: "-v last", args: []string{"stats", "--json", "-v"}, wantArgs: []string{"stats", "--json"}, shown: []string{"broker connected"}},
		{name: "--verbose", args: []string{"--verbose", "stats"}, wantArgs: []string{"stats"}, shown: []string{"broker connected"}},
	} {
		var out, errOut bytes.Buffer
		require.Equal(t, ExitOK, main(cmd, tc.args, envconf.FromMap(tc.env), &out, &errOut), tc.name)
		require.Equal(t, tc.wantArgs, gotArgs, tc.name)
		for _, s := range tc.shown {
			require.Contains(t, errOut.String(), s, tc.name)
		}
		for _, s := range tc.hidden {
			require.NotContains(t, errOut.String(), s, tc.name)
		}
		if len(tc.shown) == 0 {
			require.Empty(t, errOut.String(), tc.name)
		}
	}
	// A service (not Quiet) logs its info lines as before.
	var errOut bytes.Buffer
	svc := cmd
	svc.Quiet = false
	require.Equal(t, ExitOK, main(svc, []string{"stats"}, envconf.FromMap(nil), &bytes.Buffer{}, &errOut))
	require.Contains(t, errOut.String(), "broker connected")
}
