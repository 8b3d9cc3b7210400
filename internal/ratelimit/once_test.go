package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func once(key, digest, ids string) *ratelimit.Once {
	return &ratelimit.Once{Key: key, Digest: digest, IDs: ids, Lease: 10 * time.Second, TTL: time.Hour}
}

func onceErr(t *testing.T, err error) *ratelimit.OnceError {
	t.Helper()
	require.ErrorIs(t, err, ratelimit.ErrOnce)
	var oe *ratelimit.OnceError
	require.ErrorAs(t, err, &oe)
	return oe
}

// The entry rides in the Take: pending while the first request runs,
// then its answer; a released entry hands its ids to the next request.
func TestOnceLifecycle(t *testing.T) {
	e := setup(t)
	lim := rule("per key", "k", win(time.Minute, 100))
	req := func(o *ratelimit.Once) ratelimit.Request {
		return ratelimit.Request{Rules: []ratelimit.Rule{lim}, Once: o, Then: nil}
	}

	res, err := e.lim.Take(e.ctx, req(once("t1:a", "d1", "id-1")))
	require.NoError(t, err)
	require.NotEmpty(t, res.OnceKey)

	// A second request while the first holds the key: pending, with the
	// rest of the lease, and nothing counted.
	oe := onceErr(t, func() error { _, err := e.lim.Take(e.ctx, req(once("t1:a", "d1", "id-2"))); return err }())
	require.Equal(t, ratelimit.OncePending, oe.State)
	require.Equal(t, "id-1", oe.IDs)
	require.Greater(t, oe.RetryAfter, 8*time.Second)
	n, err := e.r.Client.ZCard(e.ctx, e.r.Prefix+"ratelimit:{k}:log:k").Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "a request that met the entry must not count")

	require.NoError(t, e.lim.Finish(e.ctx, res, time.Hour, 202, []byte(`{"code":202}`)))
	oe = onceErr(t, func() error { _, err := e.lim.Take(e.ctx, req(once("t1:a", "d2", "id-3"))); return err }())
	require.Equal(t, ratelimit.OnceDone, oe.State)
	require.Equal(t, "d1", oe.Digest)
	require.Equal(t, 202, oe.Code)
	require.JSONEq(t, `{"code":202}`, string(oe.Answer))

	// Release keeps the ids: a retry under others is told which to use,
	// and the one under them is admitted.
	res, err = e.lim.Take(e.ctx, req(once("t1:b", "d1", "id-4")))
	require.NoError(t, err)
	require.NoError(t, e.lim.Release(e.ctx, res.OnceKey, "id-4"))
	oe = onceErr(t, func() error { _, err := e.lim.Take(e.ctx, req(once("t1:b", "d1", "id-5"))); return err }())
	require.Equal(t, ratelimit.OnceReleased, oe.State)
	require.Equal(t, "id-4", oe.IDs)
	res, err = e.lim.Take(e.ctx, req(once("t1:b", "d1", "id-4")))
	require.NoError(t, err)
	// A stale release (another request holds the entry now) is a no-op.
	require.NoError(t, e.lim.Release(e.ctx, res.OnceKey, "id-other"))
	oe = onceErr(t, func() error { _, err := e.lim.Take(e.ctx, req(once("t1:b", "d1", "id-4"))); return err }())
	require.Equal(t, ratelimit.OncePending, oe.State)
}

// A refused request leaves no entry: its retry is a new request.
func TestOnceRefusedWritesNothing(t *testing.T) {
	e := setup(t)
	full := rule("per key", "full", win(time.Minute, 1))
	_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{full}})
	require.NoError(t, err)
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{full}, Once: once("t1:c", "d", "id-1")})
	_ = limitErr(t, err)
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{rule("other", "other", win(time.Minute, 5))}, Once: once("t1:c", "d", "id-2")})
	require.NoError(t, err, "the refused request must not have reserved the key")
}

// A lease that ran out (its owner died mid-request) counts as released.
func TestOnceLeaseExpiry(t *testing.T) {
	e := setup(t)
	o := once("t1:d", "d", "id-1")
	o.Lease = 50 * time.Millisecond
	_, err := e.lim.Take(e.ctx, ratelimit.Request{Once: o})
	require.NoError(t, err)
	var oe *ratelimit.OnceError
	testenv.WaitFor(t, 5*time.Second, "the lease runs out", func() bool {
		_, err := e.lim.Take(e.ctx, ratelimit.Request{Once: once("t1:d", "d", "id-2")})
		oe = onceErr(t, err)
		return oe.State == ratelimit.OnceReleased
	})
	require.Equal(t, ratelimit.OnceReleased, oe.State)
	require.Equal(t, "id-1", oe.IDs)
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Once: once("t1:d", "d", "id-1")})
	require.NoError(t, err)
}
