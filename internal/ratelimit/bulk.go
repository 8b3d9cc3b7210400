package ratelimit

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Bulk is what TakeUpTo admitted of a request's units.
type Bulk struct {
	// Admitted is how many units were admitted: the first ones, in order,
	// of those not Suppressed.
	Admitted int
	// Suppressed are the units (0-based, of the request's) refused by
	// their Request.SuppressEach: left out, as if they had not been
	// asked for, and nothing recorded for them.
	Suppressed map[int]*SuppressedError
	// Refused is the *LimitError of unit Admitted+1, the one every later
	// unit would get too; nil when all were admitted.
	Refused error
	// res holds the admitted units: one reservation for all of them on one
	// Redis, one per unit on a Redis Cluster (takeEach).
	res []*Reservation
}

// Reservation returns the reservation holding admitted unit i (0-based):
// the same one for every unit on one Redis.
func (b Bulk) Reservation(i int) *Reservation {
	if len(b.res) == 1 {
		return b.res[0]
	}
	return b.res[i]
}

// Reservations returns each reservation of the bulk once: what a rollback
// of all its units undoes.
func (b Bulk) Reservations() []*Reservation { return b.res }

// TakeUpTo admits as many units of req as its limits leave room for, up to
// len(each), the first ones first, as that many Takes one after another
// would, and runs each admitted unit's writes (each[i], the same number of
// commands for every unit; a unit's status record, say). It is for the
// units of one request that share every rule (a batch's recipients under
// the per-key, per-tenant and per-channel limits): on one Redis, one
// script counts them all at once, where a Take per unit would cost Redis a
// script and a dozen commands each (issue 22: a WeCom batch of 1,000 was
// 1,000 scripts). On a Redis Cluster it takes the units one by one, each
// with Take, since a rule's slot cannot see another's room.
//
// The units' writes run inside that one script, and Redis serves nobody
// else meanwhile: the API gives none for a batch's recipients and writes
// their records afterwards in bounded composites (Status.CreateBatch),
// since 1,000 records here held Redis for about 7 ms.
//
// req may have neither Cooldown, Once nor Then. Refused units record and
// write nothing. An error other than a refusal means Redis could not be
// asked: on one Redis nothing is known to be recorded (as with Take, the
// script is not a transaction); on a cluster the Bulk holds the units
// admitted before it, for the caller to roll back.
//
// The one script is never sent twice (the API's client does not retry,
// rdb.FailFast): unlike Take's, it does not recognise a second run of
// itself.
func (l *Limiter) TakeUpTo(ctx context.Context, req Request, each [][]rdb.Command) (Bulk, error) {
	if req.Cooldown != nil || req.Once != nil || len(req.Then) > 0 || req.Guard != nil || req.Suppress != nil {
		return Bulk{}, errors.New("ratelimit: take up to: no cooldown, once, guard, suppress or Then in a bulk request (give each unit's writes in each, its check in SuppressEach)")
	}
	n := len(each)
	if n == 0 {
		return Bulk{}, nil
	}
	sup, except, err := bulkSuppress(req.SuppressEach, n)
	if err != nil {
		return Bulk{}, err
	}
	per := len(each[0])
	for i, cmds := range each {
		if len(cmds) != per {
			return Bulk{}, fmt.Errorf("ratelimit: take up to: unit %d has %d commands, unit 0 has %d", i, len(cmds), per)
		}
	}
	if _, ok := rdb.AsCluster(l.rdb); ok {
		return l.takeEach(ctx, req, each)
	}
	res := &Reservation{ID: rand.Text()}
	p, err := l.prepare(req, res)
	if err != nil {
		return Bulk{}, err
	}
	if len(p.keys) == 0 && per == 0 && len(sup) == 0 {
		res.Units = n
		return Bulk{Admitted: n, res: []*Reservation{res}}, nil
	}
	keys, args := p.keys, p.args
	if p.markTag != "" {
		mk := l.markKey(p.markTag, res.ID)
		res.Marks = []string{mk}
		keys = append(keys, mk)
	}
	args = append(args, n, per, len(sup), len(except))
	for _, r := range except {
		args = append(args, r)
	}
	for _, u := range sup {
		keys = append(keys, req.SuppressEach[u].Key)
		args = append(args, u+1)
	}
	for _, cmds := range each {
		for _, c := range cmds {
			args = append(args, len(c))
			args = append(args, c...)
		}
	}
	raw, err := takeUpToScript.Run(ctx, l.rdb, keys, args...).Slice()
	if err != nil {
		return Bulk{}, fmt.Errorf("ratelimit: take up to: %w", err)
	}
	if len(raw) == 5 && raw[0] == int64(1) {
		out, err := refusal(raw[:4])
		if err != nil {
			return Bulk{}, err
		}
		return Bulk{Refused: limitError(req, out, p.ruleIdx, p.winIdx), Suppressed: bulkSuppressed(raw[4])}, nil
	}
	if (len(raw) != 4 && len(raw) != 7) || raw[0] != int64(0) {
		return Bulk{}, fmt.Errorf("ratelimit: take up to: unexpected reply %v", raw)
	}
	k, _ := raw[2].(int64)
	res.Replies, _ = raw[1].([]any)
	suppressed := bulkSuppressed(raw[3])
	if k == 0 && len(suppressed) == n {
		return Bulk{Suppressed: suppressed}, nil
	}
	if k < 1 || int(k) > n-len(suppressed) || len(res.Replies) != int(k)*per {
		return Bulk{}, fmt.Errorf("ratelimit: take up to: %d units admitted of %d, %d replies", k, n, len(res.Replies))
	}
	res.Units = int(k)
	b := Bulk{Admitted: int(k), res: []*Reservation{res}, Suppressed: suppressed}
	if len(raw) == 7 {
		out, err := refusal([]any{int64(1), raw[4], raw[5], raw[6]})
		if err != nil {
			return Bulk{}, err
		}
		b.Refused = limitError(req, out, p.ruleIdx, p.winIdx)
	}
	return b, nil
}

// takeEach is TakeUpTo on a Redis Cluster: a Take per unit until one is
// refused.
func (l *Limiter) takeEach(ctx context.Context, req Request, each [][]rdb.Command) (Bulk, error) {
	var b Bulk
	for i, cmds := range each {
		r := req
		r.Then, r.SuppressEach = cmds, nil
		if len(req.SuppressEach) > 0 {
			r.Suppress = req.SuppressEach[i]
		}
		res, err := l.Take(ctx, r)
		var se *SuppressedError
		if errors.As(err, &se) {
			if b.Suppressed == nil {
				b.Suppressed = map[int]*SuppressedError{}
			}
			b.Suppressed[i] = se
			continue
		}
		if errors.Is(err, ErrLimited) {
			b.Refused = err
			return b, nil
		}
		if err != nil {
			return b, err
		}
		b.res = append(b.res, res)
		b.Admitted++
	}
	return b, nil
}

// takeUpToScript is takeScript for n units of one request, all keys on one
// Redis: it finds how many units every window has room for, k (at most
// n), records k (each log gets members ID:1 … ID:k, each counter k, the
// mark once), and runs the first k units' commands.
//
// KEYS: per rule its log and its counter, then the mark when ARGV[4] > 0,
// then the suppression entries of the units checked.
// ARGV: reservation id, 0 (no cooldown), number of rules, mark ms, the
// clock's offset ms (Limiter.Advance), then per rule its windows as
// takeScript's, then n, the commands per unit, the number of units
// checked for suppression, the number of reasons that do not refuse and
// those reasons, the checked units' 1-based positions, and the
// units' commands (words, then the words) in order.
// A suppressed unit (suppress.go) is left out first: n and k count the
// others. sup is a list of {unit, reason, code, task, at}.
// Returns {1, rule, window, retry ms, sup} when not even one unit fits,
// else {0, replies, k, sup}, followed by unit k+1's rule, window and retry
// ms when k < n. Unit k+1's refusal is what takeScript would answer for one more
// request with the k counted: the longest wait among the windows it would
// overflow.
var takeUpToScript = redis.NewScript(counterLua + `
local a = 6
local rules = {}
for r = 1, nrules do
  local nw = tonumber(ARGV[a])
  a = a + 1
  local ws = {}
  for w = 1, nw do
    ws[w] = {tonumber(ARGV[a]), tonumber(ARGV[a + 1]), ARGV[a + 2]}
    a = a + 3
  end
  rules[r] = ws
end
local n = tonumber(ARGV[a])
local per = tonumber(ARGV[a + 1])
local nsup, nexc = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
a = a + 4
local exc = {}
for i = 1, nexc do exc[ARGV[a + i - 1]] = true end
a = a + nexc
local kb = 2 * nrules
if markms > 0 then kb = kb + 1 end
local skip, sup = {}, {}
for i = 1, nsup do
  local u = tonumber(ARGV[a + i - 1])
  local e = redis.call('HMGET', KEYS[kb + i], 'reason', 'code', 'task', 'at')
  if e[1] and not exc[e[1]] then
    skip[u] = true
    sup[#sup + 1] = {u, e[1], e[2] or '', e[3] or '', e[4] or ''}
  end
end
a = a + nsup
local units = n
n = n - #sup
if n == 0 then return {0, {}, 0, sup} end
local k = n
local spans, counted, rooms = {}, {}, {}
for r = 1, nrules do
  local key = KEYS[2 * r - 1]
  local ckey = KEYS[2 * r]
  local span, cw = 0, {}
  rooms[r] = {}
  for w, win in ipairs(rules[r]) do
    local len, lim, mode = win[1], win[2], win[3]
    local room
    if mode == '1' then
      local idx = math.floor(now / len)
      local el = now - idx * len
      local cur, prev, field = windowCounts(ckey, len, idx)
      cw[#cw + 1] = {len, field, cur}
      -- u more fit while prev × (len − el) / len + cur + u ≤ lim.
      room = math.floor(lim - (prev * (len - el) / len + cur))
      rooms[r][w] = {room, cur, prev, el}
    else
      if len > span then span = len end
      room = lim - redis.call('ZCOUNT', key, '(' .. int(now - len), '+inf')
      rooms[r][w] = {room}
    end
    if room < k then k = room end
  end
  spans[r] = span
  counted[r] = cw
end
if k < 0 then k = 0 end
local best = nil
if k < n then
  for r = 1, nrules do
    for w, win in ipairs(rules[r]) do
      local len, lim, mode = win[1], win[2], win[3]
      local rm = rooms[r][w]
      if rm[1] <= k then
        local retry
        if mode == '1' then
          retry = counterRetry(len, lim, rm[4], rm[2] + k, rm[3])
        else
          -- With k more entries at now, the one whose departure makes
          -- room is at rank card + k − lim: an older one, or a new one.
          local key = KEYS[2 * r - 1]
          local card = redis.call('ZCARD', key)
          local rank = card + k - lim
          retry = len
          if rank < card then
            local e = redis.call('ZRANGE', key, rank, rank, 'WITHSCORES')
            retry = tonumber(e[2]) + len - now
          end
          if retry < 1 then retry = 1 end
        end
        if best == nil or retry > best[3] then best = {r, w, retry} end
      end
    end
  end
end
if k == 0 then return {1, best[1], best[2], best[3], sup} end
for r = 1, nrules do
  if spans[r] > 0 then
    local key = KEYS[2 * r - 1]
    for u = 1, k, 500 do
      local m = {}
      for v = u, math.min(u + 499, k) do
        m[#m + 1] = nows
        m[#m + 1] = id .. ':' .. v
      end
      redis.call('ZADD', key, unpack(m))
    end
    redis.call('ZREMRANGEBYSCORE', key, '-inf', int(now - spans[r]))
    redis.call('PEXPIRE', key, int(spans[r]))
  end
  if #counted[r] > 0 then
    count(KEYS[2 * r], counted[r], k, now)
  end
end
if markms > 0 then
  redis.call('SET', KEYS[2 * nrules + 1], nows, 'PX', ARGV[4])
end
local replies = {}
local done = 0
for u = 1, units do
  if done >= k then break end
  for c = 1, per do
    local nw = tonumber(ARGV[a])
    if not skip[u] then replies[#replies + 1] = redis.call(unpack(ARGV, a + 1, a + nw)) end
    a = a + 1 + nw
  end
  if not skip[u] then done = done + 1 end
end
if best then return {0, replies, k, sup, best[1], best[2], best[3]} end
return {0, replies, k, sup}
`)

// bulkSuppress checks TakeUpTo's SuppressEach: nil, or one per unit (nil
// for a unit not checked), every check with the same exceptions, which
// the script is given once. It returns the checked units and the
// exceptions.
func bulkSuppress(each []*Suppress, n int) (units []int, except []string, err error) {
	if len(each) == 0 {
		return nil, nil, nil
	}
	if len(each) != n {
		return nil, nil, fmt.Errorf("ratelimit: take up to: %d suppression checks for %d units", len(each), n)
	}
	first := true
	for i, s := range each {
		if s == nil {
			continue
		}
		if err := s.check(); err != nil {
			return nil, nil, err
		}
		if first {
			except, first = s.Except, false
		} else if !slices.Equal(except, s.Except) {
			return nil, nil, errors.New("ratelimit: take up to: the units' suppression checks must have the same exceptions")
		}
		units = append(units, i)
	}
	return units, except, nil
}

// bulkSuppressed reads the bulk script's list of suppressed units.
func bulkSuppressed(v any) map[int]*SuppressedError {
	list, _ := v.([]any)
	if len(list) == 0 {
		return nil
	}
	out := make(map[int]*SuppressedError, len(list))
	for _, x := range list {
		e, _ := x.([]any)
		if len(e) != 5 {
			continue
		}
		u, _ := e[0].(int64)
		out[int(u)-1] = suppressedReply([]any{int64(1), int64(-2), e[1], e[2], e[3], e[4]})
	}
	return out
}
