package loadgen

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// DelayOptions shape the accuracy run.
type DelayOptions struct {
	Mix       int           // messages with delays spread over (0, MixMax]
	MixMax    time.Duration // longest delay of the mix
	Burst     int           // messages all due at the same instant
	BurstIn   time.Duration // how far ahead that instant is
	Relay     int           // relay concurrency (RELAY_CONCURRENCY)
	Prefetch  int           // relay prefetch (RELAY_PREFETCH)
	Mode      topology.DelayMode
	Baseline  int // immediate publishes, to measure the transport's own lag
	Margin    time.Duration
	Tolerance time.Duration
	Worst     int // print the latest N of the mix with their delays
}

type arrivals struct {
	mu   sync.Mutex
	late map[string]time.Duration
}

func (a *arrivals) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.late)
}

func (a *arrivals) take(prefix string, n int) []time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []time.Duration
	for i := range n {
		if l, ok := a.late[prefix+strconv.Itoa(i)]; ok {
			out = append(out, l)
		}
	}
	return out
}

// DelayResult is the delay mode's section of the report (milliseconds).
type DelayResult struct {
	Mode      string       `json:"mode"`
	Baseline  DelaySummary `json:"baseline"`   // single messages, no delay
	Floor     DelaySummary `json:"burstFloor"` // the burst's size at once, no delay
	Burst     DelaySummary `json:"burst"`
	Mix       DelaySummary `json:"mix"`
	MixMaxSec float64      `json:"mixMaxSec"`
	BurstP99X float64      `json:"burstP99OverFloor"`
	MixP99X   float64      `json:"mixP99OverBaseline"`
}

// DelaySummary is a delivered − due distribution in milliseconds.
type DelaySummary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50Ms"`
	P95 float64 `json:"p95Ms"`
	P99 float64 `json:"p99Ms"`
	Max float64 `json:"maxMs"`
}

func delaySummary(s Summary) DelaySummary {
	f := func(d time.Duration) float64 { return round2(float64(d) / float64(time.Millisecond)) }
	return DelaySummary{N: s.N, P50: f(s.P50), P95: f(s.P95), P99: f(s.P99), Max: f(s.Max)}
}

// Delay measures delivered − due for a burst of messages due at the same
// instant and for a mix of delays up to MixMax, with the relay and a
// recording consumer running in this process.
func Delay(ctx context.Context, o *Options, d DelayOptions, out io.Writer) (*DelayResult, error) {
	env, err := NewEnv(ctx, *o, "delay")
	if err != nil {
		return nil, err
	}
	defer env.Close()
	cfg := benchTopology()
	cfg.Delay.Mode = d.Mode
	if err := declare(ctx, env, cfg); err != nil {
		return nil, err
	}
	m, err := topology.Build(cfg, "")
	if err != nil {
		return nil, err
	}
	s, err := broker.NewSession(broker.Config{URL: env.AMQPURL, Logger: zap.NewNop()})
	if err != nil {
		return nil, err
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	// Stop, then wait: the relay and consumer end only when sctx does.
	defer func() { stop(); wg.Wait() }()
	wg.Add(1)
	go func() { defer wg.Done(); s.Run(sctx) }()
	if _, err := s.Conn(ctx); err != nil {
		return nil, err
	}
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: s, Channels: 64})
	if err != nil {
		return nil, err
	}
	defer pub.Close()
	planner, err := delay.NewPlanner(m.Delay, d.Margin, d.Tolerance)
	if err != nil {
		return nil, err
	}
	delayed := delay.NewPublisher(pub, planner, m.Delay, nil)
	if m.Delay.RelayQueue != "" {
		relay, err := delay.NewRelay(delay.RelayConfig{Session: s, Publisher: pub, Planner: planner, Topology: m.Delay, Concurrency: d.Relay, Prefetch: d.Prefetch})
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = relay.Run(sctx) }()
	}
	ct, _ := m.Channel(topology.Mail)
	arr := &arrivals{late: map[string]time.Duration{}}
	c, err := broker.NewConsumer(broker.ConsumerConfig{Session: s, Queue: ct.Queue, Concurrency: 32, Prefetch: 512,
		Handler: func(_ context.Context, del *amqp.Delivery) broker.Action {
			if due, ok := envelope.HeaderTime(del.Headers, envelope.HeaderDueAt); ok {
				arr.mu.Lock()
				arr.late[del.MessageId] = time.Since(due)
				arr.mu.Unlock()
			}
			return broker.Ack
		}})
	if err != nil {
		return nil, err
	}
	wg.Add(1)
	go func() { defer wg.Done(); _ = c.Run(sctx) }()

	target := func(id string) broker.Outgoing {
		return broker.Outgoing{Exchange: ct.Exchange, RoutingKey: ct.RoutingKey, Msg: amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, Body: []byte(id)}}
	}
	wait := func(n int, within time.Duration) error {
		deadline := time.Now().Add(within)
		for arr.count() < n {
			if time.Now().After(deadline) {
				return fmt.Errorf("only %d of %d delayed messages arrived within %s", arr.count(), n, within)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
		return nil
	}
	fmt.Fprintf(out, "Delay accuracy (delivered − due), mode %s, relay concurrency %d, tiers %s..%s\n", d.Mode, d.Relay,
		topology.TierName(m.Delay.Tiers[0].TTL), topology.TierName(m.Delay.Tiers[len(m.Delay.Tiers)-1].TTL))

	// Baseline: the same path without any delay (publish straight to the
	// target with x-due-at = now): the broker and consumer's own lag.
	for i := range d.Baseline {
		o := target("base-" + strconv.Itoa(i))
		o.Msg.Headers = amqp.Table{envelope.HeaderDueAt: time.Now().UnixMilli()}
		if err := pub.Publish(ctx, o.Exchange, o.RoutingKey, o.Msg); err != nil {
			return nil, err
		}
	}
	if err := wait(d.Baseline, 30*time.Second); err != nil {
		return nil, err
	}
	base := summarize(arr.take("base-", d.Baseline))
	fmt.Fprintf(out, "  baseline, no delay (%d):        %s\n", d.Baseline, base)

	// Burst baseline: as many messages as the burst, published at once
	// with no delay: the broker and consumer's floor for taking them all.
	now := time.Now().UnixMilli()
	var flood []broker.Outgoing
	for i := range d.Burst {
		o := target("flood-" + strconv.Itoa(i))
		o.Msg.Headers = amqp.Table{envelope.HeaderDueAt: now}
		flood = append(flood, o)
	}
	for from := 0; from < len(flood); from += 500 {
		for _, err := range pub.PublishBatch(ctx, flood[from:min(from+500, len(flood))]) {
			if err != nil {
				return nil, err
			}
		}
	}
	if err := wait(d.Baseline+d.Burst, 60*time.Second); err != nil {
		return nil, err
	}
	floor := summarize(arr.take("flood-", d.Burst))
	fmt.Fprintf(out, "  baseline, %d at once, no delay: %s\n", d.Burst, floor)

	// Burst: every message due at the same instant.
	due := time.Now().Add(d.BurstIn)
	var burst []delay.DelayedMessage
	for i := range d.Burst {
		burst = append(burst, delay.DelayedMessage{Outgoing: target("burst-" + strconv.Itoa(i)), Delay: time.Until(due)})
	}
	if err := publishAll(ctx, delayed, burst); err != nil {
		return nil, err
	}
	if err := wait(d.Baseline+2*d.Burst, d.BurstIn+60*time.Second); err != nil {
		return nil, err
	}
	b := summarize(arr.take("burst-", d.Burst))
	fmt.Fprintf(out, "  burst of %d due at once (in %s): %s\n", d.Burst, d.BurstIn, b)

	// Mix: delays spread up to MixMax, published in random order.
	var mix []delay.DelayedMessage
	for i := range d.Mix {
		dl := time.Duration(50+rand.Int64N(int64(d.MixMax/time.Millisecond)-50)) * time.Millisecond
		mix = append(mix, delay.DelayedMessage{Outgoing: target("mix-" + strconv.Itoa(i)), Delay: dl})
	}
	if err := publishAll(ctx, delayed, mix); err != nil {
		return nil, err
	}
	if err := wait(d.Baseline+2*d.Burst+d.Mix, d.MixMax+60*time.Second); err != nil {
		return nil, err
	}
	x := summarize(arr.take("mix-", d.Mix))
	if d.Worst > 0 {
		type pair struct{ late, delay time.Duration }
		var ps []pair
		for i, m := range mix {
			if l, ok := arr.late["mix-"+strconv.Itoa(i)]; ok {
				ps = append(ps, pair{l, m.Delay})
			}
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].late > ps[j].late })
		for _, p := range ps[:min(d.Worst, len(ps))] {
			fmt.Fprintf(out, "    %s late, delay %s\n", ms(p.late), p.delay)
		}
	}
	fmt.Fprintf(out, "  mix of %d, delays 50ms..%s:  %s\n", d.Mix, d.MixMax, x)
	fmt.Fprintf(out, "  p99 over baseline: burst %.1fx of the same burst undelayed, mix %.1fx of single messages undelayed\n",
		float64(b.P99)/float64(max(floor.P99, time.Microsecond)), float64(x.P99)/float64(max(base.P99, time.Microsecond)))
	return &DelayResult{Mode: string(d.Mode), Baseline: delaySummary(base), Floor: delaySummary(floor), Burst: delaySummary(b), Mix: delaySummary(x),
		MixMaxSec: d.MixMax.Seconds(), BurstP99X: round2(float64(b.P99) / float64(max(floor.P99, time.Microsecond))), MixP99X: round2(float64(x.P99) / float64(max(base.P99, time.Microsecond)))}, nil
}

func publishAll(ctx context.Context, p *delay.Publisher, msgs []delay.DelayedMessage) error {
	for from := 0; from < len(msgs); from += 500 {
		for _, err := range p.PublishDelayedBatch(ctx, msgs[from:min(from+500, len(msgs))]) {
			if err != nil {
				return err
			}
		}
	}
	return nil
}
