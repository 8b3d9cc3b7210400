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

// A tally that starts a window drops the fields older than the previous
// window, so a prefix verified steadily keeps two fields, not one a window
// for as long as it is verified.
func TestTallyDropsOldWindows(t *testing.T) {
	s, r := setup(t, Config{})
	ctx := context.Background()
	tally := &Tally{Key: r.Prefix + "fraud:{shop:+86139123}:verified", Windows: []time.Duration{time.Hour}}
	now, err := r.Client.Time(ctx).Result()
	require.NoError(t, err)
	hour := time.Hour.Milliseconds()
	field := func(back int64) string {
		return strconv.FormatInt(hour, 10) + ":" + strconv.FormatInt(now.UnixMilli()/hour-back, 10)
	}
	// Old windows a steady prefix left, and the previous one, still read.
	require.NoError(t, r.Client.HSet(ctx, tally.Key, field(5), 3, field(3), 2, field(2), 4, field(1), 7).Err())

	iss, err := s.Issue(ctx, "shop", "sms", "+8613912345678", "login", "t1")
	require.NoError(t, err)
	res, err := s.Check(ctx, "shop", "sms", "+8613912345678", "login", iss.Code, tally)
	require.NoError(t, err)
	require.True(t, res.Valid)

	got, err := r.Client.HGetAll(ctx, tally.Key).Result()
	require.NoError(t, err)
	cur := field(0)
	if _, ok := got[cur]; !ok { // the hour turned between the two reads
		cur = strconv.FormatInt(hour, 10) + ":" + strconv.FormatInt(now.UnixMilli()/hour+1, 10)
	}
	require.Equal(t, "1", got[cur], "this window's tally")
	require.NotContains(t, got, field(5))
	require.NotContains(t, got, field(3))
	require.LessOrEqual(t, len(got), 2, "at most this window and the one before: %v", got)
}
