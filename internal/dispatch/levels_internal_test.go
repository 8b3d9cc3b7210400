package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

func TestReserveForHigh(t *testing.T) {
	for _, tc := range []struct{ limit, lower int }{
		{1, 1}, // left whole: the lower levels must still move
		{2, 1},
		{5, 4},
		{10, 8},
		{200, 160},
	} {
		in := []ratelimit.Rule{{Name: "r", Key: "k", Windows: []ratelimit.Window{{Length: time.Second, Limit: tc.limit}}}}
		out := reserveForHigh(in)
		require.Equal(t, tc.lower, out[0].Windows[0].Limit, "limit %d", tc.limit)
		require.Equal(t, "k", out[0].Key, "the same log as high")
		require.Equal(t, tc.limit, in[0].Windows[0].Limit, "the store's rules are not changed")
	}
}
