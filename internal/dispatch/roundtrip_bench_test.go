package dispatch_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// BenchmarkMessageRoundTrips is a message's Redis work in the consumer, as
// dispatch does it: the claim with the "sending" status (one pipeline), then
// the sent mark with the "sent" status (another), from 64 workers at once
// like CONCURRENCY=64. TEST_REDIS_AUTOPIPELINE=on|full-duplex measures
// REDIS_AUTOPIPELINE (docs/performance.md).
func BenchmarkMessageRoundTrips(b *testing.B) {
	r := testenv.NewRedis(b)
	claims, err := claim.New(r.Client, claim.Config{Prefix: r.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	statuses, err := status.New(r.Client, status.Config{Prefix: r.Prefix})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	load := func(ctx context.Context) error {
		return errors.Join(claims.LoadScripts(ctx), statuses.LoadScripts(ctx))
	}
	provider := "bench"
	var next atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS 2 = 64 workers
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprintf("t%d", next.Add(1))
			key := claims.TaskKey("sms", id)
			var res claim.Result
			err := rdb.Pipelined(ctx, r.Client, func(p redis.Pipeliner) (func() error, error) {
				a, err := claims.QueueAcquire(ctx, p, key, "bench")
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
						_, _ = sending()
					}
					return err
				}, nil
			}, load)
			if err != nil || res.Outcome != claim.Claimed {
				b.Errorf("claim %s: %v %v", id, res.Outcome, err)
				return
			}
			now := time.Now()
			err = rdb.Pipelined(ctx, r.Client, func(p redis.Pipeliner) (func() error, error) {
				marked := res.Claim.QueueMarkSent(ctx, p)
				sent, err := statuses.QueueUpdate(ctx, p, id, status.Update{Status: status.Sent, SentAt: &now, Provider: &provider, Blind: true})
				if err != nil {
					return nil, err
				}
				return func() error { _, _ = sent(); return marked() }, nil
			}, load)
			if err != nil {
				b.Errorf("mark sent %s: %v", id, err)
				return
			}
		}
	})
}
