package accountstate_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func TestHealthAndDownMarks(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	// CacheFor 1ns: every read asks Redis again, so the test sees its writes.
	s, err := accountstate.New(r.Client, accountstate.Config{Prefix: r.Prefix, Window: 10 * time.Second, DownFor: 300 * time.Millisecond, CacheFor: time.Nanosecond})
	require.NoError(t, err)
	ctx := context.Background()
	h, err := s.Account("a").Health(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, h, "no sends: healthy")
	for _, ok := range []bool{true, true, true, false} {
		require.NoError(t, s.Account("a").Record(ctx, ok))
	}
	h, err = s.Account("a").Health(ctx)
	require.NoError(t, err)
	require.InDelta(t, 0.75, h, 1e-9)
	st, err := s.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, int64(4), st.Sends)
	require.Equal(t, "up", st.Status)

	require.NoError(t, s.Account("b").MarkDown(ctx, "wecom 40001: invalid credential"))
	why, err := s.Account("b").Down(ctx)
	require.NoError(t, err)
	require.Contains(t, why, "40001")
	st, err = s.Get(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, "down", st.Status)
	require.NotNil(t, st.DownUntil)
	require.WithinDuration(t, time.Now().Add(300*time.Millisecond), *st.DownUntil, 250*time.Millisecond)
	testenv.WaitFor(t, 5*time.Second, "the down mark to lapse (one probe may go)", func() bool {
		why, err := s.Account("b").Down(ctx)
		require.NoError(t, err)
		return why == ""
	})
	h, err = s.Account("b").Health(ctx)
	require.NoError(t, err)
	require.Equal(t, 1.0, h, "accounts are counted apart")
}
