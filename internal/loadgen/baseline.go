package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/labstack/echo/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// BaselineConfig configures the raw-path server.
type BaselineConfig struct {
	Listen    string
	AMQPURL   string
	RedisURL  string
	RedisMode string
	Prefix    string
	Window    int // unconfirmed publishes at once on the one channel
}

// rawScript is the one Redis round trip of the raw path: what a minimal
// rate limiter costs.
var rawScript = redis.NewScript(`local n = redis.call('INCR', KEYS[1]) redis.call('PEXPIRE', KEYS[1], ARGV[1]) return n`)

// ServeBaseline runs the raw path until ctx ends: a bare echo handler that
// does one Redis Lua call and one confirmed publish through one shared
// confirm-mode channel with a pipelined window. It is what the API is
// measured against, so it does nothing the API could skip and nothing
// more. ready is called with the address once it serves.
func ServeBaseline(ctx context.Context, c BaselineConfig, ready func(addr string)) error {
	rc, err := rdb.Open(c.RedisMode, c.RedisURL)
	if err != nil {
		return err
	}
	defer func() { _ = rc.Close() }()
	conn, err := broker.Dial(ctx, broker.Config{URL: c.AMQPURL, ConnectionName: "loadgen-baseline"})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	pub, err := NewConfirmPublisher(conn, c.Window)
	if err != nil {
		return err
	}
	defer pub.Close()
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return err
	}
	ct, err := m.Channel(topology.Mail)
	if err != nil {
		return err
	}
	e := echo.New()
	e.GET("/healthz", func(c *echo.Context) error { return c.String(http.StatusOK, "ok") })
	e.POST("/raw", func(ec *echo.Context) error {
		body, err := io.ReadAll(io.LimitReader(ec.Request().Body, 64<<10))
		if err != nil {
			return err
		}
		var req struct {
			Recipient string `json:"recipient"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return ec.JSON(http.StatusBadRequest, map[string]any{"code": 400, "msg": err.Error()})
		}
		rctx := ec.Request().Context()
		if err := rawScript.Run(rctx, rc, []string{c.Prefix + "raw:" + req.Recipient}, 60000).Err(); err != nil {
			return ec.JSON(http.StatusServiceUnavailable, map[string]any{"code": 503, "msg": err.Error()})
		}
		if err := pub.Publish(rctx, ct.Exchange, ct.RoutingKey, amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}); err != nil {
			return ec.JSON(http.StatusServiceUnavailable, map[string]any{"code": 503, "msg": err.Error()})
		}
		return ec.JSON(http.StatusAccepted, map[string]any{"code": 202, "msg": "queued"})
	})
	ln, err := (&net.ListenConfig{}).Listen(ctx, "tcp", c.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: e, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	ready(ln.Addr().String())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// startBaseline runs the raw path as a process of its own (`loadgen
// baseline-server`), as the API is one: in-process it would share the
// load generator's scheduler and look better or worse for it.
func startBaseline(ctx context.Context, self string, env *Env, logDir string) (*Proc, string, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, "", err
	}
	p, err := Start("baseline", self, []string{"baseline-server", "--listen", addr}, []string{
		"AMQP_URL=" + env.AMQPURL, "REDIS_URL=" + env.RedisURL, "REDIS_MODE=" + env.RedisMode, "REDIS_PREFIX=" + env.Prefix,
	}, logDir)
	if err != nil {
		return nil, "", err
	}
	if err := waitHTTP(ctx, "http://"+addr+"/healthz", p); err != nil {
		_ = p.Stop(5 * time.Second)
		return nil, "", err
	}
	return p, "http://" + addr, nil
}

// loadgenBinary finds a loadgen executable for the baseline server: the
// running one when it is loadgen, else the one Build put beside api.
func loadgenBinary(self, binDir string) (string, error) {
	if self != "" {
		return self, nil
	}
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "loadgen" {
		return exe, nil
	}
	p := filepath.Join(binDir, "loadgen")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no loadgen binary for the baseline server: %w", err)
	}
	return p, nil
}

// waitHTTP polls url until it answers 200, the process exits, or 30 s pass.
func waitHTTP(ctx context.Context, url string, p *Proc) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if p != nil {
			if exited, _ := p.Exited(); exited {
				return fmt.Errorf("before %s answered: %w", url, p.exitError())
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("%s not ready within 30s", url)
			if p != nil {
				msg += ":\n" + p.Tail(20)
			}
			return errors.New(msg)
		}
		if !pace(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
}
