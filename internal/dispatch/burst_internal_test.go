package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// step sends one step's queued Redis work and reads its replies: through
// burst, or as a pipeline of its own.
type step func(queue func(redis.Scripter) (func() error, error)) error

// messageWork is one delivery's Redis work as dispatch does it, each step
// sent by do: the claim with its "sending" status, then the sent mark with
// its "sent" status (lastError cleared, as markSent does).
func messageWork(ctx context.Context, do step, claims *claim.Claimer, statuses *status.Store, id string) error {
	provider, empty := "test", ""
	key := claims.TaskKey("sms", id)
	var res claim.Result
	err := do(func(p redis.Scripter) (func() error, error) {
		a, err := claims.QueueAcquire(ctx, p, key, "me")
		if err != nil {
			return nil, err
		}
		u := status.Update{Status: status.Sending, IncAttempts: true, Provider: &provider, Blind: true, Guard: &status.Guard{Key: key, Value: a.Lease}}
		sending, err := statuses.QueueUpdate(ctx, p, id, u)
		if err != nil {
			return nil, err
		}
		return func() (err error) {
			if res, err = a.Result(); err == nil {
				_, err = sending()
			}
			return err
		}, nil
	})
	if err != nil || res.Outcome != claim.Claimed {
		return fmt.Errorf("claim %s: %v %w", id, res.Outcome, err)
	}
	now := time.Now()
	return do(func(p redis.Scripter) (func() error, error) {
		marked := res.Claim.QueueMarkSent(ctx, p)
		sent, err := statuses.QueueUpdate(ctx, p, id, status.Update{Status: status.Sent, SentAt: &now, Provider: &provider, LastError: &empty, Blind: true})
		if err != nil {
			return nil, err
		}
		return func() error {
			if _, err := sent(); err != nil {
				return err
			}
			return marked()
		}, nil
	})
}

// burstMessage is messageWork through burst, as dispatch batches it.
func burstMessage(ctx context.Context, b *burst, claims *claim.Claimer, statuses *status.Store, id string, high bool) error {
	return messageWork(ctx, func(queue func(redis.Scripter) (func() error, error)) error { return b.Do(high, queue) }, claims, statuses, id)
}

// A burst of 64 deliveries, each doing the consumer's Redis work (the
// claim with its "sending" status, then the sent mark with its "sent"
// status) through burst: every claim and every mark lands, and the scripts
// Redis runs per delivery drop below the 4 of one pipeline each (counted
// by a hook, not timed).
func TestBurstBatchesClaimsAndMarks(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 60*time.Second)
	claims, err := claim.New(r.Client, claim.Config{Prefix: r.Prefix})
	require.NoError(t, err)
	statuses, err := status.New(r.Client, status.Config{Prefix: r.Prefix})
	require.NoError(t, err)
	evals := r.CountScripts()
	b := newBurst(r.Client)

	work := func(id string, high bool) error { return burstMessage(ctx, b, claims, statuses, id, high) }
	// Warm: the composite is new to Redis once (NOSCRIPT, load, again).
	require.NoError(t, work("warm", true))
	evals.Store(0)
	f0, o0 := b.stats()

	const n = 64
	start := make(chan struct{})
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- work(fmt.Sprintf("t%d", i), false)
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for i := range n {
		v, err := r.Client.Get(ctx, claims.TaskKey("sms", fmt.Sprintf("t%d", i))).Result()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(v, "sent:me:"), "t%d marked sent: %q", i, v)
		rec, err := statuses.Get(ctx, fmt.Sprintf("t%d", i))
		require.NoError(t, err)
		require.Equal(t, status.Sent, rec.Status)
		require.Equal(t, 1, rec.Attempts)
	}
	f, o := b.stats()
	perMsg := float64(evals.Load()) / n
	t.Logf("%d deliveries: %d scripts (%.2f per delivery, 4 unbatched), %d flushes for %d claims and marks", n, evals.Load(), perMsg, f-f0, o-o0)
	if _, ok := rdb.AsCluster(r.Client); !ok {
		// A flush holds at most the deliveries' two calls each: one
		// composite.
		require.LessOrEqual(t, 2*n, rdb.CompositeMax)
		require.Equal(t, f-f0, evals.Load(), "one script per flush on one Redis")
	}
	require.Less(t, f-f0, o-o0, "claims and marks of the burst were batched")

	// high flushes at once, even alone.
	require.NoError(t, work("high", true))
}
