package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// Bounds are an adaptive rate's start, floor and ceiling, in sends per
// second, and how it moves: multiplied by Decrease when the vendor
// throttles, raised by Increase after each success.
type Bounds struct {
	Start, Min, Max    float64
	Decrease, Increase float64
}

// Valid reports whether b can be used.
func (b Bounds) Valid() bool {
	return b.Min > 0 && b.Min <= b.Start && b.Start <= b.Max && b.Decrease > 0 && b.Decrease < 1 && b.Increase > 0
}

// Adaptive is seed 004's optimal rate: a send rate per vendor account
// (a WeCom application, a robot) that drops when the vendor throttles and
// climbs back while sends succeed. The rate lives in Redis, so every
// consumer sends at the same one, and is enforced as an ordinary rule of
// the Limiter; each change is exported as msgpulse_adaptive_send_rate.
type Adaptive struct {
	rdb    redis.UniversalClient
	prefix string
	gauge  *prometheus.GaugeVec
}

// NewAdaptive returns an Adaptive registering its gauge in reg (nil = none).
func NewAdaptive(rdb redis.UniversalClient, prefix string, reg prometheus.Registerer) *Adaptive {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "msgpulse_adaptive_send_rate",
		Help: "Adaptive send rate per vendor account (sends per second), lowered when the vendor throttles and raised while sends succeed."}, []string{"account"})
	if reg != nil {
		reg.MustRegister(g)
	}
	return &Adaptive{rdb: rdb, prefix: prefix, gauge: g}
}

// AdaptiveRate is one account's adaptive rate as a consumer keeps it: its
// Redis key, bounds and gauge, resolved once (Adaptive.For), so that a
// send's rate is read and moved without looking the account up again. It
// is safe for concurrent use.
type AdaptiveRate struct {
	a       *Adaptive
	account string
	key     string
	b       Bounds
	gauge   prometheus.Gauge
}

// For returns account's adaptive rate within b; keep it.
func (a *Adaptive) For(account string, b Bounds) *AdaptiveRate {
	return &AdaptiveRate{a: a, account: account, key: a.key(account), b: b, gauge: a.gauge.WithLabelValues(account)}
}

// Bounds are the rate's bounds.
func (r *AdaptiveRate) Bounds() Bounds { return r.b }

// Rate returns the account's current rate (its bounds' Start if it has
// none yet), and shows it on the gauge.
func (r *AdaptiveRate) Rate(ctx context.Context) (float64, error) {
	v, err := r.a.rdb.Get(ctx, r.key).Result()
	if errors.Is(err, redis.Nil) {
		r.gauge.Set(r.b.Start)
		return r.b.Start, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ratelimit: adaptive rate of %s: %w", r.account, err)
	}
	rate, err := strconv.ParseFloat(v, 64)
	if err != nil {
		rate = r.b.Start // a garbled value starts over
	}
	rate = math.Min(math.Max(rate, r.b.Min), r.b.Max)
	r.gauge.Set(rate)
	return rate, nil
}

// Throttled lowers the account's rate: the vendor said we send too fast.
func (r *AdaptiveRate) Throttled(ctx context.Context) (float64, error) { return r.adapt(ctx, "down") }

// Succeeded raises the account's rate a step, up to its bounds' Max.
func (r *AdaptiveRate) Succeeded(ctx context.Context) (float64, error) { return r.adapt(ctx, "up") }

// ARGV: start, min, max, factor, step, direction (down|up), ttl ms.
var adaptScript = redis.NewScript(`
local r = tonumber(redis.call('GET', KEYS[1]) or ARGV[1]) or tonumber(ARGV[1])
if ARGV[6] == 'down' then r = r * tonumber(ARGV[4]) else r = r + tonumber(ARGV[5]) end
r = math.max(tonumber(ARGV[2]), math.min(tonumber(ARGV[3]), r))
local s = string.format('%.4f', r)
redis.call('SET', KEYS[1], s, 'PX', ARGV[7])
return s
`)

func (r *AdaptiveRate) adapt(ctx context.Context, dir string) (float64, error) {
	// A rate nobody touched for a day starts over.
	b := r.b
	s, err := adaptScript.Run(ctx, r.a.rdb, []string{r.key}, b.Start, b.Min, b.Max, b.Decrease, b.Increase, dir, (24 * time.Hour).Milliseconds()).Text()
	if err != nil {
		return 0, fmt.Errorf("ratelimit: adapt %s: %w", r.account, err)
	}
	rate, _ := strconv.ParseFloat(s, 64)
	r.gauge.Set(rate)
	return rate, nil
}

// RateRule holds sends under key to perSecond (below one a second: one
// send per 1/perSecond seconds). A caller that scales an adaptive rate
// (by an account's health) builds its rule with it.
func RateRule(name, key string, perSecond float64) Rule {
	w := Window{Length: time.Second, Limit: max(int(perSecond), 1)}
	if perSecond < 1 {
		w = Window{Length: time.Duration(float64(time.Second) / perSecond), Limit: 1}
	}
	return Rule{Name: name, Key: key, Windows: []Window{w}}
}
