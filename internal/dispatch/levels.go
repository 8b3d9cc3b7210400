package dispatch

import (
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
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
func (d *Dispatcher) Pools(ct topology.ChannelTopology, weights map[topology.Level]int, concurrency int) []Pool {
	if weights == nil {
		weights = topology.DefaultLevelWeights
	}
	code := ct.Level(topology.Code)
	codes := []broker.QueueShare{{Name: code.Queue, Handler: d.LevelHandler(ct.Name, topology.Code)}}
	notices := make([]broker.QueueShare, 0, len(topology.NoticeLevels))
	for _, l := range topology.NoticeLevels {
		lt := ct.Level(l)
		notices = append(notices, broker.QueueShare{Name: lt.Queue, Weight: weights[l], Prefetch: 2 * concurrency, Handler: d.LevelHandler(ct.Name, l)})
	}
	return []Pool{{Name: "codes", Queues: codes}, {Name: "notices", Queues: notices}}
}

// Pool is one of a channel's worker pools: its name (a metric label) and
// the queues it consumes.
type Pool struct {
	Name   string
	Queues []broker.QueueShare
}

// urgent says whether a level's Redis work goes out at once rather than
// with a burst: codes and urgent notices.
func urgent(l topology.Level) bool { return l == topology.Code || l == topology.High }

// codeReserve is the share of every per-provider limit that only codes may
// use (seed 004's traffic shaper): notices, whatever their level, stop
// below it and wait (a snooze through the delay queues, never a failure),
// so when a provider is at its limit the next tokens go to codes.
const codeReserve = 0.2

// reserveForCodes returns the rules a notice is checked against: the same
// keys, so that codes and notices count in the same log, with each
// window's limit lowered by the codes' reserve.
func reserveForCodes(rules []ratelimit.Rule) []ratelimit.Rule {
	return ratelimit.Reserve(rules, codeReserve, "codes")
}
