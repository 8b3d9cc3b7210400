package startup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/startup"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// setup is a Config on this test's vhost and Redis.
func setup(t *testing.T) startup.Config {
	t.Helper()
	if testing.Short() {
		t.Skip("needs RabbitMQ and Redis")
	}
	b, r := testenv.NewBroker(t), testenv.NewRedis(t)
	return startup.Config{
		CodeSecret: strings.Repeat("k", 32),
		Model:      testenv.Topology(),
		Templates:  config.Templates{DefaultLocale: "en"},
		RedisMode:  r.Mode, RedisURL: r.URL, RedisTimeout: time.Second,
		AMQPURL: b.URL, ConnectionName: "msgpulse-startup-test",
	}
}

func TestOpenStartsAndCloseStops(t *testing.T) {
	cfg := setup(t)
	ctx := testenv.Context(t, 30*time.Second)
	b, err := startup.Open(ctx, cfg, zap.NewNop())
	require.NoError(t, err)
	require.NotNil(t, b.Keys)
	require.NotNil(t, b.Templates)
	require.NoError(t, b.Redis.Ping(ctx).Err())
	testenv.WaitFor(t, 10*time.Second, "the session connects", func() bool {
		_, ok := b.Session.Current()
		return ok
	})
	mfs, err := b.Registry.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	require.True(t, names["msgpulse_broker_node_leaves_total"], "both programs report node leaves")
	require.True(t, names["go_goroutines"], "a fresh registry has the Go collector")

	stopped := make(chan struct{})
	b.Go(func(ctx context.Context) { <-ctx.Done(); close(stopped) })
	_, err = b.RateLimits("startup-test:", time.Minute)
	require.NoError(t, err)
	b.Close()
	select {
	case <-stopped:
	default:
		t.Fatal("Close returned before a goroutine on Background ended")
	}
	require.Error(t, b.Redis.Ping(context.Background()).Err(), "Close closes Redis")
}

func TestOpenRefuses(t *testing.T) {
	cfg := setup(t)
	for name, tc := range map[string]struct {
		change func(*startup.Config)
		want   string
	}{
		"no connection name":               {func(c *startup.Config) { c.ConnectionName = "" }, "ConnectionName is required"},
		"a dev secret without its warning": {func(c *startup.Config) { c.CodeSecretIsDev = true }, "DevSecretWarning"},
		"a short secret":                   {func(c *startup.Config) { c.CodeSecret = "short" }, "CODE_SECRET"},
		"a missing templates dir":          {func(c *startup.Config) { c.Templates.Dir = t.TempDir() + "/none" }, "TEMPLATES_DIR"},
		"a bad Redis URL":                  {func(c *startup.Config) { c.RedisURL = "http://x" }, "REDIS_URL"},
	} {
		t.Run(name, func(t *testing.T) {
			c := cfg
			tc.change(&c)
			b, err := startup.Open(testenv.Context(t, 10*time.Second), c, zap.NewNop())
			require.ErrorContains(t, err, tc.want)
			require.Nil(t, b)
		})
	}
}
