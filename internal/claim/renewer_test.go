package claim_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// One renewer keeps a hundred leases alive past several lease lengths with
// one goroutine (not one per claim) and one round trip per tick, stops
// renewing a released claim, tells a claim whose lease is gone that it is
// lost, and exits once it holds nothing.
func TestRenewerKeepsManyLeasesWithOneGoroutine(t *testing.T) {
	e := setup(t)
	const lease = 300 * time.Millisecond
	c := e.claimer(t, lease)
	r := c.NewRenewer()
	before := runtime.NumGoroutine()

	const n = 100
	keys := make([]string, n)
	releases := make([]func(), n)
	for i := range n {
		keys[i] = fmt.Sprintf("%sk%d", e.r.Prefix, i)
		cl := e.claimed(t, c, keys[i], "me")
		releases[i] = r.Hold(cl)
	}
	require.LessOrEqual(t, runtime.NumGoroutine()-before, 1, "one renewing goroutine for %d claims", n)
	require.Equal(t, n, r.Held())

	h := &pipelines{}
	e.r.Client.AddHook(h)
	ticksBefore := r.Ticks()

	// Several leases long: each key would have expired without renewals.
	testenv.WaitFor(t, 20*time.Second, "renewals for three leases", func() bool { return r.Ticks() >= 9 })
	for _, k := range keys {
		require.True(t, strings.HasPrefix(e.value(t, k), "lease:"), "%s still leased after %d ticks", k, r.Ticks())
	}
	h.mu.Lock()
	sizes := append([]int(nil), h.sizes...)
	h.mu.Unlock()
	ticks := r.Ticks() - ticksBefore
	require.NotEmpty(t, sizes)
	// Each tick renews every held lease in one pipeline. On a Redis
	// Cluster, go-redis sends again the part of a pipeline a node could
	// not take (a moved slot, a reset connection): such a retry is a
	// smaller pipeline of the same tick, never a pipeline per lease.
	full := 0
	for _, size := range sizes {
		require.LessOrEqual(t, size, n, "renewals in one pipeline: %v", sizes)
		if size == n {
			full++
		}
	}
	// The tick under way when the hook was added, or when ticks was read,
	// may be seen by one side only.
	require.GreaterOrEqual(t, int64(full), ticks-1, "each tick renews every held lease in one pipeline: %d ticks, %v", ticks, sizes)
	t.Logf("%d ticks, pipelines of %v renewals", r.Ticks(), sizes)

	// A lease someone else took away is lost, and no longer renewed.
	lostKey := keys[0]
	releases[0]()
	require.NoError(t, e.r.Client.Del(e.ctx, lostKey).Err())
	cl0 := e.claimed(t, c, lostKey, "me")
	rel0 := r.Hold(cl0)
	require.NoError(t, e.r.Client.Set(e.ctx, lostKey, "sent:someone:1", 0).Err())
	select {
	case <-cl0.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("a renewal that found the lease gone did not close Lost")
	}
	rel0()

	// Released claims are no longer renewed: they expire.
	for _, rel := range releases {
		rel()
		rel() // twice is fine
	}
	require.Zero(t, r.Held())
	testenv.WaitFor(t, 10*time.Second, "released leases expire", func() bool {
		for _, k := range keys[2:] { // one by one: on a Redis Cluster they are in many slots
			n, err := e.r.Client.Exists(e.ctx, k).Result()
			require.NoError(t, err)
			if n != 0 {
				return false
			}
		}
		return true
	})
	testenv.WaitFor(t, 10*time.Second, "the renewer's goroutine exits", func() bool { return runtime.NumGoroutine() <= before })
}

// pipelines records the size of every pipeline a client sends.
type pipelines struct {
	mu    sync.Mutex
	sizes []int
}

func (h *pipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "evalsha" {
			h.mu.Lock()
			h.sizes = append(h.sizes, len(cmds))
			h.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}
