package dispatch

import (
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Pools are a channel's worker pools, each for a broker.Consumer of its
// own: the codes' queue alone, then the notices' queues (high, normal,
// low), which one pool serves by weights (nil:
// topology.DefaultLevelWeights). concurrency is a pool's largest size.
//
// Codes have workers of their own: with one pool for every level, a code
// waited for a worker whenever every worker was in a notice's send (a slow
// provider, a burst); with its own, no notice makes a code wait (issue 36).
//
// The codes' queue keeps the consumer's prefetch. The notices' hold at
// most two deliveries per worker (2×concurrency, PREFETCH's default): few
// enough that a consumer does not sit on a large share of a backlog that
// other consumers could be sending, and enough that a level alone with
// work keeps every worker busy. One per worker was not: a settled delivery
// keeps its place in the window until its ack goes out (coalesced, and
// never past an earlier delivery still in a handler), and with 256 workers
// on a backlog of notices a goroutine profile found 96-124 of them idle,
// waiting for deliveries the window had no room for. Workers pick from
// per-queue buffers, high first by weight, not from one stream in arrival
// order.
//
// The WeCom queues hold more: what their handlers hand off (the media
// pool's jobs, and, for the notices' levels, the merge buffer's members)
// keeps its place in the window until it is finished, so each queue's
// prefetch grows by what may be handed off (broker.QueueShare.Hold): the
// media pool's capacity (8 per media worker: 128 by default),
// and the merge buffer's (WECOM_MERGE_MAX, 1,000 by default). Memory: each
// such delivery is its body, which the API bounds (BODY_LIMIT, 64 KiB; a
// WeCom notice is about 1 KB), so 1,128 held cost about 1 MB typically
// and 71 MB at worst per queue, next to the workers' own.
func (d *Dispatcher) Pools(ct topology.ChannelTopology, weights map[topology.Level]int, concurrency int) []Pool {
	if weights == nil {
		weights = topology.DefaultLevelWeights
	}
	code := ct.Level(topology.Code)
	codes := []broker.QueueShare{d.withHold(ct.Name, topology.Code, broker.QueueShare{Name: code.Queue, Handler: d.LevelHandler(ct.Name, topology.Code)})}
	notices := make([]broker.QueueShare, 0, len(topology.NoticeLevels))
	for _, l := range topology.NoticeLevels {
		lt := ct.Level(l)
		notices = append(notices, d.withHold(ct.Name, l, broker.QueueShare{Name: lt.Queue, Weight: weights[l], Prefetch: 2 * concurrency, Handler: d.LevelHandler(ct.Name, l)}))
	}
	return []Pool{{Name: "codes", Queues: codes}, {Name: "notices", Queues: notices}}
}

// withHold gives a queue room for what its channel hands off
// (Channel.Holds: WeCom's media pool's jobs, and the merge buffer's
// members where the level is merged).
func (d *Dispatcher) withHold(channel string, l topology.Level, q broker.QueueShare) broker.QueueShare {
	q.Hold = d.channel(channel).Holds(l)
	return q
}

// Pool is one of a channel's worker pools: its name (a metric label) and
// the queues it consumes.
type Pool struct {
	Name   string
	Queues []broker.QueueShare
}
