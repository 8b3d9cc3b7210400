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

// ErrLimited is matched (errors.Is) by every *LimitError.
var ErrLimited = errors.New("ratelimit: limited")

// Window is one sliding window of a rule. Limit 0 means unlimited: the window
// is skipped.
type Window struct {
	Length time.Duration
	Limit  int
	// Full is the window's limit before a reserve lowered it (see
	// Reserve); 0 means Limit. It, not Limit, decides whether the window
	// is counted exactly or approximately (LIMIT_EXACT_MAX), so that the
	// requests held to the reserve and those that may use it count in the
	// same place and see each other.
	Full int
}

// Rule is one dimension of a request, counted under Key (without the
// limiter's prefix). Name is for humans and metrics: "per recipient",
// "global email", "rate limit cfg-1 (provider aliyun)".
type Rule struct {
	Name string
	// Label names the rule in metrics when Name carries what an operator
	// chose (a configured rule's id): a label drawn from a set that grows
	// makes series that are never freed. "" means Name.
	Label   string
	Key     string
	Windows []Window
	// Tag is what the rule protects (a recipient, an IP); keys with the
	// same tag share a Redis Cluster slot, and so one atomic check. ""
	// means Key.
	Tag string
}

// Cooldown admits one request per For under Key (e.g. one code resend per
// recipient per minute), whatever the windows say.
type Cooldown struct {
	Name string
	Key  string
	For  time.Duration
	Tag  string // as Rule.Tag: give a cooldown and a rule on the same thing one tag
}

// Request is everything one Take checks and records together.
type Request struct {
	Rules    []Rule
	Cooldown *Cooldown
	// Then are writes that belong to the admitted request (a code, its
	// status record): the script runs them, in order, right after it
	// records the request, and only if it admits it. One round trip, and
	// a refused request writes nothing. Their replies are in
	// Reservation.Replies. On a Redis Cluster they run right after the
	// checks admitted the request, each slot's commands in one MULTI, and a
	// failure undoes the reservation.
	Then []rdb.Command
	// Once, when set, makes the request idempotent under a caller's key:
	// the same script first looks the key up and, if an earlier request
	// holds it, returns an *OnceError and does nothing else (see once.go).
	Once *Once
	// Guard, when set, also judges the request's destination (guard.go):
	// a blocked one refuses it with a *GuardError.
	Guard *Guard
}

// Reservation is what Take recorded, with enough to undo it from any replica.
type Reservation struct {
	ID          string   // member written to every log and value of the cooldown key
	Keys        []string // full Redis keys of the logs holding ID
	CooldownKey string   // full Redis key of the cooldown, "" when none was set
	// Counters are the full Redis keys of the rules' window counters (windows
	// over the limiter's ExactMax, see counter.go) and Marks the keys that
	// say this reservation counted there: one per slot holding counters.
	Counters []string
	Marks    []string
	Replies  []any  // one per Request.Then command, in order
	OnceKey  string // full Redis key of the Once entry, "" when none
	// Units is how many units a bulk reservation (TakeUpTo on one Redis)
	// holds: each is counted once in the counters and logged as ID:1 …
	// ID:Units. 0 for Take's, which log ID and count one.
	Units int
}

// LimitError says which limit denied a request and when to retry.
type LimitError struct {
	Rule       string        // Rule.Name or Cooldown.Name
	Label      string        // Rule.Label: the metric's name for the rule ("" means Rule)
	Key        string        // Rule.Key or Cooldown.Key
	Window     time.Duration // the violated window's length; the cooldown's For
	Limit      int           // the violated window's limit; 1 for a cooldown
	RetryAfter time.Duration // until the request would be admitted as far as this limit goes
	Cooldown   bool
	// LeftBehind, on a Redis Cluster, is what the refused request may
	// still hold because its undo failed twice (nil: nothing).
	LeftBehind *LeftBehind
}

// LeftBehind is what a refused request may still hold on a Redis Cluster:
// its slots are checked by separate scripts, those that admit it reserve
// before another refuses, and undoing them failed. Each piece expires by
// itself, within For; until then it counts against its rule (a cooldown
// refuses the recipient's next request). It names no key: keys carry
// recipients.
type LeftBehind struct {
	Reservation string        // the id the keys hold (a log's member, the cooldown's value)
	Rules       []string      // the rules and the cooldown that may still count it
	For         time.Duration // the longest of their windows: all of it is gone by then
	Err         error         // why the undo failed
}

func (e *LimitError) Error() string {
	name := e.Rule
	if name == "" {
		name = e.Key
	}
	if e.Cooldown {
		return fmt.Sprintf("%s: wait %s", name, time.Duration(e.RetryAfterSeconds())*time.Second)
	}
	return fmt.Sprintf("%s: over the %s limit (%d)", name, WindowName(e.Window), e.Limit)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimited }

// RetryAfterSeconds is RetryAfter rounded up to whole seconds (at least 1),
// as the Retry-After header wants: rounding down would invite a retry that is
// still denied.
func (e *LimitError) RetryAfterSeconds() int {
	s := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// WindowName names a window length for messages and metric labels.
func WindowName(d time.Duration) string {
	switch d {
	case time.Second:
		return "per-second"
	case time.Minute:
		return "per-minute"
	case time.Hour:
		return "per-hour"
	case 24 * time.Hour:
		return "per-day"
	}
	return "per " + d.String()
}

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
// the guard's three keys when it has one (guard.go).
// ARGV: reservation id, cooldown ms (0 = none), number of rules, mark ms
// (0 = no counter window), the clock's offset ms (Limiter.Advance; 0),
// then per rule: number of windows, then (length ms, limit, mode) per
// window, mode 0 for an exact window (the log), 1 for a counted one. After
// the rules: the guard's words (a count, 0 = none: guard.go), then the
// number of Then commands, then per command its number of words and the
// words.
// Returns {0, replies} when admitted (replies: one per Then command), else
// {1, rule, window, retry ms} for the violation with the longest retry
// (rule 0 = the cooldown); rule and window are 1-based positions in the
// arguments; or the guard's refusal, {1, -1, reason, retry ms, sent,
// verified, started}, when it is the longest.
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
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5])
local nows = int(now) -- as Redis wants it (counterLua's int)
local id = ARGV[1]
local cdms = tonumber(ARGV[2])
local nrules = tonumber(ARGV[3])
local markms = tonumber(ARGV[4])
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
` + guardLua + `
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
}

// prepare checks req and turns it into the scripts' keys and arguments,
// filling res's Keys, Counters and CooldownKey.
func (l *Limiter) prepare(req Request, res *Reservation) (prepared, error) {
	p := prepared{args: []any{res.ID, int64(0), 0, int64(0), l.offset.Load()}, guard: []any{0}}
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
	if len(keys) == 0 && len(req.Then) == 0 && req.Once == nil && req.Guard == nil {
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
	keys = append(keys, p.guardKeys...)
	args = append(args, p.guard...)
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
	out, err := refusal(raw)
	if err != nil {
		return nil, err
	}
	return nil, limitError(req, out, ruleIdx, winIdx)
}

// refusal reads the script's {1, rule, window, retry ms} reply, or the
// guard's {1, -1, reason, retry ms, sent, verified, started}.
func refusal(raw []any) ([]int64, error) {
	out := make([]int64, len(raw))
	for i, v := range raw {
		out[i], _ = v.(int64)
	}
	if len(out) != 4 && (len(out) != 7 || out[1] != -1) {
		return nil, fmt.Errorf("ratelimit: take: unexpected reply %v", raw)
	}
	return out, nil
}

// limitError turns a refusal into the LimitError naming the request's rule
// and window; rule and window are the script's 1-based positions, which
// ruleIdx and winIdx map back to req.
func limitError(req Request, out []int64, ruleIdx []int, winIdx [][]int) error {
	rule, window, retry := int(out[1]), int(out[2]), time.Duration(out[3])*time.Millisecond
	if rule == -1 && req.Guard != nil {
		return guardRefusal(out)
	}
	if rule == 0 {
		cd := req.Cooldown
		return &LimitError{Rule: cd.Name, Key: cd.Key, Window: cd.For, Limit: 1, RetryAfter: retry, Cooldown: true}
	}
	if rule < 1 || rule > len(ruleIdx) || window < 1 || window > len(winIdx[rule-1]) {
		return fmt.Errorf("ratelimit: take: reply names unknown window %d of rule %d", window, rule)
	}
	r := req.Rules[ruleIdx[rule-1]]
	w := r.Windows[winIdx[rule-1][window-1]]
	return &LimitError{Rule: r.Name, Label: r.Label, Key: r.Key, Window: w.Length, Limit: w.Limit, RetryAfter: retry}
}

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
