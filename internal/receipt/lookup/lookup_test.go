package lookup_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/lookup"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func setup(t *testing.T) (*lookup.Store, *testenv.Redis, context.Context) {
	t.Helper()
	r := testenv.NewRedis(t)
	s, err := lookup.New(r.Client, lookup.Config{Prefix: r.Prefix})
	require.NoError(t, err)
	return s, r, testenv.Context(t, 30*time.Second)
}

func TestPutAndTask(t *testing.T) {
	t.Parallel()
	s, r, ctx := setup(t)
	require.NoError(t, s.Put(ctx, "twilio", "SM0123456789abcdef", "task-1"))
	got, err := s.Task(ctx, "twilio", "SM0123456789abcdef")
	require.NoError(t, err)
	require.Equal(t, "task-1", got)
	ttl, err := r.Client.PTTL(ctx, r.Prefix+"receipt:vendor:{twilio:SM0123456789abcdef}").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 71*time.Hour, "kept past the vendors' retry windows")
	require.LessOrEqual(t, ttl, 72*time.Hour)

	for _, tc := range []struct{ name, vendor, id string }{
		{"another vendor's id", "aliyun", "SM0123456789abcdef"},
		{"unknown id", "twilio", "SMnope"},
		{"empty", "twilio", ""},
		{"a brace", "twilio", "{SM0123456789abcdef}"},
	} {
		_, err := s.Task(ctx, tc.vendor, tc.id)
		require.ErrorIs(t, err, lookup.ErrNotFound, tc.name)
	}
	require.Error(t, s.Put(ctx, "twilio", strings.Repeat("x", 129), "t"), "bounded")
	require.Error(t, s.Put(ctx, "twilio", "a}b", "t"))
}

// QueuePut rides in a composite with other scripts, as in the consumer's
// burst: one round trip.
func TestQueuePutInAComposite(t *testing.T) {
	t.Parallel()
	s, r, ctx := setup(t)
	comp := rdb.NewComposer()
	rec := comp.Recorder()
	done1, err := s.QueuePut(ctx, rec, "aliyun", "biz-1", "task-1")
	require.NoError(t, err)
	done2, err := s.QueuePut(ctx, rec, "tencent", "sid-2", "task-2")
	require.NoError(t, err)
	require.NoError(t, comp.Exec(ctx, r.Client, rec))
	require.NoError(t, done1())
	require.NoError(t, done2())
	for id, want := range map[string]string{"biz-1": "task-1", "sid-2": "task-2"} {
		vendor := map[string]string{"biz-1": "aliyun", "sid-2": "tencent"}[id]
		got, err := s.Task(ctx, vendor, id)
		require.NoError(t, err)
		require.Equal(t, want, got)
	}
}

func TestRedisDownIsNotNotFound(t *testing.T) {
	t.Parallel()
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	s, err := lookup.New(down, lookup.Config{Prefix: "h45f:"})
	require.NoError(t, err)
	_, err = s.Task(context.Background(), "twilio", "SM1")
	require.Error(t, err)
	require.NotErrorIs(t, err, lookup.ErrNotFound)
}
