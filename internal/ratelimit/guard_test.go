package ratelimit_test

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// guardOf is a guard on destination dest under the test's prefix, with
// thresholds for the test (adjust changes them).
func guardOf(e env, dest string, adjust func(*ratelimit.Guard)) *ratelimit.Guard {
	base := e.r.Prefix + "fraud:{" + dest + "}:"
	g := &ratelimit.Guard{Sent: base + "sent", Verified: base + "verified", Block: base + "block",
		MinSends: 50, MinVerified: 0.2, SpikeFactor: 10, SpikeMin: 300,
		Window: time.Hour, Baseline: 24 * time.Hour, BlockFor: time.Hour}
	if adjust != nil {
		adjust(g)
	}
	return g
}

// guardErr asserts err is the guard's refusal and returns it.
func guardErr(t *testing.T, err error) *ratelimit.GuardError {
	t.Helper()
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	var ge *ratelimit.GuardError
	require.True(t, errors.As(err, &ge), "want a *GuardError, got %v", err)
	return ge
}

// verified counts n verified codes for g at the limiter's clock, as
// verify.Tally does.
func verified(t *testing.T, e env, g *ratelimit.Guard, n int) {
	t.Helper()
	now := redisMS(t, e) + e.lim.ClockOffset().Milliseconds()
	w := g.Window.Milliseconds()
	require.NoError(t, e.r.Client.HIncrBy(e.ctx, g.Verified, strconv.FormatInt(w, 10)+":"+strconv.FormatInt(now/w, 10), int64(n)).Err())
}

// takeN takes n guarded requests and returns how many were admitted
// before the first refusal, and that refusal (nil: all admitted).
func takeN(t *testing.T, e env, g *ratelimit.Guard, n int) (int, error) {
	t.Helper()
	for i := range n {
		if _, err := e.lim.Take(e.ctx, ratelimit.Request{Guard: g}); err != nil {
			return i, err
		}
	}
	return n, nil
}

// A destination whose codes are sent and never verified is blocked once
// it has MinSends in the window: the first refusal starts the block, every
// later one reports it, and nothing refused is counted.
func TestGuardBlocksUnverifiedTraffic(t *testing.T) {
	t.Parallel()
	e := setup(t)
	g := guardOf(e, "t:+44740012", nil)
	n, err := takeN(t, e, g, 200)
	require.Equal(t, 50, n, "MinSends admitted, then blocked")
	ge := guardErr(t, err)
	require.True(t, ge.Started)
	require.Equal(t, ratelimit.GuardUnverified, ge.Reason)
	require.Equal(t, 50, ge.Sent)
	require.Zero(t, ge.Verified)
	require.Equal(t, time.Hour, ge.RetryAfter)

	_, err = e.lim.Take(e.ctx, ratelimit.Request{Guard: g})
	again := guardErr(t, err)
	require.False(t, again.Started, "the block was begun by the request before")
	require.Equal(t, 50, again.Sent)
	require.LessOrEqual(t, again.RetryAfter, time.Hour)

	// Another destination of the same shape is its own.
	other := guardOf(e, "t:+44740013", nil)
	n, _ = takeN(t, e, other, 10)
	require.Equal(t, 10, n)

	// The block ends after BlockFor; by then the window has slid past the
	// pumped sends.
	e.lim.Advance(2 * time.Hour)
	n, err = takeN(t, e, g, 10)
	require.NoError(t, err)
	require.Equal(t, 10, n)
}

// Verified codes keep a busy destination open; below MinVerified of its
// sends it is blocked.
func TestGuardCountsVerifiedCodes(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, tc := range []struct {
		name     string
		verified int // per 10 sent
		blocked  bool
	}{
		{"8 of 10 verified", 8, false},
		{"3 of 10 verified", 3, false},
		{"1 of 10 verified", 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := guardOf(e, "t:"+tc.name, nil)
			var err error
			for round := 0; round < 20 && err == nil; round++ {
				var n int
				n, err = takeN(t, e, g, 10)
				verified(t, e, g, tc.verified*n/10)
			}
			if !tc.blocked {
				require.NoError(t, err, "200 sent, %d%% verified", tc.verified*10)
				return
			}
			ge := guardErr(t, err)
			require.Equal(t, ratelimit.GuardUnverified, ge.Reason)
			require.Equal(t, 50, ge.Sent)
			require.Equal(t, 5, ge.Verified)
		})
	}
}

// A destination far above its own baseline is blocked even when its codes
// are verified: with no history at SpikeMin, with a baseline at
// SpikeFactor times it.
func TestGuardBlocksASpikeOverTheBaseline(t *testing.T) {
	t.Parallel()
	e := setup(t)
	adjust := func(g *ratelimit.Guard) { g.MinSends, g.SpikeMin, g.SpikeFactor = 1_000_000, 20, 10 }

	fresh := guardOf(e, "t:fresh", adjust)
	n, err := takeN(t, e, fresh, 100)
	require.Equal(t, 20, n, "no baseline: SpikeMin")
	ge := guardErr(t, err)
	require.Equal(t, ratelimit.GuardSpike, ge.Reason)

	// A day of 10 an hour, half an hour into the next day: a baseline of
	// about 10 an hour, so the spike is about 100 (10 × 10).
	known := guardOf(e, "t:known", adjust)
	day := (24 * time.Hour).Milliseconds()
	now := redisMS(t, e) + e.lim.ClockOffset().Milliseconds()
	e.lim.Advance(time.Duration(day-now%day) * time.Millisecond) // midnight
	for range 24 {
		n, err := takeN(t, e, known, 10)
		require.NoError(t, err)
		require.Equal(t, 10, n)
		e.lim.Advance(time.Hour)
	}
	e.lim.Advance(30 * time.Minute)
	n, err = takeN(t, e, known, 300)
	ge = guardErr(t, err)
	require.Equal(t, ratelimit.GuardSpike, ge.Reason)
	t.Logf("with a baseline of 10 an hour, blocked after %d (SpikeMin 20, factor 10)", n)
	require.Greater(t, n, 80, "the baseline raises the bar above SpikeMin")
	require.Less(t, n, 125)
}

// A guarded request refused by another limit is not counted, and a
// rollback takes an admitted one back out of the destination's count.
func TestGuardCountsOnlyWhatWasSent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	g := guardOf(e, "t:+8613812345", nil)
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "cd", For: time.Minute}
	_, err := e.lim.Take(e.ctx, ratelimit.Request{Guard: g, Cooldown: cd})
	require.NoError(t, err)
	for range 60 {
		_, err := e.lim.Take(e.ctx, ratelimit.Request{Guard: g, Cooldown: cd})
		_ = limitErr(t, err)
	}
	var held []*ratelimit.Reservation
	for range 30 {
		res, err := e.lim.Take(e.ctx, ratelimit.Request{Guard: g})
		require.NoError(t, err)
		held = append(held, res)
	}
	for _, res := range held {
		require.NoError(t, e.lim.Rollback(e.ctx, res))
	}
	n, err := takeN(t, e, g, 100)
	require.Equal(t, 49, n, "one counted before: the refused and the rolled-back requests are not")
	_ = guardErr(t, err)
}

func TestGuardChecksItsSettings(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for name, adjust := range map[string]func(*ratelimit.Guard){
		"keys in two slots": func(g *ratelimit.Guard) { g.Block = e.r.Prefix + "fraud:{elsewhere}:block" },
		"no min sends":      func(g *ratelimit.Guard) { g.MinSends = 0 },
		"ratio above 1":     func(g *ratelimit.Guard) { g.MinVerified = 1.5 },
		"baseline short":    func(g *ratelimit.Guard) { g.Baseline = g.Window },
	} {
		_, err := e.lim.Take(e.ctx, ratelimit.Request{Guard: guardOf(e, "t:x", adjust)})
		require.Error(t, err, name)
		require.NotErrorIs(t, err, ratelimit.ErrLimited, name)
	}
}
