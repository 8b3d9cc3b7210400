package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Failures limits failed authentications per source address: at most Limit
// in any sliding Window, counted in Redis so that every API replica shares
// the count. A failure is recorded and judged in one script, before the
// caller answers, so that parallel guesses cannot all pass a check made
// before any of them was counted: the Limit+1th failure in a window is
// refused, whichever replica sees it.
//
// While an address is over the limit, Blocked reports it without asking
// Redis (from what this process learnt from its own Fail calls), so that a
// guess that happens to be right is refused too: otherwise a flood of
// wrong guesses, each refused, would still show the right one by its 200.
// Each replica learns of a block at the first failure it sees from the
// address after the limit was reached.
//
// An address is what one subscriber holds: an IPv4 address, or the /64 of
// an IPv6 one (Source), so that the 2^64 addresses of one IPv6 line are
// one count, not as many fresh ones.
//
// When Redis cannot count a failure, the address fails closed: this
// process refuses it for Window/Limit (the pace the limit allows), so
// that guesses during a Redis outage are no faster than the limit lets
// them be, and a right key among them is not let through unlimited.
type Failures struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	window time.Duration

	mu      sync.Mutex
	blocked map[string]Block // source → its block, Until by the local clock
	// held is len(blocked), read without the lock: every authenticated
	// request asks Blocked, and almost always nothing is blocked.
	held atomic.Int64
	now  func() time.Time
}

// NewFailures limits failures to limit per window (limit 0 = never).
func NewFailures(rdb redis.UniversalClient, prefix string, limit int, window time.Duration) *Failures {
	return &Failures{rdb: rdb, prefix: prefix, limit: limit, window: window, blocked: map[string]Block{}, now: time.Now}
}

// Limit is the number of failures a window admits (0 = unlimited).
func (f *Failures) Limit() int { return f.limit }

// failScript records one failure for KEYS[1] unless the window already
// holds ARGV[2] of them. ARGV: window ms, limit, member id. Returns
// {0, count} when recorded, else {1, retry ms}: when the oldest failure in
// the window leaves it. A refused failure is not recorded, so a flood
// keeps the log at the limit, and the block ends one window after the
// last admitted failure.
var failScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local n = redis.call('ZCARD', KEYS[1])
if n >= limit then
  local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  local retry = tonumber(oldest[2]) + window - now
  if retry < 1 then retry = 1 end
  return {1, retry}
end
redis.call('ZADD', KEYS[1], now, ARGV[3])
redis.call('PEXPIRE', KEYS[1], window)
return {0, n + 1}
`)

// Source is what an address counts as: itself for IPv4 (an IPv4-mapped
// IPv6 address too), its /64 for IPv6 ("2001:db8:1:2::/64": one
// subscriber usually holds a whole /64), the text as given when it is no
// IP address.
func Source(addr string) string {
	ip := net.ParseIP(addr)
	if ip == nil {
		return addr
	}
	if v4 := ip.To4(); v4 != nil {
		return v4.String()
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}

// Block is an address's block as this process knows it.
type Block struct {
	// Left is how long it lasts still.
	Left time.Duration
	// Uncounted is true when Redis could not count the address's last
	// failure (fail closed), rather than the address being over the limit.
	Uncounted bool
	until     time.Time
}

// Blocked reports whether addr's source is over the limit, or failed
// closed, as far as this process knows, and for how long still. It never
// asks Redis.
func (f *Failures) Blocked(addr string) (Block, bool) {
	if f.limit == 0 || f.held.Load() == 0 {
		return Block{}, false
	}
	src := Source(addr)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.blocked[src]
	if !ok {
		return Block{}, false
	}
	b.Left = b.until.Sub(f.now())
	if b.Left <= 0 {
		delete(f.blocked, src)
		f.held.Store(int64(len(f.blocked)))
		return Block{}, false
	}
	return b, true
}

// UncountedError is a failure Redis could not count: the address is
// refused for RetryAfter (fail closed).
type UncountedError struct {
	RetryAfter time.Duration
	Err        error
}

func (e *UncountedError) Error() string {
	return fmt.Sprintf("auth failures: could not count a failure (refusing the address for %s): %v", e.RetryAfter, e.Err)
}

func (e *UncountedError) Unwrap() error { return e.Err }

// uncountedFor is how long an address whose failure went uncounted is
// refused: the pace the limit allows, at least a second.
func (f *Failures) uncountedFor() time.Duration {
	return max(f.window/time.Duration(f.limit), time.Second)
}

// Fail records one failed authentication from addr's source, in one round
// trip. It returns a *LimitError when the source was already at the limit
// (the failure is then not recorded, and the source is Blocked until the
// window has room), and an *UncountedError when Redis could not count it
// (the source is then Blocked for a while: fail closed).
func (f *Failures) Fail(ctx context.Context, addr string) error {
	if f.limit == 0 {
		return nil
	}
	src := Source(addr)
	var id [8]byte
	_, _ = rand.Read(id[:])
	raw, err := failScript.Run(ctx, f.rdb, []string{f.key(src)}, f.window.Milliseconds(), f.limit, hex.EncodeToString(id[:])).Int64Slice()
	if err == nil && len(raw) != 2 {
		err = fmt.Errorf("unexpected reply %v", raw)
	}
	if err != nil {
		d := f.uncountedFor()
		f.block(src, Block{Uncounted: true}, d)
		return &UncountedError{RetryAfter: d, Err: err}
	}
	if raw[0] == 0 {
		return nil
	}
	retry := time.Duration(raw[1]) * time.Millisecond
	f.block(src, Block{}, retry)
	return &LimitError{Rule: "auth failures per address", Window: f.window, Limit: f.limit, RetryAfter: retry}
}

// maxBlocked bounds the blocked sources a process remembers: 65,536, about
// 10 MB at most.
const maxBlocked = 1 << 16

func (f *Failures) block(src string, b Block, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	// Forget ended blocks now and then, so the map holds only the
	// sources blocked at the moment.
	if len(f.blocked) >= 1024 {
		for a, old := range f.blocked {
			if !old.until.After(now) {
				delete(f.blocked, a)
			}
		}
	}
	b.until = now.Add(d)
	// Bounded whatever the callers (issue 43): sources come from
	// unauthenticated requests, and one IPv6 holder has 2^16 /64s in a
	// /48. Past maxBlocked a source is not remembered here; Redis still
	// counts it, and refuses it from its next failure on.
	if _, ok := f.blocked[src]; ok || len(f.blocked) < maxBlocked {
		f.blocked[src] = b
	}
	f.held.Store(int64(len(f.blocked)))
}
