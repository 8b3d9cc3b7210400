package ratelimit_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// Requests held to a reserve and requests that may use it count under one
// key and see each other, also when the reserve takes the window's limit
// to or below LIMIT_EXACT_MAX: the window is counted as its full limit is
// (here approximately, 12 > 10), not exactly in a log the full requests
// never read. Before Window.Full, the 9 held-back requests went to the log
// and the full ones found the counter empty: 12 more passed.
func TestReservedAndFullRequestsCountTogether(t *testing.T) {
	e := setup(t)
	lim := e.lim.WithExactMax(10)
	full := []ratelimit.Rule{rule("global", "global:email", win(time.Minute, 12))}
	held := ratelimit.Reserve(full, 0.2, "codes")
	require.Equal(t, 9, held[0].Windows[0].Limit)
	require.Equal(t, 12, held[0].Windows[0].Full)
	require.Equal(t, 12, full[0].Windows[0].Limit, "the rules given are not changed")
	for i := range 9 {
		_, err := lim.Take(e.ctx, ratelimit.Request{Rules: held})
		require.NoError(t, err, "held %d", i)
	}
	_, err := lim.Take(e.ctx, ratelimit.Request{Rules: held})
	le := limitErr(t, err)
	require.Contains(t, le.Rule, "less the reserve for codes")
	for i := range 3 {
		_, err := lim.Take(e.ctx, ratelimit.Request{Rules: full})
		require.NoError(t, err, "full %d: the reserve", i)
	}
	_, err = lim.Take(e.ctx, ratelimit.Request{Rules: full})
	require.NotNil(t, limitErr(t, err), "the reserve used up too")
}
