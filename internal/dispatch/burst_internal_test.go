package dispatch

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// scripts counts the scripts a client sends, pipelined or not.
type scripts struct{ n atomic.Int64 }

func (h *scripts) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *scripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}
func (h *scripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			h.count(c)
		}
		return next(ctx, cmds)
	}
}
func (h *scripts) count(c redis.Cmder) {
	if n := c.Name(); n == "evalsha" || n == "eval" {
		h.n.Add(1)
	}
}

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
	h := &scripts{}
	if cc, ok := rdb.AsCluster(r.Client); ok {
		cc.AddHook(h)
	} else {
		r.Client.AddHook(h)
	}
	b := newBurst(r.Client)

	work := func(id string, high bool) error { return burstMessage(ctx, b, claims, statuses, id, high) }
	// Warm: the composite is new to Redis once (NOSCRIPT, load, again).
	require.NoError(t, work("warm", true))
	h.n.Store(0)
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
	perMsg := float64(h.n.Load()) / n
	t.Logf("%d deliveries: %d scripts (%.2f per delivery, 4 unbatched), %d flushes for %d claims and marks", n, h.n.Load(), perMsg, f-f0, o-o0)
	if _, ok := rdb.AsCluster(r.Client); !ok {
		require.Equal(t, f-f0, h.n.Load(), "one script per flush on one Redis")
	}
	require.Less(t, f-f0, o-o0, "claims and marks of the burst were batched")

	// high flushes at once, even alone.
	require.NoError(t, work("high", true))
}
