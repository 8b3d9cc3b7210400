package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Guard watches one destination (the API's: a tenant's phone-number
// prefix) for traffic that is sent and never verified, the mark of SMS
// pumping, and blocks it. It rides in the Take of the request it judges:
// the same script reads the destination's block and counts, admits or
// refuses, and counts the admitted request, so a guarded request costs no
// round trip more than an unguarded one.
//
// Three hashes, one hash tag, so that one script (one Redis Cluster slot)
// holds them:
//   - Sent counts the admitted requests per fixed window of Window and of
//     Baseline, in counter.go's fields ("length:index"), so that a
//     Rollback takes a request back out as it does a rule's count;
//   - Verified counts the destination's verified codes per fixed window
//     of Window, the same fields, written by whoever verifies
//     (verify.Tally);
//   - Block, while it lives, refuses every request to the destination:
//     until, since, reason and the counts that decided.
//
// Counts over a sliding window are counter.go's estimate: the current
// fixed window's count plus the previous one's, weighted by how much of
// it the sliding window still covers.
//
// A request is refused, and a block of BlockFor begins, when either:
//   - the destination had at least MinSends requests admitted in the
//     sliding Window and fewer than MinVerified of them were verified; or
//   - it had at least SpikeMin admitted in the Window, and more than
//     SpikeFactor times its own baseline: the average per Window over the
//     rest of the sliding Baseline (the Window's own count left out).
//
// Refused requests are not counted: a block holds the count where it was.
type Guard struct {
	Sent, Verified, Block string
	// Destination is what it guards (the API: a number's prefix), named
	// in its refusal.
	Destination string
	// Label is kept with a block for whoever lists it (the API: the
	// prefix's country).
	Label            string
	MinSends         int
	MinVerified      float64
	SpikeFactor      float64
	SpikeMin         int
	Window, Baseline time.Duration
	BlockFor         time.Duration
}

// GuardReason says why a Guard blocked a destination.
type GuardReason int

// Guard reasons, as the take script and the block record spell them.
const (
	GuardUnverified GuardReason = 1 // enough sent, too few verified
	GuardSpike      GuardReason = 2 // far above the destination's baseline
)

func (r GuardReason) String() string {
	switch r {
	case GuardUnverified:
		return "unverified"
	case GuardSpike:
		return "spike"
	}
	return "unknown"
}

// GuardError is a request refused by its Request.Guard: the destination
// is blocked. It matches ErrLimited.
type GuardError struct {
	Reason GuardReason
	// RetryAfter is what is left of the block.
	RetryAfter time.Duration
	// Sent and Verified are the sliding Window's counts the block began
	// with.
	Sent, Verified int
	// Started is true for the request whose check began the block.
	Started bool
	// Destination and Label are the refusing Guard's.
	Destination, Label string
	// LeftBehind is set on a Redis Cluster when the refused request's
	// reservations in other slots could not be undone (see LimitError).
	LeftBehind *LeftBehind
}

func (e *GuardError) Error() string {
	return fmt.Sprintf("guard: destination blocked (%s: %d sent, %d verified) for %s more", e.Reason, e.Sent, e.Verified, e.RetryAfter.Round(time.Second))
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *GuardError) Is(target error) bool { return target == ErrLimited }

// guardWords is how many arguments a guard takes after its count word.
const guardWords = 8

// args are the guard's words in the take script: its count, then
// MinSends, MinVerified in permille, SpikeFactor in hundredths, SpikeMin,
// Window, Baseline and BlockFor in ms, and the Label.
func (g *Guard) args() []any {
	return []any{guardWords, g.MinSends, int64(g.MinVerified*1000 + 0.5), int64(g.SpikeFactor*100 + 0.5), g.SpikeMin,
		ceilMS(g.Window), ceilMS(g.Baseline), ceilMS(g.BlockFor), g.Label}
}

func (g *Guard) keys() []string { return []string{g.Sent, g.Verified, g.Block} }

func (g *Guard) check() error {
	if g.Sent == "" || g.Verified == "" || g.Block == "" {
		return errors.New("ratelimit: guard: needs its three keys")
	}
	if t := hashTag(g.Sent); hashTag(g.Verified) != t || hashTag(g.Block) != t || t == g.Sent {
		return fmt.Errorf("ratelimit: guard: keys %s, %s, %s must share one hash tag", g.Sent, g.Verified, g.Block)
	}
	switch {
	case g.MinSends < 1, g.SpikeMin < 1:
		return fmt.Errorf("ratelimit: guard: MinSends %d and SpikeMin %d must be positive", g.MinSends, g.SpikeMin)
	case g.MinVerified < 0 || g.MinVerified > 1:
		return fmt.Errorf("ratelimit: guard: MinVerified %g must be between 0 and 1", g.MinVerified)
	case g.SpikeFactor < 1:
		return fmt.Errorf("ratelimit: guard: SpikeFactor %g must be at least 1", g.SpikeFactor)
	case g.Window < time.Second || g.Baseline <= g.Window || g.BlockFor < time.Second:
		return fmt.Errorf("ratelimit: guard: Window %s (≥1s), Baseline %s (longer) and BlockFor %s (≥1s)", g.Window, g.Baseline, g.BlockFor)
	}
	return nil
}

// guardLua is the take script's guard (takeLua), after its rules: it reads
// the guard's words at ARGV[a] (a count, 0 = no guard) and its keys after
// the cooldown, the mark and the suppression entry (suppress.go). Unless the script runs again for its own
// reservation, it refuses when the destination is blocked, or blocks it
// now (a write even though the request is refused: the block is the
// destination's state, not the request's) when its counts say so, and
// else leaves in gcw what count() must add once the request is admitted.
// A refusal is {1, -1, reason, retry ms, sent, verified, started}.
const guardLua = `
local gcw, gsent = nil, nil
local ng = tonumber(ARGV[a]) or 0
if ng > 0 then
  local gb = 2 * nrules + supk
  if cdms > 0 then gb = gb + 1 end
  if markms > 0 then gb = gb + 1 end
  gsent = KEYS[gb + 1]
  local vkey, bkey = KEYS[gb + 2], KEYS[gb + 3]
  local gmin, gratio, gfactor, gspike = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 4])
  local gwin, gbase, gblock = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), tonumber(ARGV[a + 7])
  if not again then
    local g = nil
    local b = redis.call('HMGET', bkey, 'until', 'reason', 'sent', 'verified')
    local untl = tonumber(b[1])
    if untl and untl > now then
      g = {1, -1, tonumber(b[2]) or 0, untl - now, tonumber(b[3]) or 0, tonumber(b[4]) or 0, 0}
    else
      local wi, bi = math.floor(now / gwin), math.floor(now / gbase)
      local wf, bf = int(gwin) .. ':', int(gbase) .. ':'
      local s = redis.call('HMGET', gsent, wf .. int(wi), wf .. int(wi - 1), bf .. int(bi), bf .. int(bi - 1))
      local v = redis.call('HMGET', vkey, wf .. int(wi), wf .. int(wi - 1))
      local wshare = (gwin - (now - wi * gwin)) / gwin
      local bshare = (gbase - (now - bi * gbase)) / gbase
      local cw, cb = tonumber(s[1]) or 0, tonumber(s[3]) or 0
      local sent = (tonumber(s[2]) or 0) * wshare + cw
      local ver = (tonumber(v[2]) or 0) * wshare + (tonumber(v[1]) or 0)
      local base = ((tonumber(s[4]) or 0) * bshare + cb - sent) * gwin / (gbase - gwin)
      local reason = 0
      if sent >= gmin and ver * 1000 < gratio * sent then
        reason = 1
      elseif sent >= gspike and sent * 100 > gfactor * base then
        reason = 2
      end
      if reason > 0 then
        local ns, nv = math.floor(sent + 0.5), math.floor(ver + 0.5)
        redis.call('HSET', bkey, 'until', int(now + gblock), 'since', int(now), 'reason', reason, 'sent', ns, 'verified', nv, 'label', ARGV[a + 8])
        redis.call('PEXPIRE', bkey, int(gblock))
        g = {1, -1, reason, gblock, ns, nv, 1}
      else
        gcw = {{gwin, wf .. int(wi), cw}, {gbase, bf .. int(bi), cb}}
      end
    end
    if g and (best == nil or g[4] > best[4]) then best = g end
  end
  a = a + ng
end
a = a + 1
`

// guardRefusal turns the script's guard refusal into its error.
func guardRefusal(out []int64) *GuardError {
	return &GuardError{Reason: GuardReason(out[2]), RetryAfter: time.Duration(out[3]) * time.Millisecond,
		Sent: int(out[4]), Verified: int(out[5]), Started: out[6] == 1}
}
