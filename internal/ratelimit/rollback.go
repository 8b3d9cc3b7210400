package ratelimit

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Undoing a reservation whose request was not carried out.

// rollbackScript removes one reservation. KEYS: the logs, then the cooldown
// key when ARGV[2] == '1', then ARGV[3] counters and the mark when ARGV[3]
// > 0. ARGV[1]: the reservation id; ARGV[4]: its units when it is a bulk
// one (TakeUpTo), else 0 or absent. A counter is decremented in the fixed
// windows the mark's time fell in, and only while the mark lives, which
// it then deletes: a second rollback finds none and does nothing.
var rollbackScript = redis.NewScript(`
local nc = tonumber(ARGV[3]) or 0
local units = tonumber(ARGV[4]) or 0
local n = #KEYS
if nc > 0 then
  local mark = KEYS[#KEYS]
  local at = tonumber(redis.call('GET', mark))
  if at then
    for i = #KEYS - nc, #KEYS - 1 do
      for _, f in ipairs(redis.call('HKEYS', KEYS[i])) do
        local len, idx = string.match(f, '^(%d+):(%d+)$')
        if len and tonumber(idx) == math.floor(at / tonumber(len)) then
          if redis.call('HINCRBY', KEYS[i], f, -math.max(units, 1)) <= 0 then
            redis.call('HDEL', KEYS[i], f)
          end
        end
      end
    end
    redis.call('DEL', mark)
  end
  n = n - nc - 1
end
if ARGV[2] == '1' then
  if redis.call('GET', KEYS[n]) == ARGV[1] then
    redis.call('DEL', KEYS[n])
  end
  n = n - 1
end
for i = 1, n do
  if units == 0 then
    redis.call('ZREM', KEYS[i], ARGV[1])
  end
  -- A bulk reservation's units are members ID:1 … ID:units (takeUpToLua).
  for u = 1, units, 500 do
    local m = {}
    for v = u, math.min(u + 499, units) do m[#m + 1] = ARGV[1] .. ':' .. v end
    redis.call('ZREM', KEYS[i], unpack(m))
  end
end
return 0
`)

// Rollback undoes a reservation whose request was not carried out (e.g. the
// publish failed), so it does not count against anyone. It is idempotent, and
// leaves a cooldown alone once a later request holds it.
func (l *Limiter) Rollback(ctx context.Context, res *Reservation) error {
	calls := l.rollbackCalls(res)
	if len(calls) == 0 {
		return nil
	}
	if cc, ok := rdb.AsCluster(l.rdb); ok {
		return l.rollbackSpread(ctx, cc, res)
	}
	if err := rollbackScript.Run(ctx, l.rdb, calls[0].keys, calls[0].args...).Err(); err != nil {
		return fmt.Errorf("ratelimit: rollback: %w", err)
	}
	return nil
}

// QueueRollback is Rollback queued on p, for a caller that undoes many
// things in one round trip (a failed batch: issue 38); the returned
// function reports the outcome once p has run. The scripts go as EVAL, so
// a Redis that forgot them (a restart, a new cluster node) cannot answer
// NOSCRIPT: a rollback is rare, and must not need a second round trip.
func (l *Limiter) QueueRollback(ctx context.Context, p redis.Pipeliner, res *Reservation) func() error {
	var cmds []*redis.Cmd
	for _, c := range l.rollbackCalls(res) {
		cmds = append(cmds, rollbackScript.Eval(ctx, p, c.keys, c.args...))
	}
	return func() error {
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return fmt.Errorf("ratelimit: rollback: %w", err)
			}
		}
		return nil
	}
}

// scriptCall is one call of a script: its keys and arguments.
type scriptCall struct {
	keys []string
	args []any
}

// rollbackCalls are the rollback script's calls that undo res: one on one
// Redis, one per slot on a Redis Cluster (a script may only touch one);
// none for a reservation that holds nothing.
func (l *Limiter) rollbackCalls(res *Reservation) []scriptCall {
	if res == nil || (len(res.Keys) == 0 && res.CooldownKey == "" && len(res.Marks) == 0) {
		return nil
	}
	if _, ok := rdb.AsCluster(l.rdb); ok {
		return rollbackCallsBySlot(res)
	}
	keys := append([]string(nil), res.Keys...)
	hasCD := "0"
	if res.CooldownKey != "" {
		keys = append(keys, res.CooldownKey)
		hasCD = "1"
	}
	nc := 0
	if len(res.Marks) > 0 {
		keys = append(keys, res.Counters...)
		keys = append(keys, res.Marks[0])
		nc = len(res.Counters)
	}
	return []scriptCall{{keys: keys, args: []any{res.ID, hasCD, nc, res.Units}}}
}

// QueueRelease is Release queued on p (see QueueRollback); the returned
// function reports the outcome once p has run.
func (l *Limiter) QueueRelease(ctx context.Context, p redis.Pipeliner, key, ids string) func() error {
	if key == "" {
		return func() error { return nil }
	}
	cmd := releaseScript.Eval(ctx, p, []string{key, key + onceLeaseSuffix}, ids, "release")
	return func() error {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("ratelimit: release idempotency entry: %w", err)
		}
		return nil
	}
}
