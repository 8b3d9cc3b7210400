package verify

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A verified code is tallied once, in the fixed window of the Redis clock
// plus the offset; a wrong code, a second check of a consumed one and a
// check without a tally count nothing.
func TestVerifiedCodeIsTallied(t *testing.T) {
	s, r := setup(t, Config{})
	ctx := context.Background()
	tally := &Tally{Key: r.Prefix + "fraud:{shop:+86138123}:verified", Windows: []time.Duration{time.Hour}, Offset: 3 * time.Hour}
	count := func() map[string]string {
		m, err := r.Client.HGetAll(ctx, tally.Key).Result()
		require.NoError(t, err)
		return m
	}
	iss, err := s.Issue(ctx, "shop", "sms", "+8613812345678", "login", "t1")
	require.NoError(t, err)
	wrong := "000000"
	if iss.Code == wrong {
		wrong = "111111"
	}
	res, err := s.Check(ctx, "shop", "sms", "+8613812345678", "login", wrong, tally)
	require.NoError(t, err)
	require.False(t, res.Valid)
	require.Empty(t, count(), "a wrong code is not tallied")

	before, err := r.Client.Time(ctx).Result()
	require.NoError(t, err)
	res, err = s.Check(ctx, "shop", "sms", "+8613812345678", "login", iss.Code, tally)
	require.NoError(t, err)
	require.True(t, res.Valid)
	after, err := r.Client.Time(ctx).Result()
	require.NoError(t, err)
	got := count()
	require.Len(t, got, 1)
	hour := time.Hour.Milliseconds()
	var field string
	for f := range got {
		field = f
	}
	idx := func(tm time.Time) string {
		return strconv.FormatInt(hour, 10) + ":" + strconv.FormatInt((tm.UnixMilli()+tally.Offset.Milliseconds())/hour, 10)
	}
	require.Contains(t, []string{idx(before), idx(after)}, field, "the window of Redis time plus the offset")
	require.Equal(t, "1", got[field])
	ttl, err := r.Client.PTTL(ctx, tally.Key).Result()
	require.NoError(t, err)
	require.InDelta(t, 2*time.Hour, ttl, float64(time.Minute))

	res, err = s.Check(ctx, "shop", "sms", "+8613812345678", "login", iss.Code, tally)
	require.NoError(t, err)
	require.False(t, res.Valid, "consumed")
	require.Equal(t, "1", count()[field], "a consumed code is not tallied again")

	iss, err = s.Issue(ctx, "shop", "sms", "+8613812345678", "login", "t2")
	require.NoError(t, err)
	res, err = s.Check(ctx, "shop", "sms", "+8613812345678", "login", iss.Code, nil)
	require.NoError(t, err)
	require.True(t, res.Valid)
	require.Equal(t, "1", count()[field], "no tally, nothing counted")
}
