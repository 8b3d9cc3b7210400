package dispatch

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// Issue 36: codes have a pool of their own, with the consumer's PREFETCH
// (0 here: the consumer's default); the notices' levels share the other,
// by weight, each holding two deliveries per worker, so that settled
// deliveries waiting for their coalesced ack never leave a worker without
// one to take.
func TestPoolsKeepCodesApart(t *testing.T) {
	m, err := topology.Build(topology.DefaultConfig(), "")
	require.NoError(t, err)
	d := &Dispatcher{cfg: Config{Model: m}}
	ct := m.Channels[0]
	for _, concurrency := range []int{1, 8, 256} {
		pools := d.Pools(ct, nil, concurrency)
		require.Len(t, pools, 2)
		require.Equal(t, "codes", pools[0].Name)
		require.Len(t, pools[0].Queues, 1)
		require.Equal(t, ct.Queue, pools[0].Queues[0].Name, "the codes' queue alone")
		require.Zero(t, pools[0].Queues[0].Prefetch)
		require.Equal(t, "notices", pools[1].Name)
		var names []string
		for _, q := range pools[1].Queues {
			names = append(names, q.Name)
			require.Equal(t, 2*concurrency, q.Prefetch, "%s at concurrency %d", q.Name, concurrency)
			require.NotEqual(t, ct.Queue, q.Name)
		}
		require.Equal(t, []string{ct.Queue + ".high", ct.Queue + ".normal", ct.Queue + ".low"}, names)
		require.Equal(t, 8, pools[1].Queues[0].Weight)
	}
}
