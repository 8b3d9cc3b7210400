package rdb

import (
	"context"
	"crypto/sha1" //nolint:gosec // Redis names scripts by SHA-1
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Composer runs many scripts' calls as one script: the calls of a burst
// (claims of several deliveries, their sent marks) cost Redis one EVALSHA
// instead of one each (issue 22). Callers queue their scripts on a
// Recorder exactly as on a pipeline (redis.Script.Run with the Recorder as
// the Scripter); Exec then runs every recorded call, in order, inside one
// composite script per hash tag (a Redis Cluster script may only touch one
// slot), CompositeMax calls at most each, and hands each call its own
// reply.
//
// Each script keeps its own KEYS and ARGV: the composite wraps its source
// in a function of those two, so a script needs no change. A call whose
// script raises an error gets that error; the others still run, as they
// would as separate scripts.
//
// It learns a script's source the first time it is run through a Recorder
// (EVALSHA answers NOSCRIPT, go-redis falls back to EVAL with the source),
// so it needs no list of scripts. It is safe for concurrent use.
type Composer struct {
	mu      sync.Mutex
	sources map[string]int // sha → position in subs
	subs    []string
	script  *redis.Script // over subs, rebuilt when one is learned
	src     string        // script's source
}

// NewComposer returns an empty Composer.
func NewComposer() *Composer { return &Composer{sources: map[string]int{}} }

type call struct {
	sub  int
	keys []string
	args []any
	cmd  *redis.Cmd
}

// Recorder records script calls for Composer.Exec. Only scripts may be
// queued on it.
type Recorder struct {
	c     *Composer
	calls []call
}

// Recorder returns an empty Recorder.
func (c *Composer) Recorder() *Recorder { return &Recorder{c: c} }

// Len is how many calls r holds.
func (r *Recorder) Len() int { return len(r.calls) }

var errNotScript = errors.New("rdb: only scripts can be recorded for a composite")

func (r *Recorder) record(sub int, keys []string, args []any) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	r.calls = append(r.calls, call{sub: sub, keys: keys, args: args, cmd: cmd})
	return cmd
}

// EvalSha records a call of a script the Composer knows; for one it does
// not, it answers NOSCRIPT, so that redis.Script.Run sends its source.
func (r *Recorder) EvalSha(_ context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	r.c.mu.Lock()
	sub, ok := r.c.sources[sha1]
	r.c.mu.Unlock()
	if !ok {
		cmd := redis.NewCmd(context.Background())
		cmd.SetErr(redis.ErrNoScript)
		return cmd
	}
	return r.record(sub, keys, args)
}

// Eval records a call of src, learning it.
func (r *Recorder) Eval(_ context.Context, src string, keys []string, args ...any) *redis.Cmd {
	return r.record(r.c.learn(src), keys, args)
}

// EvalRO and EvalShaRO are not recorded: composites write.
func (r *Recorder) EvalRO(context.Context, string, []string, ...any) *redis.Cmd {
	cmd := redis.NewCmd(context.Background())
	cmd.SetErr(errNotScript)
	return cmd
}

// EvalShaRO: see EvalRO.
func (r *Recorder) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return r.EvalRO(ctx, sha, keys, args...)
}

// ScriptExists is not recorded.
func (r *Recorder) ScriptExists(context.Context, ...string) *redis.BoolSliceCmd {
	cmd := redis.NewBoolSliceCmd(context.Background())
	cmd.SetErr(errNotScript)
	return cmd
}

// ScriptLoad is not recorded.
func (r *Recorder) ScriptLoad(context.Context, string) *redis.StringCmd {
	cmd := redis.NewStringCmd(context.Background())
	cmd.SetErr(errNotScript)
	return cmd
}

var _ redis.Scripter = (*Recorder)(nil)

func (c *Composer) learn(src string) int {
	sum := sha1.Sum([]byte(src)) //nolint:gosec // Redis names scripts by SHA-1
	sha := hex.EncodeToString(sum[:])
	c.mu.Lock()
	defer c.mu.Unlock()
	if i, ok := c.sources[sha]; ok {
		return i
	}
	c.subs = append(c.subs, src)
	c.sources[sha] = len(c.subs) - 1
	c.script = nil
	return len(c.subs) - 1
}

// composite is the script over every known source: ARGV[1] is the number
// of calls; then per call its script's position (1-based), its number of
// keys and of arguments, and its arguments; KEYS are every call's keys in
// order. It returns one reply per call, an error reply for a call whose
// script raised one.
func (c *Composer) composite() *redis.Script {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.script != nil {
		return c.script
	}
	var b strings.Builder
	// Every call reads one clock: the composite runs atomically, as at one
	// instant, and a TIME from a script costs Redis about twice a GET
	// (callgrind: ~8,000 instructions), three times per delivery. The copy
	// keeps one call from changing what the next one reads.
	b.WriteString("local subs = {}\nlocal composite_clock\n" +
		"local function composite_time()\n" +
		"  if not composite_clock then composite_clock = redis.call('TIME') end\n" +
		"  return {composite_clock[1], composite_clock[2]}\n" +
		"end\n")
	for i, src := range c.subs {
		src = strings.ReplaceAll(src, "redis.call('TIME')", "composite_time()")
		fmt.Fprintf(&b, "subs[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, src)
	}
	b.WriteString(`
-- unpack copies in C: a Lua loop costs Redis about ten times as much per
-- argument (callgrind), and a burst has hundreds. unpack is bounded by
-- Lua's C stack (8,000 values), so a call with more takes this loop.
local function slice(t, from, n)
  local s = {}
  for j = 1, n do s[j] = t[from + j - 1] end
  return s
end
local out = {}
local n = tonumber(ARGV[1])
local k, a = 1, 2
for i = 1, n do
  local which, nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local ks, as
  if nk <= 4000 and na <= 4000 then
    ks, as = {unpack(KEYS, k, k + nk - 1)}, {unpack(ARGV, a, a + na - 1)}
  else
    ks, as = slice(KEYS, k, nk), slice(ARGV, a, na)
  end
  k, a = k + nk, a + na
  local ok, r = pcall(subs[which], ks, as)
  if not ok then
    if type(r) == 'table' and r.err then out[i] = r else out[i] = {err = tostring(r)} end
  elseif r == nil then
    out[i] = false
  else
    out[i] = r
  end
end
return out
`)
	c.src = b.String()
	c.script = redis.NewScript(c.src)
	return c.script
}

// Exec runs the calls of every recorder in one round trip: one composite
// script per hash tag (one for all on a single Redis) and per CompositeMax
// calls, all in one pipeline
// (Pipelined: a composite answered NOSCRIPT is loaded and sent again; on a
// Redis Cluster some nodes may know a composite others do not yet). Each
// recorded call gets its reply or error; Exec returns the first error of a
// composite, which every call of that composite carries too.
func (c *Composer) Exec(ctx context.Context, rdb redis.UniversalClient, recs ...*Recorder) error {
	var calls []*call
	for _, r := range recs {
		for i := range r.calls {
			calls = append(calls, &r.calls[i])
		}
	}
	if len(calls) == 0 {
		return nil
	}
	groups := [][]*call{calls}
	if _, ok := AsCluster(rdb); ok {
		groups = byTag(calls)
	}
	groups = chunked(groups, CompositeMax)
	script := c.composite()
	cmds := make([]*redis.Cmd, len(groups))
	err := Pipelined(ctx, rdb, func(p redis.Pipeliner) (func() error, error) {
		for i, g := range groups {
			nk, na := 0, 1
			for _, cl := range g {
				nk, na = nk+len(cl.keys), na+3+len(cl.args)
			}
			// Sized once: a burst's hundreds of arguments grew these a
			// slice copy at a time, the consumer's largest allocation.
			keys := make([]string, 0, nk)
			args := make([]any, 1, na)
			args[0] = len(g)
			for _, cl := range g {
				keys = append(keys, cl.keys...)
				args = append(args, cl.sub+1, len(cl.keys), len(cl.args))
				args = append(args, cl.args...)
			}
			cmds[i] = script.EvalSha(ctx, p, keys, args...)
		}
		return func() error { return nil }, nil // each composite's reply is read below
	}, func(ctx context.Context) error { return script.Load(ctx, rdb).Err() })
	for i, g := range groups {
		out, gerr := cmds[i].Slice()
		if gerr != nil && err != nil && IsNoScript(gerr) {
			gerr = errors.Join(gerr, err) // the script could not be loaded
		}
		if gerr == nil && len(out) != len(g) {
			gerr = fmt.Errorf("rdb: composite: %d replies for %d calls", len(out), len(g))
		}
		for j, cl := range g {
			switch {
			case gerr != nil:
				cl.cmd.SetErr(gerr)
			default:
				if e, ok := out[j].(error); ok {
					cl.cmd.SetErr(e)
				} else if out[j] == nil {
					cl.cmd.SetErr(redis.Nil) // as a script's nil reply on its own
				} else {
					cl.cmd.SetVal(out[j])
				}
			}
		}
		if err == nil && gerr != nil {
			err = gerr
		}
	}
	return err
}

// CompositeMax is the most calls one composite runs. Redis runs a script
// to its end before it serves anyone else, and a call costs it a few
// microseconds (a status update about 7 µs): a WeCom batch's 1,000
// records as one composite held Redis for about 7 ms, in front of every
// code's claim. Composites of at most 128 calls, still in one round trip,
// each hold it under a millisecond and cost one EVALSHA per 128 calls
// instead of one per call.
const CompositeMax = 128

// chunked splits every group into runs of at most limit calls, keeping their
// order. A recorder's calls may land in two composites: they were never
// atomic together (on a cluster their tags split them too).
func chunked(groups [][]*call, limit int) [][]*call {
	var out [][]*call
	for _, g := range groups {
		for len(g) > limit {
			out = append(out, g[:limit])
			g = g[limit:]
		}
		out = append(out, g)
	}
	return out
}

// byTag groups calls by the hash tag of their first key, keeping their
// order within a group.
func byTag(calls []*call) [][]*call {
	idx := map[string]int{}
	var out [][]*call
	for _, cl := range calls {
		t := ""
		if len(cl.keys) > 0 {
			t = hashTag(cl.keys[0])
		}
		i, ok := idx[t]
		if !ok {
			i = len(out)
			idx[t] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], cl)
	}
	return out
}

// Pipelined runs the commands queue puts on a pipeline in one round trip
// and returns the error of the function queue returned, which reads each
// command's result.
//
// Scripts on a pipeline do not fall back from EVALSHA to EVAL when Redis
// has forgotten them (a restart, SCRIPT FLUSH, a new cluster node): they
// fail with NOSCRIPT, without having run. Pipelined then calls load and
// sends those commands again (up to noScriptRounds times), and only
// those: on a Redis Cluster the same pipeline's commands on nodes that
// knew the script did run, and must not run twice (a claim would find its
// own lease, an attempt would be counted twice). finish reads every
// command's final reply.
func Pipelined(ctx context.Context, c redis.Cmdable, queue func(redis.Pipeliner) (func() error, error), load func(context.Context) error) error {
	p := c.Pipeline()
	finish, err := queue(p)
	if err != nil {
		return err
	}
	cmds, _ := p.Exec(ctx) // each command's own error is read by finish
	for round := 0; round < noScriptRounds; round++ {
		var again []redis.Cmder
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil && IsNoScript(err) {
				again = append(again, cmd)
			}
		}
		if len(again) == 0 {
			break
		}
		if lerr := load(ctx); lerr != nil {
			return errors.Join(finish(), lerr)
		}
		p := c.Pipeline()
		for _, cmd := range again {
			_ = p.Process(ctx, cmd) // queues it; its reply replaces the NOSCRIPT
		}
		cmds, _ = p.Exec(ctx)
	}
	return finish()
}

// noScriptRounds bounds Pipelined's loads: a script flushed again between
// the load and the resend (SCRIPT FLUSH by someone else, a second
// failover) gets another round, and only what did not run goes again.
const noScriptRounds = 3

// IsNoScript says whether err is Redis refusing EVALSHA for a script it
// has not loaded (a restart, a failover, a cluster node new to it).
func IsNoScript(err error) bool {
	return strings.Contains(err.Error(), "NOSCRIPT")
}

// hashTag is what Redis Cluster hashes of key: the part between the first
// '{' and the next '}' when it is not empty, else the whole key. Keys with
// the same hash tag are in the same slot.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
