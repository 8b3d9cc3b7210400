package ratelimit_test

import (
	"context"
	"errors"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	require.NoError(t, err)
	return n
}

// counted is setup with a limiter that counts every window above exactMax.
func counted(t *testing.T, exactMax int) env {
	t.Helper()
	e := setup(t)
	e.lim = ratelimit.New(e.r.Client, e.r.Prefix).WithExactMax(exactMax)
	return e
}

// A counted window keeps no log: a small hash and, per reservation, a mark.
// In its first fixed window (nothing before it) it admits exactly its limit.
func TestCounterAdmitsLimitThenDenies(t *testing.T) {
	t.Parallel()
	e := counted(t, 5)
	req := ratelimit.Request{Rules: []ratelimit.Rule{
		rule("per API key", "apikey:k", win(24*time.Hour, 20)),
		rule("per IP", "ip:1", win(time.Hour, 30)), // 30 > 5 too: counted as well
	}}
	for i := range 20 {
		res, err := e.lim.Take(e.ctx, req)
		require.NoError(t, err, "take %d", i)
		require.Empty(t, res.Keys, "no log for counted windows")
		require.Len(t, res.Counters, 2)
		require.NotEmpty(t, res.Marks, "a mark per slot that counted")
	}
	le := e.deny(t, req)
	require.Equal(t, "per API key", le.Rule)
	require.Equal(t, 20, le.Limit)
	require.Positive(t, le.RetryAfter)
	n, err := e.r.Client.Exists(e.ctx, e.r.Prefix+"ratelimit:{apikey:k}:log:apikey:k").Result()
	require.NoError(t, err)
	require.Zero(t, n, "a counted window writes no sorted set")
}

// Limits at or below ExactMax keep their exact log next to counted ones in
// the same request; the exact one still refuses at exactly its limit.
func TestCounterLeavesSmallLimitsExact(t *testing.T) {
	t.Parallel()
	e := counted(t, 10)
	req := ratelimit.Request{Rules: []ratelimit.Rule{
		{Name: "per recipient", Key: "verify:r", Tag: "r", Windows: []ratelimit.Window{win(time.Hour, 3)}},
		rule("per API key", "apikey:k", win(time.Minute, 1000)),
	}}
	for range 3 {
		res, err := e.lim.Take(e.ctx, req)
		require.NoError(t, err)
		require.Len(t, res.Keys, 1)
		require.Len(t, res.Counters, 1)
	}
	require.Equal(t, "per recipient", e.deny(t, req).Rule)
	card, err := e.r.Client.ZCard(e.ctx, e.r.Prefix+"ratelimit:{r}:log:verify:r").Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, card)
}

// Rollback gives a counted reservation back, once: a second rollback of
// the same reservation takes nothing more.
func TestCounterRollback(t *testing.T) {
	t.Parallel()
	e := counted(t, 1)
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per API key", "apikey:k", win(time.Hour, 2))}}
	first, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	second, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	e.deny(t, req)
	require.NoError(t, e.lim.Rollback(e.ctx, second))
	require.NoError(t, e.lim.Rollback(e.ctx, second), "idempotent")
	third, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err, "the rolled-back reservation made room for one")
	e.deny(t, req)
	require.NoError(t, e.lim.Rollback(e.ctx, first))
	require.NoError(t, e.lim.Rollback(e.ctx, third))
	_, err = e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	_, err = e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	e.deny(t, req)
}

// The take script run twice for one reservation counts it once in a
// counted window too, with or without a cooldown beside it.
func TestCounterRunTwiceCountsOnce(t *testing.T) {
	t.Parallel()
	for _, withCD := range []bool{false, true} {
		e := counted(t, 1)
		h := &resend{}
		addHook(e.r.Client, h)
		for i := range 3 {
			req := ratelimit.Request{Rules: []ratelimit.Rule{
				rule("per API key", "apikey:k", win(time.Hour, 3)),
				rule("per tenant", "tenant:t", win(time.Hour, 100)),
			}}
			if withCD {
				req.Cooldown = &ratelimit.Cooldown{Name: "cd", Key: "c" + string(rune('a'+i)), Tag: "c", For: time.Minute}
			}
			_, err := e.lim.Take(e.ctx, req)
			require.NoError(t, err, "take %d (cooldown %v)", i, withCD)
		}
		require.Positive(t, h.n.Load(), "the hook ran the script twice")
		vals, err := e.r.Client.HVals(e.ctx, e.r.Prefix+"ratelimit:{apikey:k}:ctr:apikey:k").Result()
		require.NoError(t, err)
		require.Equal(t, []string{"3"}, vals, "three takes run twice each count three")
		e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{rule("per API key", "apikey:k", win(time.Hour, 3))}})
	}
}

// At 5,000 requests a second offered against a per-second limit of 2,000
// (counted: above ExactMax), the admitted requests stay within the bound
// counter.go documents: never more than the limit in one fixed window,
// so at most twice the limit in any span of a second, and within ±10% of
// the limit per second over the run. The pace only sets the offered rate;
// what is asserted is counts, not latencies, and the offered rate reached
// is checked so that a starved run cannot pass by offering too little.
func TestCounterBoundAt5000PerSecond(t *testing.T) {
	if testing.Short() {
		t.Skip("drives the limiter for 4 s")
	}
	const (
		rate    = 5000
		limit   = 2000
		run     = 4 * time.Second
		workers = 64
	)
	e := counted(t, ratelimit.DefaultExactMax)
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("global email", "global:email", win(time.Second, limit))}}

	// Admissions are stamped with Redis time read in the same pipeline
	// order: the limiter's own clock. Simpler and as exact: the counter's
	// per-window fields, read after the run, are the admitted count of each
	// fixed window; the client's stamps give the sliding spans.
	var (
		mu       sync.Mutex
		admitted []time.Time
		offered  atomic.Int64
		failed   atomic.Int64
		firstErr atomic.Value
	)
	ctx, cancel := context.WithTimeout(e.ctx, run)
	defer cancel()
	tick := make(chan struct{}, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range tick {
				offered.Add(1)
				_, err := e.lim.Take(e.ctx, req)
				if err == nil {
					mu.Lock()
					admitted = append(admitted, time.Now())
					mu.Unlock()
				} else if !errors.Is(err, ratelimit.ErrLimited) {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
			}
		}()
	}
	startMS := redisMS(t, e)
	start := time.Now()
	interval := time.Second / rate
	next := start
pace:
	for {
		// Offer every request due by now: the pacer catches up rather than
		// lowering the rate when it is scheduled late.
		for !next.After(time.Now()) {
			select {
			case tick <- struct{}{}:
			case <-ctx.Done():
				break pace
			}
			next = next.Add(interval)
		}
		select {
		case <-ctx.Done():
			break pace
		case <-time.After(time.Until(next)):
		}
	}
	close(tick)
	wg.Wait()
	elapsed := time.Since(start)
	endMS := redisMS(t, e)
	require.Zero(t, failed.Load(), "Redis errors, the first: %v", firstErr.Load())
	offeredRate := float64(offered.Load()) / elapsed.Seconds()
	t.Logf("offered %d in %s (%.0f/s), admitted %d (limit %d/s)", offered.Load(), elapsed, offeredRate, len(admitted), limit)
	if offeredRate < 1.5*limit {
		t.Skipf("the machine offered only %.0f/s: too little to exceed the limit (needs > %d/s)", offeredRate, int(1.5*limit))
	}

	// Per fixed window, from the counter itself.
	fields, err := e.r.Client.HGetAll(e.ctx, e.r.Prefix+"ratelimit:{global:email}:ctr:global:email").Result()
	require.NoError(t, err)
	for f, v := range fields {
		require.LessOrEqual(t, atoi(t, v), limit, "fixed window %s admitted more than the limit", f)
	}

	// Any sliding second, by the client's stamps (each taken after its
	// admission, so late by up to one round trip: a span slightly wider at
	// worst).
	sort.Slice(admitted, func(i, j int) bool { return admitted[i].Before(admitted[j]) })
	maxSpan, j := 0, 0
	for i := range admitted {
		for admitted[i].Sub(admitted[j]) >= time.Second {
			j++
		}
		maxSpan = max(maxSpan, i-j+1)
	}
	t.Logf("most admitted in any sliding second: %d (%.3f of the limit)", maxSpan, float64(maxSpan)/limit)
	require.LessOrEqual(t, maxSpan, 2*limit, "the documented worst case")

	// Over the whole run, by the fixed windows it touched (Redis time):
	// never more than the limit in each, and the complete ones (all but
	// the first and last) admitted at least 90% of theirs.
	touched := int(endMS/1000 - startMS/1000 + 1)
	require.LessOrEqual(t, len(admitted), limit*touched)
	require.GreaterOrEqual(t, float64(len(admitted)), 0.9*float64(limit*(touched-2)),
		"admitted %d in %d fixed windows, %d of them complete", len(admitted), touched, touched-2)
}

// A counter hash is kept for two of its longest window from the request
// that started its current window, and stale fields go then; requests
// within a window neither refresh nor trim it (issue 22: two Redis calls
// per counted rule saved).
func TestCounterHashExpiresTwoWindowsAfterItsWindowStarted(t *testing.T) {
	t.Parallel()
	e := counted(t, 1)
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per API key", "apikey:k", win(time.Hour, 100), win(24*time.Hour, 1000))}}
	key := e.r.Prefix + "ratelimit:{apikey:k}:ctr:apikey:k"
	_, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	ttl, err := e.r.Client.PTTL(e.ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 47*time.Hour, "two of the longest window")
	require.LessOrEqual(t, ttl, 48*time.Hour)
	// Stale fields from long ago (more than two per window with the live
	// ones) and a shorter TTL: a request inside the same windows leaves
	// them alone.
	require.NoError(t, e.r.Client.HSet(e.ctx, key, "3600000:1", 5, "3600000:2", 5, "86400000:1", 5).Err())
	require.NoError(t, e.r.Client.PExpire(e.ctx, key, time.Hour).Err())
	_, err = e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	ttl, err = e.r.Client.PTTL(e.ctx, key).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, time.Hour)
	n, err := e.r.Client.HLen(e.ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "two live fields and the stale ones")
	// A window that starts (here: a field deleted, as a rollback to 0 does)
	// trims the stale field and keeps the hash two windows again.
	fields, err := e.r.Client.HKeys(e.ctx, key).Result()
	require.NoError(t, err)
	for _, f := range fields {
		if strings.HasPrefix(f, "3600000:") && f != "3600000:1" && f != "3600000:2" {
			require.NoError(t, e.r.Client.HDel(e.ctx, key, f).Err())
		}
	}
	_, err = e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	ok, err := e.r.Client.HExists(e.ctx, key, "3600000:1").Result()
	require.NoError(t, err)
	require.False(t, ok, "the stale fields are gone")
	n, err = e.r.Client.HLen(e.ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "the two live fields")
	ttl, err = e.r.Client.PTTL(e.ctx, key).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 47*time.Hour)
}
