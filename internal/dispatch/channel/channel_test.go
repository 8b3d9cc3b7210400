package channel

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func TestReserveForCodes(t *testing.T) {
	for _, tc := range []struct{ limit, lower int }{
		{1, 1}, // left whole: the lower levels must still move
		{2, 1},
		{5, 4},
		{10, 8},
		{200, 160},
	} {
		in := []ratelimit.Rule{{Name: "r", Key: "k", Windows: []ratelimit.Window{{Length: time.Second, Limit: tc.limit}}}}
		out := ReserveForCodes(topology.Normal, in)
		require.Equal(t, tc.lower, out[0].Windows[0].Limit, "limit %d", tc.limit)
		require.Equal(t, tc.limit, out[0].Windows[0].Full, "counted as the full limit is")
		require.Equal(t, "k", out[0].Key, "the same log as codes")
		require.Equal(t, tc.limit, in[0].Windows[0].Limit, "the store's rules are not changed")
	}
}

// A code is checked against the provider's rules as they are.
func TestCodesTakeTheWholeLimit(t *testing.T) {
	in := []ratelimit.Rule{{Name: "r", Key: "k", Windows: []ratelimit.Window{{Length: time.Second, Limit: 10}}}}
	require.Equal(t, in, ReserveForCodes(topology.Code, in))
}
