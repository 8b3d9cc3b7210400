package delay

import (
	"errors"
	"fmt"
	"time"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// Plan errors.
var (
	ErrNotPositive = errors.New("delay must be positive")
	ErrTooLong     = errors.New("delay too long")
)

// Hop is one stay in a delay queue.
type Hop struct {
	Queue      string
	RoutingKey string
	// TTL is how long the hop lasts: the tier's TTL, or for the precise
	// queue the per-message expiration to set.
	TTL     time.Duration
	Precise bool
}

// Planner turns delays into hops. It is pure: no clock, no broker.
type Planner struct {
	d         topology.DelayTopology
	margin    time.Duration
	tolerance time.Duration
}

// NewPlanner returns a planner over the model's delay topology. margin and
// tolerance only matter in exact mode (see Next).
func NewPlanner(d topology.DelayTopology, margin, tolerance time.Duration) (*Planner, error) {
	if len(d.Tiers) == 0 {
		return nil, errors.New("delay: the model has no delay tiers")
	}
	if margin < 0 || tolerance < 0 {
		return nil, errors.New("delay: margin and tolerance must not be negative")
	}
	return &Planner{d: d, margin: margin, tolerance: tolerance}, nil
}

// Mode returns the planner's mode.
func (p *Planner) Mode() topology.DelayMode { return p.d.Mode }

// Check applies the common rules (seed 003 §4.1): a delay must be positive
// and at most DELAY_MAX.
func (p *Planner) Check(delay time.Duration) error {
	if delay <= 0 {
		return fmt.Errorf("%w (got %s)", ErrNotPositive, delay)
	}
	if delay > p.d.Max {
		return fmt.Errorf("%w: %s exceeds the maximum of %s; use an external scheduler for longer delays", ErrTooLong, delay, p.d.Max)
	}
	return nil
}

// tierMargin is how much longer than the time left a tier may be and
// still be taken. The margin exists to absorb relay lag: a message that
// should have 5 s left but has 4.997 s because the last hop was 3 ms late
// takes the 5 s tier (3 ms late) instead of falling through ten smaller
// hops. So it is bounded by the lag actually measured on this message
// (plus the tolerance), by DELAY_MARGIN, and by 1/64 of the tier; a
// remainder that is naturally just under a tier (0.99 s of a 7.99 s delay)
// falls through and arrives on time.
func (p *Planner) tierMargin(t, lag time.Duration) time.Duration {
	return min(p.margin, t/64, max(lag, 0)+p.tolerance)
}

// Next is the relay's step in exact mode: given the time left until a
// message is due and how late its last hop ended (lag), it says whether to
// deliver now, or which hop comes next: the largest tier not longer than
// the time left (plus the margin above); below the smallest tier, the
// precise queue with exactly the time left.
func (p *Planner) Next(left, lag time.Duration) (hop Hop, due bool) {
	if left <= p.tolerance {
		return Hop{}, true
	}
	for i := len(p.d.Tiers) - 1; i >= 0; i-- {
		t := p.d.Tiers[i]
		if t.TTL <= left+p.tierMargin(t.TTL, lag) {
			return Hop{Queue: t.Queue, RoutingKey: t.RoutingKey, TTL: t.TTL}, false
		}
	}
	return Hop{Queue: p.d.PreciseQueue, RoutingKey: p.d.PreciseKey, TTL: roundUpMs(left), Precise: true}, false
}

func roundUpMs(d time.Duration) time.Duration {
	if r := d % time.Millisecond; r != 0 {
		d += time.Millisecond - r
	}
	return d
}

// Plan returns every hop a delay takes if each hop is exactly on time (the
// relay re-plans at each step, so real hops absorb lag). In round-up mode
// it is always one hop.
func (p *Planner) Plan(delay time.Duration) ([]Hop, error) {
	if err := p.Check(delay); err != nil {
		return nil, err
	}
	if p.d.Mode == topology.DelayRoundUp {
		h, err := p.roundUp(delay)
		if err != nil {
			return nil, err
		}
		return []Hop{h}, nil
	}
	var hops []Hop
	left := delay
	for {
		h, due := p.Next(left, 0)
		if due {
			return hops, nil
		}
		hops = append(hops, h)
		left -= h.TTL
	}
}

// First returns the first hop for a delay.
func (p *Planner) First(delay time.Duration) (Hop, error) {
	if err := p.Check(delay); err != nil {
		return Hop{}, err
	}
	if p.d.Mode == topology.DelayRoundUp {
		return p.roundUp(delay)
	}
	h, due := p.Next(delay, 0)
	if due { // below the tolerance: still honour "later" with the precise queue
		return Hop{Queue: p.d.PreciseQueue, RoutingKey: p.d.PreciseKey, TTL: roundUpMs(delay), Precise: true}, nil
	}
	return h, nil
}

// roundUp is seed 003's selection rule: below the precise threshold the
// precise queue (a threshold of 0 disables it), otherwise the smallest
// tier that is not shorter than the delay.
func (p *Planner) roundUp(delay time.Duration) (Hop, error) {
	if p.d.PreciseThreshold > 0 && delay < p.d.PreciseThreshold {
		return Hop{Queue: p.d.PreciseQueue, RoutingKey: p.d.PreciseKey, TTL: roundUpMs(delay), Precise: true}, nil
	}
	for _, t := range p.d.Tiers {
		if delay <= t.TTL {
			return Hop{Queue: t.Queue, RoutingKey: t.RoutingKey, TTL: t.TTL}, nil
		}
	}
	return Hop{}, fmt.Errorf("%w: %s exceeds the largest tier", ErrTooLong, delay)
}

// Final reports whether hop, leaving left after it, is the last one: in
// round-up mode always; in exact mode when what is left after it is within
// the tolerance.
func (p *Planner) Final(hop Hop, left time.Duration) bool {
	return p.d.Mode == topology.DelayRoundUp || left <= p.tolerance
}

// After returns the CC routing key a hop is published with: the target's
// routing key for the final hop (the broker delivers it at expiry), the
// relay's key otherwise.
func (p *Planner) After(hop Hop, left time.Duration, targetKey, relayKey string) string {
	if p.Final(hop, left) {
		return targetKey
	}
	return relayKey
}
