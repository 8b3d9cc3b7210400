package broker

import (
	"context"
	"math"
	"sync"
	"time"
)

// pool holds a consumer's workers to a size that scale moves between its
// minimum and maximum: MaxConcurrency goroutines run, and all but size of
// them wait for a permit.
type pool struct {
	mu       sync.Mutex
	cond     *sync.Cond
	min, max int
	size     int
	active   int
}

func newPool(minN, maxN int) *pool {
	p := &pool{min: minN, max: maxN, size: minN}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *pool) acquire() {
	p.mu.Lock()
	for p.active >= p.size {
		p.cond.Wait()
	}
	p.active++
	p.mu.Unlock()
}

func (p *pool) release() {
	p.mu.Lock()
	p.active--
	p.mu.Unlock()
	p.cond.Signal()
}

// resize sets the size and reports whether it changed.
func (p *pool) resize(n int) bool {
	n = min(max(n, p.min), p.max)
	p.mu.Lock()
	changed := n != p.size
	p.size = n
	p.mu.Unlock()
	if changed {
		p.cond.Broadcast()
	}
	return changed
}

// open lets every worker through: on stop, each must reach its closed
// deliveries and exit.
func (p *pool) open() {
	p.mu.Lock()
	p.size = p.max
	p.mu.Unlock()
	p.cond.Broadcast()
}

func (p *pool) current() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.size
}

// scale resizes the pool every ScaleEvery from how busy its workers were,
// sampled ten times in between: when they were all busy most of the time
// (a backlog, or sends that take long), it doubles; when fewer than half
// were busy on average, it shrinks to what they used plus a quarter. The
// backlog and the send latency both show as busy workers: the workers a
// channel needs are its arrival rate times its send time.
func (c *Consumer) scale(ctx context.Context, p *pool) {
	if c.cfg.OnWorkers != nil {
		c.cfg.OnWorkers(p.current())
	}
	if c.cfg.MaxConcurrency == c.cfg.Concurrency {
		return // a fixed pool
	}
	tick := time.NewTicker(c.cfg.ScaleEvery / 10)
	defer tick.Stop()
	var samples, saturated int
	var busy float64
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		size := p.current()
		n := int(c.inFlight.Load())
		samples++
		busy += float64(n)
		if n >= size {
			saturated++
		}
		if samples < 10 {
			continue
		}
		avg := busy / float64(samples)
		next := size
		switch {
		case saturated*10 >= samples*8:
			next = size * 2
		case avg < float64(size)/2:
			next = int(math.Ceil(avg * 1.25))
		}
		if p.resize(next) && c.cfg.OnWorkers != nil {
			c.cfg.OnWorkers(p.current())
		}
		samples, saturated, busy = 0, 0, 0
	}
}
