package fraud

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/verify"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Guard is the fraud guard as the API runs it: it names a code's
// destination (the tenant's prefix of the number) and its keys for the
// limiter's script, the tally of verified codes, and keeps the list of
// blocks that GET /api/fraud/blocks, the console and the metric read.
// Every replica builds one; everything it knows is in Redis.
type Guard struct {
	cfg    Config
	rdb    redis.UniversalClient
	prefix string
	// clock is the limiter's (ratelimit.Limiter.ClockOffset): the blocks'
	// times are in it.
	clock func() time.Duration

	mu sync.Mutex
	// listed are the blocks this replica put in the index, tenant and
	// prefix to the end of the block, so that it adds each once.
	listed map[string]int64
}

// New returns the guard; a Config whose Level is Off gives a guard that
// watches nothing but still lists and lifts (blocks from before it was
// turned off end on their own). clock may be nil.
func New(rdb redis.UniversalClient, redisPrefix string, cfg Config, clock func() time.Duration) (*Guard, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = func() time.Duration { return 0 }
	}
	return &Guard{cfg: cfg, rdb: rdb, prefix: redisPrefix, clock: clock, listed: map[string]int64{}}, nil
}

// Config is the guard's configuration.
func (g *Guard) Config() Config { return g.cfg }

// On reports whether the guard watches codes (FRAUD_GUARD is not off).
func (g *Guard) On() bool { return g.cfg.Level != Off }

// A prefix's keys share the hash tag of the tenant and the prefix: one
// script, one Redis Cluster slot, and prefixes spread over the shards.
// The index of blocks is a key of its own.
func (g *Guard) key(tenant, prefix, what string) string {
	return g.prefix + "fraud:{" + tenant + ":" + prefix + "}:" + what
}

func (g *Guard) indexKey() string { return g.prefix + "fraud:blocks" }

// Watch is what the limiter's script needs to judge a code to n for
// tenant, and the prefix it watches; nil when the guard is off.
func (g *Guard) Watch(tenant string, n phone.Number) (*ratelimit.Guard, string) {
	if !g.On() {
		return nil, ""
	}
	p := g.cfg.Prefix(n)
	t := g.cfg.Thresholds
	return &ratelimit.Guard{Sent: g.key(tenant, p, "sent"), Verified: g.key(tenant, p, "verified"), Block: g.key(tenant, p, "block"),
		Destination: p, Label: n.Region, MinSends: t.MinSends, MinVerified: t.MinVerified, SpikeFactor: t.SpikeFactor, SpikeMin: t.SpikeMin,
		Window: t.Window, Baseline: t.Baseline, BlockFor: t.BlockFor}, p
}

// Tally is where a verified code to n counts; nil when the guard is off.
func (g *Guard) Tally(tenant string, n phone.Number) *verify.Tally {
	if !g.On() {
		return nil
	}
	return &verify.Tally{Key: g.key(tenant, g.cfg.Prefix(n), "verified"), Windows: []time.Duration{g.cfg.Window}, Offset: g.clock()}
}

// Refused lists the block that refused a code (e) in the index, once per
// replica and block: the limiter's script cannot write the index, which is
// in another slot. Each replica that meets the block adds it, so a failed
// add is made good by the next refusal.
func (g *Guard) Refused(ctx context.Context, tenant, prefix string, e *ratelimit.GuardError) error {
	now := time.Now().Add(g.clock())
	until := now.Add(e.RetryAfter).UnixMilli()
	member := tenant + ":" + prefix
	g.mu.Lock()
	if u, ok := g.listed[member]; ok && abs(u-until) < 2000 {
		g.mu.Unlock()
		return nil
	}
	g.mu.Unlock()
	_, err := g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, g.indexKey(), redis.Z{Score: float64(until), Member: member})
		p.ZRemRangeByScore(ctx, g.indexKey(), "-inf", "("+strconv.FormatInt(now.UnixMilli(), 10))
		return nil
	})
	if err != nil {
		return fmt.Errorf("fraud: list the block of %s: %w", member, err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.listed) >= 1024 { // forget ended blocks now and then
		for m, u := range g.listed {
			if u < now.UnixMilli() {
				delete(g.listed, m)
			}
		}
	}
	// Bounded whatever the blocks (issue 43): past maxListed, a block is
	// not remembered here, and only costs its refusals one index write
	// each.
	if len(g.listed) < maxListed {
		g.listed[member] = until
	}
	return nil
}

// maxListed bounds the blocks a replica remembers having listed: 65,536
// (a few MB), far above the blocks any deployment has at once.
const maxListed = 1 << 16

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// Lifter is who may lift this guard's blocks (FRAUD_GUARD_LIFT).
func (g *Guard) Lifter() Lifter { return cmp.Or(g.cfg.Lift, LiftTenant) }

// Block is one blocked prefix, as GET /api/fraud/blocks lists it: the
// contract's FraudBlock, so server and client cannot drift apart.
type Block = client.FraudBlock

// Blocks lists the blocks in force, of tenant ("" = every tenant), by
// tenant and prefix. It only reads.
func (g *Guard) Blocks(ctx context.Context, tenant string) ([]Block, error) {
	now := time.Now().Add(g.clock()).UnixMilli()
	members, err := g.rdb.ZRangeByScore(ctx, g.indexKey(), &redis.ZRangeBy{Min: "(" + strconv.FormatInt(now, 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, fmt.Errorf("fraud: list blocks: %w", err)
	}
	type entry struct{ tenant, prefix string }
	var es []entry
	for _, m := range members {
		t, p, ok := strings.Cut(m, ":")
		if ok && (tenant == "" || t == tenant) {
			es = append(es, entry{t, p})
		}
	}
	cmds := make([]*redis.MapStringStringCmd, len(es))
	if len(es) > 0 {
		_, err = g.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, e := range es {
				cmds[i] = p.HGetAll(ctx, g.key(e.tenant, e.prefix, "block"))
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("fraud: read blocks: %w", err)
		}
	}
	out := []Block{}
	for i, e := range es {
		h := cmds[i].Val()
		until, _ := strconv.ParseInt(h["until"], 10, 64)
		if until <= now { // lifted, or ended
			continue
		}
		since, _ := strconv.ParseInt(h["since"], 10, 64)
		reason, _ := strconv.Atoi(h["reason"])
		b := Block{Tenant: e.tenant, Prefix: e.prefix, Country: h["label"], Reason: ratelimit.GuardReason(reason).String(),
			Since: time.UnixMilli(since).UTC(), Until: time.UnixMilli(until).UTC()}
		b.Sent, _ = strconv.Atoi(h["sent"])
		b.Verified, _ = strconv.Atoi(h["verified"])
		out = append(out, b)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Tenant != out[j].Tenant {
			return out[i].Tenant < out[j].Tenant
		}
		return out[i].Prefix < out[j].Prefix
	})
	return out, nil
}

// ErrNoBlock: Lift found no block of that tenant and prefix.
var ErrNoBlock = errors.New("fraud: no such block")

// liftScript ends a block and forgets the prefix's counts, so that the
// guard judges it afresh: with them it would block again at the next code.
// KEYS: the block, sent and verified hashes. Returns 1 when a block was in
// force. Now is Redis's clock plus ARGV[1] (the limiter's offset, 0 outside
// tests), as in the script that wrote the block's until: the API host's
// clock, skewed, could call a block in force over.
var liftScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[1])
local untl = tonumber(redis.call('HGET', KEYS[1], 'until'))
if not untl or untl <= now then return 0 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
`)

// Lift ends tenant's block of prefix at once, for every replica (the next
// code's script finds no block), and takes it off the list; ErrNoBlock
// when none is in force.
func (g *Guard) Lift(ctx context.Context, tenant, prefix string) error {
	n, err := liftScript.Run(ctx, g.rdb, []string{g.key(tenant, prefix, "block"), g.key(tenant, prefix, "sent"), g.key(tenant, prefix, "verified")}, g.clock().Milliseconds()).Int()
	if err != nil {
		return fmt.Errorf("fraud: lift %s %s: %w", tenant, prefix, err)
	}
	// Off the list either way: an entry without a block is stale.
	if err := g.rdb.ZRem(ctx, g.indexKey(), tenant+":"+prefix).Err(); err != nil {
		return fmt.Errorf("fraud: unlist %s %s: %w", tenant, prefix, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s has no block of %s in force", ErrNoBlock, tenant, prefix)
	}
	return nil
}

// Blocked counts the blocks in force, every tenant's (the metric).
func (g *Guard) Blocked(ctx context.Context) (int, error) {
	now := time.Now().Add(g.clock()).UnixMilli()
	n, err := g.rdb.ZCount(ctx, g.indexKey(), "("+strconv.FormatInt(now, 10), "+inf").Result()
	return int(n), err
}
