package ratelimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Limiter runs Takes and Rollbacks. It is safe for concurrent use.
type Limiter struct {
	rdb      redis.UniversalClient
	prefix   string
	exactMax int
	offset   atomic.Int64 // ms added to Redis time (Advance)
}

// New returns a Limiter whose keys all start with prefix. Windows whose
// limit exceeds DefaultExactMax are counted approximately (counter.go);
// WithExactMax changes that threshold.
func New(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{rdb: rdb, prefix: prefix, exactMax: DefaultExactMax}
}

// Prefix is what every key of the limiter starts with.
func (l *Limiter) Prefix() string { return l.prefix }

// Advance moves the limiter's clock d forward: from then on its take
// scripts read Redis time plus every d advanced so far, so that windows,
// counters and guards move as if that time had passed. It is for tests
// that drive hours of window logic in seconds; nothing else calls it.
// Cooldowns and marks still expire by Redis's own clock (their TTLs).
func (l *Limiter) Advance(d time.Duration) { l.offset.Add(d.Milliseconds()) }

// ClockOffset is what Advance added to Redis time so far (0 outside
// tests): whoever writes counts a take script reads (verify.Tally) adds it
// too.
func (l *Limiter) ClockOffset() time.Duration {
	return time.Duration(l.offset.Load()) * time.Millisecond
}

// ceilMS rounds up so that a sub-millisecond remainder makes a window
// stricter, never looser.
func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// takeScript checks the cooldown and every window, and records only if all
// admit.
//
// KEYS: per rule its log and its counter (counter.go), then the cooldown
// key when ARGV[2] > 0, then the reservation's mark when ARGV[4] > 0, then
// the suppression entry when it has one (suppress.go), then the guard's
// three keys when it has one (guard.go).
// ARGV: reservation id, cooldown ms (0 = none), number of rules, mark ms
// (0 = no counter window), the clock's offset ms (Limiter.Advance; 0),
// then per rule: number of windows, then (length ms, limit, mode) per
// window, mode 0 for an exact window (the log), 1 for a counted one. After
// the rules: the suppression check's words (a count, 0 = none:
// suppress.go), the guard's words (a count, 0 = none: guard.go), then the
// number of Then commands, then per command its number of words and the
// words.
// Returns {0, replies} when admitted (replies: one per Then command), else
// {1, rule, window, retry ms} for the violation with the longest retry
// (rule 0 = the cooldown); rule and window are 1-based positions in the
// arguments; or the guard's refusal, {1, -1, reason, retry ms, sent,
// verified, started}, when it is the longest; or, before any of them, the
// suppression check's {1, -2, reason, code, task, at}.
//
// An exact window is (now-length, now]. Its entries are the highest-scored
// ones of the log, so when count >= limit the entry whose departure makes
// room for one more is at rank card-limit (0-based, ascending): ZRANGE by
// rank is O(log N), unlike paging through the window.
//
// It may run twice for one reservation: go-redis sends a cluster node's
// whole batch again after a read timeout, also to the slots where it had
// run (rdb.Pipelined sends again only what got NOSCRIPT, which did not
// run). Its records are all or nothing, so one of them holding the
// reservation id (the mark, else the cooldown, else the first log) means
// this reservation was admitted here already: it answers admitted again
// and records nothing more, counters included.
// Checking it like a new request would find its own cooldown and refuse it
// (issue 20: first requests answered 429 "resend cooldown: wait 1m0s").
// Then commands run again: the cluster sends none, and a retry on one
// Redis is one only when go-redis retries are on (rdb.FailFast turns them
// off).
var takeScript = redis.NewScript(takeLua)

const takeLua = counterLua + `
local cdms = tonumber(ARGV[2])
local cdkey = KEYS[2 * nrules + 1]
local markkey = KEYS[2 * nrules + 1]
if cdms > 0 then markkey = KEYS[2 * nrules + 2] end
local again = false
if markms > 0 then
  again = redis.call('EXISTS', markkey) == 1
elseif cdms > 0 then
  again = redis.call('GET', cdkey) == id
end
local best = nil
if cdms > 0 and not again then
  local pttl = redis.call('PTTL', cdkey)
  if pttl == -1 then pttl = cdms end
  if pttl > 0 then best = {1, 0, 0, pttl} end
end
local a = 6
local spans = {}
local logged = {}
local counted = {}
local firstlog = nil
for r = 1, nrules do
  local key = KEYS[2 * r - 1]
  local ckey = KEYS[2 * r]
  local nw = tonumber(ARGV[a])
  a = a + 1
  local span = 0
  local card = nil
  local cw = {}
  for w = 1, nw do
    local len = tonumber(ARGV[a])
    local lim = tonumber(ARGV[a + 1])
    local mode = ARGV[a + 2]
    a = a + 3
    if mode == '1' then
      -- Sliding-window counter: the current fixed window's count plus the
      -- previous one's, weighted by how much of it the sliding window
      -- still covers.
      local idx = math.floor(now / len)
      local el = now - idx * len
      local cur, prev, field = windowCounts(ckey, len, idx)
      cw[#cw + 1] = {len, field, cur}
      if prev * (len - el) / len + cur + 1 > lim and not again then
        local retry = counterRetry(len, lim, el, cur, prev)
        if best == nil or retry > best[4] then best = {1, r, w, retry} end
      end
    else
      if len > span then span = len end
      local count = redis.call('ZCOUNT', key, '(' .. int(now - len), '+inf')
      if count >= lim and not again then
        if card == nil then card = redis.call('ZCARD', key) end
        local e = redis.call('ZRANGE', key, card - lim, card - lim, 'WITHSCORES')
        local retry = tonumber(e[2]) + len - now
        if retry < 1 then retry = 1 end
        if best == nil or retry > best[4] then best = {1, r, w, retry} end
      end
    end
  end
  spans[r] = span
  counted[r] = cw
  if span > 0 and firstlog == nil then firstlog = key end
end
if markms == 0 and cdms == 0 and firstlog ~= nil then
  -- No mark nor cooldown: the first log says whether this ran already.
  -- Its refusals were computed as a new request's; an admission found
  -- here is this request's own, so they do not count.
  if redis.call('ZSCORE', firstlog, id) ~= false then
    again = true
    best = nil
  end
end
` + suppressLua + guardLua + `
if best then return best end
for r = 1, nrules do
  if again then break end
  if spans[r] > 0 then
    local key = KEYS[2 * r - 1]
    redis.call('ZADD', key, nows, id)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - spans[r]))
    redis.call('PEXPIRE', key, int(spans[r]))
  end
  if #counted[r] > 0 then
    count(KEYS[2 * r], counted[r], 1, now)
  end
end
if gcw then count(gsent, gcw, 1, now) end
if cdms > 0 and not again then
  redis.call('SET', cdkey, id, 'PX', ARGV[2])
end
if markms > 0 and not again then
  redis.call('SET', markkey, nows, 'PX', ARGV[4])
end
local replies = {}
local ncmds = tonumber(ARGV[a]) or 0
a = a + 1
for c = 1, ncmds do
  local n = tonumber(ARGV[a])
  replies[c] = redis.call(unpack(ARGV, a + 1, a + n))
  a = a + 1 + n
end
return {0, replies}
`

// prepared is a request in the take scripts' terms.
type prepared struct {
	// keys: per rule its log and its counter, then the cooldown key.
	keys []string
	// args: reservation id, cooldown ms, number of rules, mark ms, then
	// the rules' windows (takeScript's ARGV up to the Then commands).
	args []any
	// The scripts skip nothing they are sent, so unlimited windows and
	// rules without limits are left out; ruleIdx and winIdx map their
	// 1-based positions back to the request for the LimitError.
	ruleIdx []int
	winIdx  [][]int
	// markTag is the tag of the first counted rule, else the guard's (""
	// when nothing counts).
	markTag string
	// guard are the guard's words (just its count, 0, without one) and
	// keys, which follow the cooldown and the mark.
	guard     []any
	guardKeys []string
	// sup are the suppression check's words (just its count, 0, without
	// one) and supKey its entry, which follows the mark.
	sup    []any
	supKey string
}

// prepare checks req and turns it into the scripts' keys and arguments,
// filling res's Keys, Counters and CooldownKey.
func (l *Limiter) prepare(req Request, res *Reservation) (prepared, error) {
	p := prepared{args: []any{res.ID, int64(0), 0, int64(0), l.offset.Load()}, guard: []any{0}, sup: []any{0}}
	seen := make(map[string]bool, len(req.Rules))
	for i, r := range req.Rules {
		if r.Key == "" {
			return p, fmt.Errorf("ratelimit: rule %d (%q): empty key", i, r.Name)
		}
		if seen[r.Key] {
			return p, fmt.Errorf("ratelimit: rule %q: key %q used twice in one request", r.Name, r.Key)
		}
		seen[r.Key] = true
		var ws []int
		var wargs []any
		exact, counted := false, false
		for j, w := range r.Windows {
			if w.Limit < 0 || w.Length <= 0 {
				return p, fmt.Errorf("ratelimit: rule %q: window %d: length %s and limit %d must be positive", r.Name, j, w.Length, w.Limit)
			}
			if w.Limit == 0 {
				continue
			}
			ws = append(ws, j)
			mode := 0
			if max(w.Limit, w.Full) > l.exactMax {
				mode, counted = 1, true
			} else {
				exact = true
			}
			wargs = append(wargs, ceilMS(w.Length), w.Limit, mode)
		}
		if len(ws) == 0 {
			continue
		}
		p.ruleIdx = append(p.ruleIdx, i)
		p.winIdx = append(p.winIdx, ws)
		log, ctr := l.logKey(r.Tag, r.Key), l.counterKey(r.Tag, r.Key)
		p.keys = append(p.keys, log, ctr)
		if exact {
			res.Keys = append(res.Keys, log)
		}
		if counted {
			res.Counters = append(res.Counters, ctr)
			if p.markTag == "" {
				p.markTag = tagOr(r.Tag, r.Key)
			}
		}
		p.args = append(p.args, len(ws))
		p.args = append(p.args, wargs...)
	}
	p.args[2] = len(p.ruleIdx)
	if cd := req.Cooldown; cd != nil {
		if cd.Key == "" || cd.For <= 0 {
			return p, fmt.Errorf("ratelimit: cooldown %q: needs a key and a positive duration", cd.Name)
		}
		res.CooldownKey = l.cooldownKey(cd.Tag, cd.Key)
		p.keys = append(p.keys, res.CooldownKey)
		p.args[1] = ceilMS(cd.For)
	}
	if g := req.Guard; g != nil {
		if err := g.check(); err != nil {
			return p, err
		}
		// The guard's count is undone like a counted rule's: by the
		// mark of its slot.
		res.Counters = append(res.Counters, g.Sent)
		if p.markTag == "" {
			p.markTag = hashTag(g.Sent)
		}
		p.guard, p.guardKeys = g.args(), g.keys()
	}
	if sp := req.Suppress; sp != nil {
		if err := sp.check(); err != nil {
			return p, err
		}
		p.sup, p.supKey = sp.args(), sp.Key
	}
	if p.markTag != "" {
		p.args[3] = ceilMS(markTTL)
	}
	return p, nil
}

// Take admits the request and records it in every rule and the cooldown, or
// records nothing and returns a *LimitError. Other errors mean Redis could
// not be asked; the caller decides whether to fail open or closed.
func (l *Limiter) Take(ctx context.Context, req Request) (*Reservation, error) {
	// The id is the log member, so it must be unique per reservation even
	// when two replicas take in the same millisecond.
	id := rand.Text()
	res := &Reservation{ID: id}
	if len(req.SuppressEach) > 0 {
		return nil, errors.New("ratelimit: take: SuppressEach is TakeUpTo's; a Take checks its one Suppress")
	}
	p, err := l.prepare(req, res)
	if err != nil {
		return nil, err
	}
	keys, args, ruleIdx, winIdx, markTag := p.keys, p.args, p.ruleIdx, p.winIdx, p.markTag
	if req.Once != nil {
		if err := req.Once.check(); err != nil {
			return nil, err
		}
		res.OnceKey = l.onceKey(req.Once.Key)
	}
	if len(keys) == 0 && len(req.Then) == 0 && req.Once == nil && req.Guard == nil && req.Suppress == nil {
		return res, nil
	}
	if cc, ok := rdb.AsCluster(l.rdb); ok {
		return l.takeSpread(ctx, cc, req, res, p)
	}
	if markTag != "" {
		// One Redis: one mark for the whole request, whatever its tag.
		mk := l.markKey(markTag, id)
		res.Marks = []string{mk}
		keys = append(keys, mk)
	}
	if p.supKey != "" {
		keys = append(keys, p.supKey)
	}
	keys = append(keys, p.guardKeys...)
	args = append(append(args, p.sup...), p.guard...)
	script, then := takeScript, req.Then
	if o := req.Once; o != nil {
		// The once script reads its two arguments and the entry's two keys
		// (last in KEYS) before the take script proper, and reserves the
		// entry with the request's other writes, only if it is admitted.
		script = takeOnceScript
		keys = append(keys, res.OnceKey, res.OnceKey+onceLeaseSuffix)
		args = append([]any{o.Digest, o.IDs}, args...)
		then = append(append([]rdb.Command(nil), req.Then...), o.reserve(res.OnceKey, res.ID)...)
	}
	args = append(args, len(then))
	for _, c := range then {
		args = append(args, len(c))
		args = append(args, c...)
	}

	raw, err := script.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("ratelimit: take: %w", err)
	}
	if len(raw) == 2 && raw[0] == int64(0) {
		res.Replies, _ = raw[1].([]any)
		if len(res.Replies) != len(then) {
			return nil, fmt.Errorf("ratelimit: take: %d replies for %d commands", len(res.Replies), len(then))
		}
		res.Replies = res.Replies[:len(req.Then)]
		return res, nil
	}
	if oe := priorEntry(raw); oe != nil {
		return nil, oe
	}
	if se := suppressedReply(raw); se != nil {
		return nil, se
	}
	out, err := refusal(raw)
	if err != nil {
		return nil, err
	}
	return nil, limitError(req, out, ruleIdx, winIdx)
}
