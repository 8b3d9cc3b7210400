package dispatch_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// The consumer as cmd/consumer runs it, with two WeCom accounts and
// elastic pools: /readyz answers 200 once it consumes, /metrics shows each
// channel's workers, and it stops cleanly.
func TestRunIsReadyAndShowsItsWorkers(t *testing.T) {
	t.Parallel()
	b, r := testenv.NewBroker(t), testenv.NewRedis(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	cfg, l := config.LoadConsumer(envconf.FromMap(map[string]string{
		"AMQP_URL": b.URL, "REDIS_URL": r.URL, "REDIS_MODE": r.Mode, "REDIS_PREFIX": r.Prefix, "RABBITMQ_MANAGEMENT_URL": testenv.ManagementURL,
		"CHANNELS": "mail,wecom", "METRICS_ADDR": addr, "CONSUMER_ID": "run-c1", "MAIL_MIN_WORKERS": "2", "MAIL_MAX_WORKERS": "16",
		"WECOM_ACCOUNTS": "team-a=ww-a:2001:secret-a@shop,team-b=ww-b:2002:secret-b@blog", "WECOM_ACCOUNT_LIMITS": "team-a=20/600/0/0",
		"WECOM_API_BASE": "http://127.0.0.1:1", "QUEUE_TYPE": string(testenv.QueueType),
	}))
	require.NoError(t, l.Err())
	model, err := topology.Build(cfg.Model, "")
	require.NoError(t, err)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	require.NoError(t, broker.Declare(conn, model))
	require.NoError(t, conn.Close())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- dispatch.Run(ctx, cfg, zaptest.NewLogger(t)) }()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, ""
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testenv.WaitFor(t, 15*time.Second, "/readyz 200", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	var metrics string
	testenv.WaitFor(t, 15*time.Second, "each channel's workers in /metrics", func() bool {
		_, metrics = get("/metrics")
		// mail: MAIL_MIN_WORKERS; wecom: CONCURRENCY (a fixed pool).
		return strings.Contains(metrics, `msgpulse_consumer_workers{channel="mail",pool="codes"} 2`) &&
			strings.Contains(metrics, `msgpulse_consumer_workers{channel="mail",pool="notices"} 2`) &&
			strings.Contains(metrics, `msgpulse_consumer_workers{channel="wecom",pool="notices"} 8`)
	})
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(40 * time.Second):
		t.Fatal("the consumer did not stop")
	}
	require.False(t, strings.Contains(metrics, "secret-a"), "no secret in the metrics")
}
