package dispatch

import (
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// LevelQueues are the queues of one channel for a broker.Consumer: every
// level, served by one pool of workers that prefers high, then normal,
// then low by weights (nil: topology.DefaultLevelWeights).
//
// High keeps the consumer's prefetch. The lower levels hold at most two
// deliveries per worker (2×concurrency, PREFETCH's default): few enough
// that a consumer does not sit on a large share of a backlog that other
// consumers could be sending, and enough that a level alone with work
// keeps every worker busy. One per worker was not: a settled delivery
// keeps its place in the window until its ack goes out (coalesced, and
// never past an earlier delivery still in a handler), and with 256 workers
// on a backlog of notices a goroutine profile found 96-124 of them idle,
// waiting for deliveries the window had no room for. A code
// never waits behind them either way: workers pick from per-queue
// buffers, high first by weight, not from one stream in arrival order.
//
// The WeCom queues hold more: what their handlers hand on (the media
// pool's jobs, and, normal and low, the merge buffer's members) keeps its
// place in the window until it is finished, so each queue's prefetch
// grows by what may be handed on (broker.QueueShare.Hold): the media
// pool's capacity (4 per media worker, 64 by default), and the merge
// buffer's (WECOM_MERGE_MAX, 1,000 by default). Memory: each such
// delivery is its body, which the API bounds (BODY_LIMIT, 64 KiB; a WeCom
// notice is about 1 KB), so 1,064 held cost about 1 MB typically and
// 68 MB at worst per queue, next to the workers' own.
func (d *Dispatcher) LevelQueues(ct topology.ChannelTopology, weights map[topology.Level]int, concurrency int) []broker.QueueShare {
	if weights == nil {
		weights = topology.DefaultLevelWeights
	}
	out := make([]broker.QueueShare, 0, len(ct.Levels))
	for _, lt := range ct.Levels {
		q := broker.QueueShare{Name: lt.Queue, Weight: weights[lt.Level], Handler: d.LevelHandler(ct.Name, lt.Level)}
		if lt.Level != topology.High {
			q.Prefetch = 2 * concurrency
		}
		if ct.Name == topology.WeCom && d.cfg.WeCom != nil {
			q.Hold = d.media.capacity()
			if d.merge != nil && lt.Level != topology.High { // high is never merged
				q.Hold += d.merge.max
			}
		}
		out = append(out, q)
	}
	return out
}

// highReserve is the share of every per-provider limit that only high
// messages may use (seed 004's traffic shaper): normal and low stop below
// it and wait (a snooze through the delay queues, never a failure), so
// when a provider is at its limit the next tokens go to codes.
const highReserve = 0.2

// reserveForHigh returns the rules a normal or low message is checked
// against: the same keys, so every level counts in the same log, with each
// window's limit lowered by the high reserve (at least one; a limit of one
// is left whole, or the lower levels could never send).
func reserveForHigh(rules []ratelimit.Rule) []ratelimit.Rule {
	out := make([]ratelimit.Rule, len(rules))
	for i, r := range rules {
		r.Windows = append([]ratelimit.Window(nil), r.Windows...)
		for k := range r.Windows {
			w := &r.Windows[k]
			if w.Limit > 1 {
				w.Limit -= max(1, int(float64(w.Limit)*highReserve+0.999))
			}
		}
		r.Name += " (less the reserve for high)"
		out[i] = r
	}
	return out
}
