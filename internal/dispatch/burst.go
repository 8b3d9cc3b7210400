package dispatch

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// burstFlush bounds how long a delivery's claim or sent mark waits to be
// batched with others': docs/guarantees.md counts it in the crash
// window.
const burstFlush = time.Millisecond

// burstMax flushes at once when this many deliveries are waiting.
const burstMax = 256

// burst batches the consumer's Redis work across the deliveries that
// arrive together (issue 22): the claims of a burst go to Redis as one
// script (rdb.Composer; one per task's hash tag on a Redis Cluster, all in
// one round trip), and so do their sent marks.
//
// A flush goes out at once when none is in flight; while one is, the
// deliveries arriving meanwhile wait for it to come back, then go out
// together, and never wait longer than burstFlush. A high delivery
// flushes at once, whatever is in flight. Do returns only once its calls
// have their replies, so a delivery is acked only after its mark is in
// Redis.
//
// Flushes after the first run on a timer's goroutine (time.AfterFunc),
// owned by burst; each ends with its round trip, bounded by the client's
// timeouts and by burstTimeout.
type burst struct {
	rdb  redis.UniversalClient
	comp *rdb.Composer

	mu       sync.Mutex
	pending  []*burstOp
	inflight int
	timer    *time.Timer
	flushes  int64 // round trips, for tests
	ops      int64 // deliveries' batches flushed, for tests
}

// burstTimeout bounds one flush's round trip (the client's timeouts are
// usually shorter).
const burstTimeout = 5 * time.Second

type burstOp struct {
	rec  *rdb.Recorder
	done chan struct{}
}

func newBurst(c redis.UniversalClient) *burst { return &burst{rdb: c, comp: rdb.NewComposer()} }

// Do records the scripts queue runs, sends them with the burst they
// arrive in, and returns what the function queue returned reports once
// they have their replies. high flushes at once.
func (b *burst) Do(high bool, queue func(redis.Scripter) (func() error, error)) error {
	rec := b.comp.Recorder()
	finish, err := queue(rec)
	if err != nil {
		return err
	}
	if rec.Len() == 0 {
		return finish()
	}
	op := &burstOp{rec: rec, done: make(chan struct{})}
	b.mu.Lock()
	b.pending = append(b.pending, op)
	now := high || b.inflight == 0 || len(b.pending) >= burstMax
	if !now && b.timer == nil {
		b.timer = time.AfterFunc(burstFlush, b.flush)
	}
	b.mu.Unlock()
	if now {
		b.flush()
	}
	<-op.done
	return finish()
}

// flush sends every pending delivery's calls in one round trip.
func (b *burst) flush() {
	b.mu.Lock()
	ops := b.pending
	b.pending = nil
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	if len(ops) == 0 {
		b.mu.Unlock()
		return
	}
	b.inflight++
	b.flushes++
	b.ops += int64(len(ops))
	b.mu.Unlock()

	recs := make([]*rdb.Recorder, len(ops))
	for i, op := range ops {
		recs[i] = op.rec
	}
	ctx, cancel := context.WithTimeout(context.Background(), burstTimeout)
	_ = b.comp.Exec(ctx, b.rdb, recs...) // each call carries its own reply or error
	cancel()

	b.mu.Lock()
	b.inflight--
	if len(b.pending) > 0 {
		// What gathered meanwhile goes now, not after its timer.
		if b.timer != nil {
			b.timer.Stop()
		}
		b.timer = time.AfterFunc(0, b.flush)
	}
	b.mu.Unlock()
	for _, op := range ops {
		close(op.done)
	}
}

// stats is how many round trips carried how many deliveries' batches.
func (b *burst) stats() (flushes, ops int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flushes, b.ops
}
