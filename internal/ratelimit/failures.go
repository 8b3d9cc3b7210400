package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
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
type Failures struct {
	rdb    redis.UniversalClient
	prefix string
	limit  int
	window time.Duration

	mu      sync.Mutex
	blocked map[string]time.Time // address → end of its block (local clock)
	// held is len(blocked), read without the lock: every authenticated
	// request asks Blocked, and almost always nothing is blocked.
	held atomic.Int64
	now  func() time.Time
}

// NewFailures limits failures to limit per window (limit 0 = never).
func NewFailures(rdb redis.UniversalClient, prefix string, limit int, window time.Duration) *Failures {
	return &Failures{rdb: rdb, prefix: prefix, limit: limit, window: window, blocked: map[string]time.Time{}, now: time.Now}
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

// The address is the key's hash tag: one key per script, and addresses
// spread over a cluster's shards.
func (f *Failures) key(addr string) string {
	return f.prefix + "authfail:{" + addr + "}"
}

// Blocked reports whether addr is over the limit as far as this process
// knows, and for how long still. It never asks Redis.
func (f *Failures) Blocked(addr string) (time.Duration, bool) {
	if f.limit == 0 || f.held.Load() == 0 {
		return 0, false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	until, ok := f.blocked[addr]
	if !ok {
		return 0, false
	}
	left := until.Sub(f.now())
	if left <= 0 {
		delete(f.blocked, addr)
		f.held.Store(int64(len(f.blocked)))
		return 0, false
	}
	return left, true
}

// Fail records one failed authentication from addr, in one round trip. It
// returns a *LimitError when addr was already at the limit (the failure is
// then not recorded, and addr is Blocked until the window has room), and
// another error when Redis could not be asked.
func (f *Failures) Fail(ctx context.Context, addr string) error {
	if f.limit == 0 {
		return nil
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	raw, err := failScript.Run(ctx, f.rdb, []string{f.key(addr)}, f.window.Milliseconds(), f.limit, hex.EncodeToString(id[:])).Int64Slice()
	if err != nil {
		return fmt.Errorf("auth failures: %w", err)
	}
	if len(raw) != 2 {
		return fmt.Errorf("auth failures: unexpected reply %v", raw)
	}
	if raw[0] == 0 {
		return nil
	}
	retry := time.Duration(raw[1]) * time.Millisecond
	f.block(addr, retry)
	return &LimitError{Rule: "auth failures per address", Window: f.window, Limit: f.limit, RetryAfter: retry}
}

func (f *Failures) block(addr string, d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	// Forget ended blocks now and then, so the map holds only the
	// addresses blocked at the moment.
	if len(f.blocked) >= 1024 {
		for a, until := range f.blocked {
			if !until.After(now) {
				delete(f.blocked, a)
			}
		}
	}
	f.blocked[addr] = now.Add(d)
	f.held.Store(int64(len(f.blocked)))
}
