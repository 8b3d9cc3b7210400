package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// APIOptions shape the latency run.
type APIOptions struct {
	Rate     int           // requests per second (open loop)
	Duration time.Duration // per round and endpoint
	Rounds   int
}

const benchKey = "loadgen-key-0123456789"

// fire sends rate requests per second for dur, each at its scheduled time
// whatever the previous ones are doing (open loop), and measures latency
// from the scheduled time, so a stall counts against the system instead of
// silently lowering the rate.
func fire(ctx context.Context, rate int, dur time.Duration, do func(i int) error) Summary {
	n := int(float64(rate) * dur.Seconds())
	interval := time.Second / time.Duration(rate)
	lat := make([]time.Duration, n)
	errs := make([]bool, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
				return Summary{}
			case <-time.After(d): // pacing the load generator, not waiting for an outcome
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := do(i)
			lat[i], errs[i] = time.Since(at), err != nil
		}()
	}
	wg.Wait()
	s := summarize(lat)
	for _, e := range errs {
		if e {
			s.Errors++
		}
	}
	s.Elapsed = time.Since(start)
	return s
}

// API measures request latency of POST /api/messages/send at a fixed rate
// against GET /healthz at the same rate, on an API started in-process.
func API(ctx context.Context, o Options, a APIOptions, out io.Writer) error {
	env, err := NewEnv(ctx, o, "api")
	if err != nil {
		return err
	}
	defer env.Close()
	if err := declare(ctx, env, benchTopology()); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{
		"AMQP_URL": env.AMQPURL, "REDIS_URL": env.RedisURL, "REDIS_PREFIX": env.Prefix, "RABBITMQ_MANAGEMENT_URL": env.ManagementURL,
		"HTTP_ADDR": addr, "API_KEYS": "bench:" + benchKey, "LIMIT_PER_API_KEY_PER_MINUTE": "0", "LIMIT_EMAIL_PER_SECOND": "0",
		"MAIL_QUEUE_TTL": "0s", "MAIL_QUEUE_MAX_LENGTH": "0", "SMS_QUEUE_TTL": "0s", "SMS_QUEUE_MAX_LENGTH": "0",
	}))
	if err := l.Err(); err != nil {
		return err
	}
	actx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- api.Run(actx, cfg, zap.NewNop()) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintln(out, "api stopped with:", err)
		}
	}()

	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 512, MaxConnsPerHost: 0}, Timeout: 10 * time.Second}
	base := "http://" + addr
	if err := waitReady(ctx, hc, base+"/readyz"); err != nil {
		return err
	}
	get := func(int) error {
		resp, err := hc.Get(base + "/healthz")
		return check(resp, err, http.StatusOK)
	}
	send := func(i int) error {
		body := fmt.Sprintf(`{"messageType":"EMAIL","templateCode":"notice","recipient":"user%d@example.com","variables":{"title":"t","content":"c"}}`, i)
		req, _ := http.NewRequest(http.MethodPost, base+"/api/messages/send", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", benchKey)
		resp, err := hc.Do(req)
		return check(resp, err, http.StatusAccepted)
	}
	round := 0
	code := func(i int) error {
		body := fmt.Sprintf(`{"channel":"email","recipient":"code%d-%d@example.com","purpose":"login","clientIp":"198.51.100.%d"}`, round, i, i%250)
		req, _ := http.NewRequest(http.MethodPost, base+"/api/verification-codes", bytes.NewReader([]byte(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-API-Key", benchKey)
		resp, err := hc.Do(req)
		return check(resp, err, http.StatusAccepted)
	}
	fire(ctx, a.Rate, time.Second, get) // warm up connections and caches
	fire(ctx, a.Rate, time.Second, send)
	fmt.Fprintf(out, "API latency at %d req/s, %s per round (open loop; latency from the scheduled send time)\n", a.Rate, a.Duration)
	var p50s, p99s, cp50s, cp99s, bp50s, bp99s []float64
	for r := 1; r <= a.Rounds; r++ {
		round = r
		base := fire(ctx, a.Rate, a.Duration, get)
		s := fire(ctx, a.Rate, a.Duration, send)
		c := fire(ctx, a.Rate, a.Duration, code)
		fmt.Fprintf(out, "  round %d  GET /healthz (baseline)         %s errors=%d\n", r, base, base.Errors)
		fmt.Fprintf(out, "  round %d  POST /api/messages/send         %s errors=%d\n", r, s, s.Errors)
		fmt.Fprintf(out, "  round %d  POST /api/verification-codes    %s errors=%d\n", r, c, c.Errors)
		p50s, p99s = append(p50s, float64(s.P50)), append(p99s, float64(s.P99))
		cp50s, cp99s = append(cp50s, float64(c.P50)), append(cp99s, float64(c.P99))
		bp50s, bp99s = append(bp50s, float64(base.P50)), append(bp99s, float64(base.P99))
	}
	mb50, mb99 := median(bp50s), median(bp99s)
	d := func(x float64) string { return ms(time.Duration(x)) }
	fmt.Fprintf(out, "  median of %d rounds: healthz p50=%s p99=%s\n", a.Rounds, d(mb50), d(mb99))
	fmt.Fprintf(out, "    messages/send       p50=%s p99=%s (%.1fx / %.1fx of healthz)\n", d(median(p50s)), d(median(p99s)), median(p50s)/mb50, median(p99s)/mb99)
	fmt.Fprintf(out, "    verification-codes  p50=%s p99=%s (%.1fx / %.1fx of healthz)\n", d(median(cp50s)), d(median(cp99s)), median(cp50s)/mb50, median(cp99s)/mb99)
	return nil
}

func check(resp *http.Response, err error, want int) error {
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func waitReady(ctx context.Context, hc *http.Client, url string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := hc.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s not ready within 30s", url)
}

func declare(ctx context.Context, env *Env, cfg topology.Config) error {
	m, err := topology.Build(cfg, "")
	if err != nil {
		return err
	}
	conn, err := broker.Dial(ctx, broker.Config{URL: env.AMQPURL})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return broker.Declare(conn, m)
}
