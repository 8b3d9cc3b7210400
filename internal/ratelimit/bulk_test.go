package ratelimit_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// units are n units' writes: a key per unit, so a test sees which ran.
func units(e env, tag string, n int) [][]rdb.Command {
	each := make([][]rdb.Command, n)
	for i := range each {
		each[i] = []rdb.Command{{"SET", e.r.Prefix + "unit:" + tag + ":" + strconv.Itoa(i), "1", "PX", 60000}}
	}
	return each
}

// written reports which of n units' writes are in Redis.
func written(t *testing.T, e env, tag string, n int) []bool {
	t.Helper()
	out := make([]bool, n)
	for i := range out {
		c, err := e.r.Client.Exists(e.ctx, e.r.Prefix+"unit:"+tag+":"+strconv.Itoa(i)).Result()
		require.NoError(t, err)
		out[i] = c == 1
	}
	return out
}

// bulkModes are the two ways a window is kept: an exact log (limit up to
// the limiter's ExactMax) and a sliding-window counter (above it).
var bulkModes = []struct {
	name     string
	exactMax int
}{
	{"exact", 1000},
	{"counted", 2},
}

// inBothModes runs f with a limiter of each of bulkModes, in parallel.
func inBothModes(t *testing.T, f func(t *testing.T, e env)) {
	t.Helper()
	for _, m := range bulkModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			f(t, counted(t, m.exactMax))
		})
	}
}

// TakeUpTo admits the first units that fit, as Takes one after another
// would, writes only theirs, and refuses the rest with the limit's error.
func TestTakeUpToAdmitsWhatFits(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, e env) {
		req := ratelimit.Request{Rules: []ratelimit.Rule{
			rule("per API key", "apikey:k", win(24*time.Hour, 50)),
			rule("global wecom", "global:wecom", win(24*time.Hour, 5)),
		}}
		b, err := e.lim.TakeUpTo(e.ctx, req, units(e, "a", 8))
		require.NoError(t, err)
		require.Equal(t, 5, b.Admitted)
		le := limitErr(t, b.Refused)
		require.Equal(t, "global wecom", le.Rule, "the binding rule")
		require.Equal(t, 5, le.Limit)
		require.Positive(t, le.RetryAfter)
		require.Equal(t, []bool{true, true, true, true, true, false, false, false}, written(t, e, "a", 8))
		for i := range b.Admitted {
			require.NotNil(t, b.Reservation(i))
		}

		// Counted like five Takes: the next Take and the next bulk are refused.
		require.Equal(t, "global wecom", e.deny(t, req).Rule)
		b, err = e.lim.TakeUpTo(e.ctx, req, units(e, "b", 3))
		require.NoError(t, err)
		require.Zero(t, b.Admitted)
		require.Equal(t, "global wecom", limitErr(t, b.Refused).Rule)
		require.Equal(t, []bool{false, false, false}, written(t, e, "b", 3), "a refused unit writes nothing")
	})
}

// What Takes counted before a bulk leaves it that much less room, and a
// bulk that fits whole refuses nothing.
func TestTakeUpToCountsWithTake(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, e env) {
		req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per tenant", "tenant:t", win(24*time.Hour, 10))}}
		for range 3 {
			_, err := e.lim.Take(e.ctx, req)
			require.NoError(t, err)
		}
		b, err := e.lim.TakeUpTo(e.ctx, req, units(e, "a", 4))
		require.NoError(t, err)
		require.Equal(t, 4, b.Admitted)
		require.NoError(t, b.Refused)
		b, err = e.lim.TakeUpTo(e.ctx, req, units(e, "b", 4))
		require.NoError(t, err)
		require.Equal(t, 3, b.Admitted, "10 - 3 - 4")
		require.Equal(t, "per tenant", limitErr(t, b.Refused).Rule)
	})
}

// Rolling back a bulk's reservations gives back every unit it counted, in
// logs and counters alike, and nothing else.
func TestTakeUpToRollback(t *testing.T) {
	t.Parallel()
	inBothModes(t, func(t *testing.T, e env) {
		req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per API key", "apikey:k", win(24*time.Hour, 6))}}
		kept, err := e.lim.TakeUpTo(e.ctx, req, units(e, "kept", 2))
		require.NoError(t, err)
		require.Equal(t, 2, kept.Admitted)
		undone, err := e.lim.TakeUpTo(e.ctx, req, units(e, "undone", 4))
		require.NoError(t, err)
		require.Equal(t, 4, undone.Admitted)
		require.Equal(t, "per API key", e.deny(t, req).Rule, "6 of 6 taken")
		for _, res := range undone.Reservations() {
			require.NoError(t, e.lim.Rollback(e.ctx, res))
			require.NoError(t, e.lim.Rollback(e.ctx, res), "a second rollback changes nothing")
		}
		b, err := e.lim.TakeUpTo(e.ctx, req, units(e, "again", 6))
		require.NoError(t, err)
		require.Equal(t, 4, b.Admitted, "the 4 rolled back are free again, the 2 kept still count")
	})
}

func TestTakeUpToRefusesWhatItCannotBulk(t *testing.T) {
	t.Parallel()
	e := setup(t)
	rules := []ratelimit.Rule{rule("per API key", "apikey:k", win(time.Minute, 10))}
	for name, req := range map[string]ratelimit.Request{
		"cooldown": {Rules: rules, Cooldown: &ratelimit.Cooldown{Name: "resend", Key: "r", For: time.Minute}},
		"then":     {Rules: rules, Then: []rdb.Command{{"SET", e.r.Prefix + "x", "1"}}},
	} {
		_, err := e.lim.TakeUpTo(e.ctx, req, units(e, name, 2))
		require.Error(t, err, name)
	}
	uneven := units(e, "uneven", 2)
	uneven[1] = append(uneven[1], rdb.Command{"SET", e.r.Prefix + "y", "1"})
	_, err := e.lim.TakeUpTo(e.ctx, ratelimit.Request{Rules: rules}, uneven)
	require.Error(t, err)
	require.Equal(t, []bool{false, false}, written(t, e, "uneven", 2), "nothing ran")
}
