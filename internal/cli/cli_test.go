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
