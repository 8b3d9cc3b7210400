package dispatch

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
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

// High keeps the consumer's PREFETCH (0 here: the consumer's default);
// normal and low hold two deliveries per worker, so that settled
// deliveries waiting for their coalesced ack never leave a worker without
// one to take.
func TestLevelQueuesPrefetch(t *testing.T) {
	m, err := topology.Build(topology.DefaultConfig(), "")
	require.NoError(t, err)
	d := &Dispatcher{cfg: Config{Model: m}}
	for _, concurrency := range []int{1, 8, 256} {
		for _, q := range d.LevelQueues(m.Channels[0], nil, concurrency) {
			want := 2 * concurrency
			if q.Name == m.Channels[0].Level(topology.High).Queue {
				want = 0
			}
			require.Equal(t, want, q.Prefetch, "%s at concurrency %d", q.Name, concurrency)
		}
	}
}
