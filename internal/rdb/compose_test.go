package rdb_test

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Many scripts' calls from several recorders run as one script (one per
// hash tag on a cluster), in order, each getting its own reply: values,
// nil, and an error that leaves the other calls alone.
func TestComposerRunsManyCallsAsOneScript(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	get := redis.NewScript(`local v = redis.call('GET', KEYS[1]); if v then return {v, ARGV[1]} end; return nil`)
	boom := redis.NewScript(`return redis.call('HSET', KEYS[1])`) // wrong arity: an error

	evals := r.CountScripts()
	c := rdb.NewComposer()
	// Warm: the composite over these three scripts is new to Redis once
	// (NOSCRIPT, load, again); what is counted is the steady state.
	warm := c.Recorder()
	incr.Run(ctx, warm, []string{r.Prefix + "{w}:k"}, 1)
	get.Run(ctx, warm, []string{r.Prefix + "{w}:k"}, "x")
	boom.Run(ctx, warm, []string{r.Prefix + "{w}:h"})
	require.NoError(t, c.Exec(ctx, r.Client, warm))
	evals.Store(0)
	const n = 20
	recs := make([]*rdb.Recorder, n)
	incrs := make([]*redis.Cmd, n)
	gets := make([]*redis.Cmd, n)
	missing := make([]*redis.Cmd, n)
	var bad *redis.Cmd
	for i := range n {
		recs[i] = c.Recorder()
		key := fmt.Sprintf("%s{t%d}:k", r.Prefix, i%4) // four tags, five calls each
		incrs[i] = incr.Run(ctx, recs[i], []string{key}, 1)
		gets[i] = get.Run(ctx, recs[i], []string{key}, fmt.Sprint(i))
		missing[i] = get.Run(ctx, recs[i], []string{key + ":none"}, "x")
		if i == 3 {
			bad = boom.Run(ctx, recs[i], []string{key + ":h"})
		}
	}
	require.Zero(t, evals.Load(), "recording sends nothing")
	require.NoError(t, c.Exec(ctx, r.Client, recs...))
	want := int64(1)
	if _, ok := rdb.AsCluster(r.Client); ok {
		want = 4 // one per tag
	}
	require.Equal(t, want, evals.Load(), "one script per hash tag for %d calls", 3*n+1)
	for i := range n {
		v, err := incrs[i].Int64()
		require.NoError(t, err)
		require.EqualValues(t, i/4+1, v, "call %d ran in order", i)
		g, err := gets[i].Slice()
		require.NoError(t, err)
		require.Equal(t, []any{fmt.Sprint(i/4 + 1), fmt.Sprint(i)}, g)
		require.ErrorIs(t, missing[i].Err(), redis.Nil)
	}
	require.Error(t, bad.Err())
	require.NotErrorIs(t, bad.Err(), redis.Nil)

	// Forgotten by Redis: loaded again, and still run once.
	require.NoError(t, r.Client.ScriptFlush(ctx).Err())
	rec := c.Recorder()
	again := incr.Run(ctx, rec, []string{r.Prefix + "{t0}:k"}, 10)
	require.NoError(t, c.Exec(ctx, r.Client, rec))
	v, err := again.Int64()
	require.NoError(t, err)
	require.EqualValues(t, 15, v)
}

// On a Redis Cluster a composite may be known to some masters and not yet
// to others (another flush loaded it a moment ago, or a new master came
// up). The composites that ran must not run again when the others are
// sent after NOSCRIPT: a claim run twice would find its own lease and call
// it held.
func TestComposerRunsACompositeOnceWhenOnlySomeNodesKnowIt(t *testing.T) {
	r := testenv.NewRedis(t)
	cc, ok := rdb.AsCluster(r.Client)
	if !ok {
		t.Skip("one Redis knows a script or does not: needs a Redis Cluster (make test-cluster)")
	}
	ctx := testenv.Context(t, 10*time.Second)
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	c := rdb.NewComposer()
	warm := c.Recorder()
	incr.Run(ctx, warm, []string{r.Prefix + "{warm}:k"}, 1) // learns incr
	require.NoError(t, c.Exec(ctx, r.Client, warm))

	// Forgotten everywhere, then known to the master of tag t0 only.
	require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
		return n.ScriptFlush(ctx).Err()
	}))
	keys := make([]string, 12)
	masters := map[string]bool{}
	for i := range keys {
		keys[i] = fmt.Sprintf("%s{t%d}:k", r.Prefix, i)
		m, err := cc.MasterForKey(ctx, keys[i])
		require.NoError(t, err)
		masters[m.Options().Addr] = true
	}
	require.Greater(t, len(masters), 1, "the keys spread over more than one master")
	first, err := cc.MasterForKey(ctx, keys[0])
	require.NoError(t, err)
	require.NoError(t, first.ScriptLoad(ctx, c.CompositeSource()).Err())

	rec := c.Recorder()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = incr.Run(ctx, rec, []string{k}, 1)
	}
	require.NoError(t, c.Exec(ctx, r.Client, rec))
	for i, k := range keys {
		v, err := cmds[i].Int64()
		require.NoError(t, err)
		require.EqualValues(t, 1, v, "%s ran once", k)
		got, err := r.Client.Get(ctx, k).Int64()
		require.NoError(t, err)
		require.EqualValues(t, 1, got, "%s ran once", k)
	}
}

// The calls of one composite read one clock: a script's TIME is Redis's
// own, not rewritten away, and every call of the composite sees the same
// instant, as if they ran at once (they do: a script is atomic). Alone,
// the same script reads TIME itself.
func TestComposerCallsShareOneClock(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	clock := redis.NewScript(`local t = redis.call('TIME')
return {t[1], t[2], ARGV[1]}`)
	before, err := r.Client.Time(ctx).Result()
	require.NoError(t, err)

	c := rdb.NewComposer()
	rec := c.Recorder()
	const n = 50
	cmds := make([]*redis.Cmd, n)
	for i := range n {
		cmds[i] = clock.Run(ctx, rec, []string{r.Prefix + "{clock}:k"}, i)
	}
	require.NoError(t, c.Exec(ctx, r.Client, rec))
	var first []any
	for i, cmd := range cmds {
		got, err := cmd.Slice()
		require.NoError(t, err)
		require.Len(t, got, 3)
		require.Equal(t, fmt.Sprint(i), got[2], "call %d got its own arguments", i)
		if i == 0 {
			first = got[:2]
			continue
		}
		require.Equal(t, first, got[:2], "call %d read the composite's clock", i)
	}
	secs, err := strconv.ParseInt(first[0].(string), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, secs, before.Unix(), "Redis's own TIME, not a stand-in")

	alone, err := clock.Run(ctx, r.Client, []string{r.Prefix + "{clock}:k"}, "x").Slice()
	require.NoError(t, err)
	require.Equal(t, "x", alone[2])
	later, err := strconv.ParseInt(alone[0].(string), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, later, secs)
}

// A call's KEYS and ARGV reach its script whole at any size: the composite
// copies them with unpack, which Lua bounds (8,000 values), and takes a
// loop beyond that.
func TestComposerPassesLargeArgumentLists(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	count := redis.NewScript(`return {#KEYS, #ARGV, ARGV[1], ARGV[#ARGV]}`)
	c := rdb.NewComposer()
	rec := c.Recorder()
	sizes := []int{0, 1, 4000, 4001, 10000}
	cmds := make([]*redis.Cmd, len(sizes))
	for i, n := range sizes {
		args := make([]any, n)
		for j := range args {
			args[j] = fmt.Sprint("a", j)
		}
		cmds[i] = count.Run(ctx, rec, []string{r.Prefix + "{big}:k"}, args...)
	}
	require.NoError(t, c.Exec(ctx, r.Client, rec))
	for i, n := range sizes {
		got, err := cmds[i].Slice()
		require.NoError(t, err, "%d arguments", n)
		require.EqualValues(t, 1, got[0])
		require.EqualValues(t, n, got[1], "%d arguments arrived", n)
		if n > 0 {
			require.Equal(t, "a0", got[2])
			require.Equal(t, fmt.Sprint("a", n-1), got[3])
		}
	}
}

// A burst longer than CompositeMax calls (a WeCom batch's 1,000 status
// records) goes as several composites in the same round trip, none
// holding Redis for more than CompositeMax calls, every call still run
// once, in order, with its own reply.
func TestComposerSplitsLongBurstsIntoBoundedComposites(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	c := rdb.NewComposer()
	warm := c.Recorder()
	incr.Run(ctx, warm, []string{r.Prefix + "{w}:k"}, 1)
	require.NoError(t, c.Exec(ctx, r.Client, warm))

	// How many calls each composite sent carries: its ARGV[1].
	var mu sync.Mutex
	var sizes []int64
	r.AddHook(testenv.CommandHook(func(cmd redis.Cmder) error {
		if _, args, ok := testenv.IsScript(cmd); ok {
			n, _ := args[0].(int)
			mu.Lock()
			sizes = append(sizes, int64(n))
			mu.Unlock()
		}
		return nil
	}))
	for _, tc := range []struct {
		calls int
		want  []int64
	}{
		{calls: 1, want: []int64{1}},
		{calls: rdb.CompositeMax, want: []int64{rdb.CompositeMax}},
		{calls: rdb.CompositeMax + 1, want: []int64{rdb.CompositeMax, 1}},
		{calls: 1000, want: []int64{128, 128, 128, 128, 128, 128, 128, 104}},
	} {
		t.Run(strconv.Itoa(tc.calls), func(t *testing.T) {
			mu.Lock()
			sizes = nil
			mu.Unlock()
			key := fmt.Sprintf("%s{split%d}:k", r.Prefix, tc.calls)
			// Three recorders, as three deliveries of a burst: the
			// split does not follow their boundaries.
			recs := []*rdb.Recorder{c.Recorder(), c.Recorder(), c.Recorder()}
			cmds := make([]*redis.Cmd, tc.calls)
			for i := range cmds {
				cmds[i] = incr.Run(ctx, recs[i*len(recs)/tc.calls], []string{key}, 1)
			}
			require.NoError(t, c.Exec(ctx, r.Client, recs...))
			mu.Lock()
			got := sizes
			mu.Unlock()
			require.Equal(t, tc.want, got, "calls per composite")
			for i, cmd := range cmds {
				v, err := cmd.Int64()
				require.NoError(t, err)
				require.EqualValues(t, i+1, v, "call %d ran once, in order", i)
			}
		})
	}
}
