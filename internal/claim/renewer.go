package claim

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Renewer keeps many claims' leases alive with one goroutine and one
// pipelined round trip per tick, where Claim.KeepAlive costs a goroutine
// and a ticker per claim (issue 22: one per message, even for a send that
// takes 0 ms). It is safe for concurrent use.
//
// Its goroutine runs only while it holds claims: the first Hold starts it,
// and it exits once the last hold is released, so an idle consumer has
// none, and its lifetime is bounded by its holders', each of which ends
// its hold before it returns.
type Renewer struct {
	c     *Claimer
	every time.Duration

	mu      sync.Mutex
	held    map[*Claim]struct{}
	running bool
	ticks   int64 // renewal round trips, for tests
}

// NewRenewer returns a Renewer for c's claims; it renews every Lease/3, so
// two renewals in a row may fail before a lease runs out, as with
// KeepAlive.
func (c *Claimer) NewRenewer() *Renewer {
	return &Renewer{c: c, every: c.cfg.Lease / 3, held: map[*Claim]struct{}{}}
}

// Hold renews cl's lease until the returned release is called (it may be
// called more than once). As KeepAlive: a renewal that finds the lease
// gone closes cl.Lost and stops renewing it; a failed one is tried again
// at the next tick.
func (r *Renewer) Hold(cl *Claim) (release func()) {
	r.mu.Lock()
	r.held[cl] = struct{}{}
	if !r.running {
		r.running = true
		go r.run()
	}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.held, cl)
		r.mu.Unlock()
	}
}

// Held is how many claims it renews now.
func (r *Renewer) Held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// Ticks is how many renewal round trips it has made.
func (r *Renewer) Ticks() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ticks
}

func (r *Renewer) run() {
	t := time.NewTicker(r.every)
	defer t.Stop()
	var batch []*Claim
	for range t.C {
		r.mu.Lock()
		if len(r.held) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		batch = batch[:0]
		for cl := range r.held {
			batch = append(batch, cl)
		}
		r.ticks++
		r.mu.Unlock()
		r.renew(batch)
	}
}

// renew renews every claim of batch in one pipeline, bounded by one tick:
// a renewal later than that is as good as the next tick's.
func (r *Renewer) renew(batch []*Claim) {
	ctx, cancel := context.WithTimeout(context.Background(), r.every)
	defer cancel()
	lost := make([]bool, len(batch))
	_ = rdb.Pipelined(ctx, r.c.rdb, func(p redis.Pipeliner) (func() error, error) {
		cmds := make([]*redis.Cmd, len(batch))
		for i, cl := range batch {
			cmds[i] = renewScript.EvalSha(ctx, p, []string{cl.key}, cl.lease, r.c.cfg.Lease.Milliseconds())
		}
		return func() error {
			var first error
			for i, c := range cmds {
				ok, err := c.Bool()
				switch {
				case err != nil:
					if first == nil {
						first = err // a NOSCRIPT makes Pipelined load and send that renewal again
					}
				case !ok:
					lost[i] = true
				}
			}
			return first
		}, nil
	}, func(ctx context.Context) error { return renewScript.Load(ctx, r.c.rdb).Err() })
	var gone []*Claim
	for i, l := range lost {
		if l {
			batch[i].markLost()
			gone = append(gone, batch[i])
		}
	}
	if len(gone) > 0 {
		r.mu.Lock()
		for _, cl := range gone {
			delete(r.held, cl)
		}
		r.mu.Unlock()
	}
}
