package status_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// The removed set keeps what replay and purge took out of a DLQ for as
// long as the log keeps copies, per DLQ, and forgets older members.
func TestRemovedSet(t *testing.T) {
	e := setup(t)
	got, err := e.s.Removed(e.ctx, "queue.mail.dlq")
	require.NoError(t, err)
	require.Empty(t, got)

	require.NoError(t, e.s.MarkRemoved(e.ctx, "queue.mail.dlq", []string{"a", "b"}, time.Hour))
	require.NoError(t, e.s.MarkRemoved(e.ctx, "queue.sms.dlq", []string{"c"}, time.Hour))
	require.NoError(t, e.s.MarkRemoved(e.ctx, "queue.mail.dlq", nil, time.Hour))
	got, err = e.s.Removed(e.ctx, "queue.mail.dlq")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"a": true, "b": true}, got)

	key := e.r.Prefix + "dlq:removed:queue.mail.dlq"
	ttl, err := e.r.Client.PTTL(e.ctx, key).Result()
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "kept as long as the log")

	// A member older than the retention goes with the next write.
	old := float64(time.Now().Add(-2 * time.Hour).UnixMilli())
	require.NoError(t, e.r.Client.ZAdd(e.ctx, key, redis.Z{Score: old, Member: "old"}).Err())
	require.NoError(t, e.s.MarkRemoved(e.ctx, "queue.mail.dlq", []string{"d"}, time.Hour))
	got, err = e.s.Removed(e.ctx, "queue.mail.dlq")
	require.NoError(t, err)
	require.Equal(t, map[string]bool{"a": true, "b": true, "d": true}, got)
}
