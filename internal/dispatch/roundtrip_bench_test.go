package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

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
	// Loaded first: plain pipelines of separate scripts, started cold by 64
	// workers at once, can see the claim answer NOSCRIPT while its guarded
	// "sending" update, loaded meanwhile by another worker, runs before it
	// and finds no lease (burst's composite, which dispatch uses, runs both
	// as one script). That is the cold start, not what this measures.
	if err := load(ctx); err != nil {
		b.Fatal(err)
	}
	// One pipeline per step, unbatched: what a message costs without burst.
	pipelined := func(queue func(redis.Scripter) (func() error, error)) error {
		return rdb.Pipelined(ctx, r.Client, func(p redis.Pipeliner) (func() error, error) { return queue(p) }, load)
	}
	var next atomic.Int64
	b.SetParallelism(32) // × GOMAXPROCS 2 = 64 workers
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := messageWork(ctx, pipelined, claims, statuses, fmt.Sprintf("t%d", next.Add(1))); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
