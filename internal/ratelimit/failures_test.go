package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
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
	b, blocked := f.Blocked("203.0.113.1")
	require.True(t, blocked)
	require.True(t, b.Left > 0)
	require.False(t, b.Uncounted)
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

func TestSource(t *testing.T) {
	for in, want := range map[string]string{
		"203.0.113.7":          "203.0.113.7",
		"::ffff:203.0.113.7":   "203.0.113.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2::ffff":   "2001:db8:1:2::/64",
		"2001:db8:1:3::1":      "2001:db8:1:3::/64",
		"not an address":       "not an address",
	} {
		require.Equal(t, want, Source(in), in)
	}
}

// The addresses of one IPv6 /64 are one count: a guesser cannot take a
// fresh address for each guess.
func TestFailuresCountAnIPv6SubnetAsOne(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	f := NewFailures(r.Client, r.Prefix, 30, time.Minute)
	ctx := context.Background()
	for i := range 30 {
		require.NoError(t, f.Fail(ctx, fmt.Sprintf("2001:db8:7:7::%x", i+1)), i)
	}
	err := f.Fail(ctx, "2001:db8:7:7:abcd::1")
	var le *LimitError
	require.True(t, errors.As(err, &le), "the 31st address of the /64: %v", err)
	_, blocked := f.Blocked("2001:db8:7:7:ffff::9")
	require.True(t, blocked, "any address of the /64")
	require.NoError(t, f.Fail(ctx, "2001:db8:7:8::1"), "the next /64 is another subscriber")
}

// A failure Redis cannot count blocks its source here, for the pace the
// limit allows: refused, not let through uncounted.
func TestFailuresFailClosedWithoutRedis(t *testing.T) {
	t.Parallel()
	dead, err := rdb.Open(rdb.Single, "redis://127.0.0.1:18699/0", rdb.FailFast(200*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = dead.Close() })
	f := NewFailures(dead, "test:", 30, time.Minute)
	err = f.Fail(context.Background(), "2001:db8:9::1")
	var ue *UncountedError
	require.True(t, errors.As(err, &ue), "%v", err)
	require.Equal(t, 2*time.Second, ue.RetryAfter, "a minute / 30")
	b, blocked := f.Blocked("2001:db8:9::2")
	require.True(t, blocked)
	require.True(t, b.Uncounted)
	require.LessOrEqual(t, b.Left, 2*time.Second)
	_, blocked = f.Blocked("198.51.100.9")
	require.False(t, blocked, "only the source whose failure went uncounted")
}
