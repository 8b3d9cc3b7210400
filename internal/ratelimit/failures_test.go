package ratelimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Each address has its own count; the limit+1th failure is refused and
// not recorded; Blocked then reports the address without Redis; and the
// key is one hash-tagged key per address.
func TestFailuresPerAddress(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	f := NewFailures(r.Client, r.Prefix, 3, time.Minute)
	ctx := context.Background()
	for range 3 {
		require.NoError(t, f.Fail(ctx, "203.0.113.1"))
	}
	_, blocked := f.Blocked("203.0.113.1")
	require.False(t, blocked, "at the limit, not over it")
	err := f.Fail(ctx, "203.0.113.1")
	var le *LimitError
	require.True(t, errors.As(err, &le), "the 4th failure is refused: %v", err)
	require.True(t, le.RetryAfter > 0 && le.RetryAfter <= time.Minute, "%s", le.RetryAfter)
	left, blocked := f.Blocked("203.0.113.1")
	require.True(t, blocked)
	require.True(t, left > 0)
	require.NoError(t, f.Fail(ctx, "203.0.113.2"), "another address has its own count")
	_, blocked = f.Blocked("203.0.113.2")
	require.False(t, blocked)
	n, err := r.Client.ZCard(ctx, r.Prefix+"authfail:{203.0.113.1}").Result()
	require.NoError(t, err)
	require.EqualValues(t, 3, n, "a refused failure is not recorded")

	off := NewFailures(r.Client, r.Prefix+"off:", 0, time.Minute)
	for range 10 {
		require.NoError(t, off.Fail(ctx, "203.0.113.3"))
	}
}

// A block ends when the window has room again.
func TestFailuresBlockEnds(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	f := NewFailures(r.Client, r.Prefix, 1, 300*time.Millisecond)
	ctx := context.Background()
	require.NoError(t, f.Fail(ctx, "198.51.100.7"))
	require.Error(t, f.Fail(ctx, "198.51.100.7"))
	testenv.WaitFor(t, 5*time.Second, "the block ends", func() bool {
		_, blocked := f.Blocked("198.51.100.7")
		return !blocked
	})
	testenv.WaitFor(t, 5*time.Second, "a failure is admitted again", func() bool { return f.Fail(ctx, "198.51.100.7") == nil })
}
