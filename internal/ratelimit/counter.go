package ratelimit

import "time"

// A window whose limit exceeds the limiter's ExactMax (LIMIT_EXACT_MAX) is
// not logged entry by entry: at the API's full speed an exact per-minute
// log holds hundreds of thousands of entries per key, trimmed on every
// call. It is counted instead by a sliding-window counter (Cloudflare's
// approximation): the counts of the current fixed window and of the one
// before it, the latter weighted by the share of it the sliding window
// still covers:
//
//	estimate = previous × (length − elapsed) / length + current
//
// and a request is admitted while estimate + 1 ≤ limit. The two counts are
// fields of one small hash per rule (…:ctr:KEY, fields "length:index").
//
// Error bound, which docs/commands.md and docs/configuration.md repeat next to each limit:
//   - no fixed (aligned) window ever admits more than the limit, since
//     current + 1 ≤ limit; so any span of the window's length, which
//     overlaps two fixed windows, admits at most twice the limit (reached
//     only when the previous window's requests all came at its very end);
//   - it assumes the previous window's requests were spread evenly; under
//     a steady overload each complete fixed window admits at least 90% of
//     the limit, and any sliding window about the limit
//     (TestCounterBoundAt5000PerSecond: 5,000 req/s offered against 2,000
//     a second, at most 1.13× the limit in a sliding second, counted by
//     the client); Cloudflare measured 0.003% wrong decisions on real
//     traffic.
//
// Below ExactMax (per recipient, per IP, cooldowns) limits stay exact.
//
// A reservation that counted writes a mark (…:{tag}:rsv:ID, its value the
// Redis time it counted at) in each slot it counted in. The mark is what a
// second run of the same take script finds (it then counts nothing more),
// and what Rollback decrements by: the fixed windows that time fell in.
// It lives markTTL; a rollback later than that leaves the request counted
// (a refusal too many, never an admission too many).

// DefaultExactMax is LIMIT_EXACT_MAX's default.
const DefaultExactMax = 1000

// markTTL bounds how long a counted reservation can still be rolled back
// or recognised on a second run: both happen within a request's deadline
// (PUBLISH_TIMEOUT, REDIS_TIMEOUT), well under this.
const markTTL = 30 * time.Second

// WithExactMax sets the largest limit kept as an exact log; larger ones are
// counted approximately. n <= 0 keeps the default. It returns l.
func (l *Limiter) WithExactMax(n int) *Limiter {
	if n > 0 {
		l.exactMax = n
	}
	return l
}

// ExactMax is the largest limit the limiter keeps exact.
func (l *Limiter) ExactMax() int { return l.exactMax }

// counterLua holds the Lua both take scripts count with (see above).
//
// counterRetry is how long until one more request fits a window whose
// current fixed window holds cur (this request's own included when it is
// a bulk's next unit) and the previous one prev, el ms into the current
// one: if the current window alone is full, until it ends and enough of
// it has slid out; else until enough of the previous one has.
//
// int formats an integral Lua number for redis.call and for field names.
// Redis 7.0 turns a number argument into a string with "%.17g", and Lua's
// ".." with "%.14g": both go through floating-point printing, which was
// about a tenth of the API's take script (callgrind, issue 22). "%d"
// prints the same digits for the integral milliseconds and counts used
// here, several times cheaper.
//
// windowCounts reads the counts of fixed window idx of length len and of
// the one before it, in one call, and returns the current one's field
// name with them, for count.
//
// count adds by to the fixed windows cw ({length, field, count before}
// triples) of the counter hash ckey. When it starts a window (its count
// was 0), and only then, it drops the fields older than the previous
// window once the hash holds more than the two live ones per window, and
// keeps the hash for two of its longest window from now: a field is read
// until its next window ends, at most two lengths after it was started.
// Doing both on every request cost two Redis calls per counted rule for
// nothing (issue 22).
//
// Its last lines are both take scripts' first: the time (the server's,
// plus ARGV[5], the tests' clock offset), the request id (ARGV[1]), the
// number of rules (ARGV[3]) and the mark's lifetime in ms (ARGV[4]).
const counterLua = `
local function int(n) return string.format('%d', n) end
local function windowCounts(ckey, len, idx)
  local l = int(len) .. ':'
  local f = l .. int(idx)
  local v = redis.call('HMGET', ckey, f, l .. int(idx - 1))
  return tonumber(v[1]) or 0, tonumber(v[2]) or 0, f
end
local function counterRetry(len, lim, el, cur, prev)
  local retry
  if cur + 1 > lim then
    retry = len - el + math.ceil(len * (1 - (lim - 1) / cur))
  else
    retry = math.ceil(len - len * (lim - 1 - cur) / prev) - el
  end
  if retry < 1 then retry = 1 end
  return retry
end
local function count(ckey, cw, by, now)
  local keep, started = 0, false
  for _, c in ipairs(cw) do
    redis.call('HINCRBY', ckey, c[2], int(by))
    if 2 * c[1] > keep then keep = 2 * c[1] end
    if c[3] == 0 then started = true end
  end
  if not started then return end
  if redis.call('HLEN', ckey) > 2 * #cw then
    local fs = redis.call('HKEYS', ckey)
    for _, f in ipairs(fs) do
      local len, idx = string.match(f, '^(%d+):(%d+)$')
      if len == nil or tonumber(idx) < math.floor(now / tonumber(len)) - 1 then
        redis.call('HDEL', ckey, f)
      end
    end
  end
  redis.call('PEXPIRE', ckey, int(keep))
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + tonumber(ARGV[5])
local nows = int(now) -- as Redis wants it
local id = ARGV[1]
local nrules = tonumber(ARGV[3])
local markms = tonumber(ARGV[4])
`
