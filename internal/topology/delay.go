package topology

import (
	"fmt"
	"slices"
	"time"
)

// DelayMode chooses how a delay is turned into hops.
type DelayMode string

// Delay modes.
const (
	// DelayExact composes a delay from several tier hops (largest first)
	// and a relay that re-plans from the due time between hops, so every
	// delay arrives on time.
	DelayExact DelayMode = "exact"
	// DelayRoundUp is seed 003's scheme C: short delays go to the precise
	// queue, longer ones to the smallest tier that is not shorter.
	DelayRoundUp DelayMode = "round-up"
)

// Queue roles of the delay topology.
const (
	RoleDelay           Role = "delay"
	RoleRelay           Role = "relay"
	RoleRelayDeadLetter Role = "relay-dead-letter"
)

// DefaultDelayTiers are seed 003's tiers plus fine sub-second tiers.
var DefaultDelayTiers = []time.Duration{
	16 * time.Millisecond, 32 * time.Millisecond, 64 * time.Millisecond,
	128 * time.Millisecond, 256 * time.Millisecond, 512 * time.Millisecond,
	time.Second, 5 * time.Second, 30 * time.Second, time.Minute, 5 * time.Minute,
	30 * time.Minute, time.Hour, 6 * time.Hour, 24 * time.Hour,
}

// DelayConfig configures the delay topology.
type DelayConfig struct {
	Exchange         string          // default "easilynet.delay" (seed 003)
	Tiers            []time.Duration // sorted ascending, positive
	Mode             DelayMode
	PreciseThreshold time.Duration // round-up: below it, the precise queue; 0 disables it
	MaxLength        int           // x-max-length of every delay queue (reject-publish)
	Max              time.Duration // longest delay accepted (DELAY_MAX)
}

// DefaultDelay returns the delay defaults.
func DefaultDelay() DelayConfig {
	return DelayConfig{
		Exchange:         "easilynet.delay",
		Tiers:            slices.Clone(DefaultDelayTiers),
		Mode:             DelayExact,
		PreciseThreshold: 10 * time.Second,
		MaxLength:        200_000,
		Max:              24 * time.Hour,
	}
}

// Validate checks the delay settings.
func (d DelayConfig) Validate() error {
	if d.Exchange == "" {
		return fmt.Errorf("delay: exchange name is empty")
	}
	if d.Mode != DelayExact && d.Mode != DelayRoundUp {
		return fmt.Errorf("delay: mode %q: want exact or round-up", d.Mode)
	}
	if len(d.Tiers) == 0 {
		return fmt.Errorf("delay: no tiers")
	}
	seen := map[string]bool{}
	for i, t := range d.Tiers {
		if t <= 0 || t%time.Millisecond != 0 {
			return fmt.Errorf("delay: tier %s must be a positive whole number of milliseconds", t)
		}
		if i > 0 && t <= d.Tiers[i-1] {
			return fmt.Errorf("delay: tiers must be sorted ascending without repeats (%s after %s)", t, d.Tiers[i-1])
		}
		n := TierName(t)
		if seen[n] {
			return fmt.Errorf("delay: two tiers share the name %s", n)
		}
		seen[n] = true
	}
	if d.Max <= 0 || d.Max > d.Tiers[len(d.Tiers)-1] {
		return fmt.Errorf("delay: max delay %s must be positive and at most the largest tier (%s)", d.Max, d.Tiers[len(d.Tiers)-1])
	}
	if d.PreciseThreshold < 0 {
		return fmt.Errorf("delay: precise threshold must not be negative")
	}
	if d.MaxLength < 1 {
		return fmt.Errorf("delay: max length must be at least 1")
	}
	return nil
}

// TierName is how a tier appears in queue names: 16ms, 1s, 5m, 24h.
func TierName(t time.Duration) string {
	switch {
	case t%time.Hour == 0:
		return fmt.Sprintf("%dh", t/time.Hour)
	case t%time.Minute == 0:
		return fmt.Sprintf("%dm", t/time.Minute)
	case t%time.Second == 0:
		return fmt.Sprintf("%ds", t/time.Second)
	}
	return fmt.Sprintf("%dms", t/time.Millisecond)
}

// DelayTier is one delay queue of a fixed TTL.
type DelayTier struct {
	TTL        time.Duration
	Queue      string
	RoutingKey string
}

// DelayTopology names the delay resources.
type DelayTopology struct {
	Mode             DelayMode
	Exchange         string
	Tiers            []DelayTier // ascending
	PreciseQueue     string      // "" when round-up mode disables it
	PreciseKey       string
	RelayQueue       string // exact mode only
	RelayKey         string // the CC key that sends an expired hop to the relay
	RelayDeadLetterQ string // exact mode only: relay messages it cannot route
	RelayDeadKey     string
	// UnroutedQueue parks what the route exchange cannot route (a message
	// published to the delay exchange without msgpulse's CC key): the
	// route exchange's alternate exchange delivers it here instead of
	// letting it vanish.
	UnroutedQueue    string
	UnroutedExchange string
	// RouteExchange receives everything the delay queues dead-letter and
	// routes it by the CC key the hop was published with: RelayKey to the
	// relay, a channel's routing key to that channel's exchange.
	RouteExchange    string
	PreciseThreshold time.Duration
	Max              time.Duration
	MaxLength        int
}

// Queues are the delay queues, which hops are published to: every tier's
// and the precise queue, if there is one.
func (d DelayTopology) Queues() []string {
	out := make([]string, 0, len(d.Tiers)+1)
	for _, t := range d.Tiers {
		out = append(out, t.Queue)
	}
	if d.PreciseQueue != "" {
		out = append(out, d.PreciseQueue)
	}
	return out
}

// addDelay adds the delay exchange and queues to the model.
//
// A hop is published to the delay exchange with routing key delay.<tier>
// (or delay.precise and a per-message expiration) and one CC key that says
// where it goes when it expires. Delay queues dead-letter to the route
// exchange keeping the message's routing keys (no dead-letter routing key),
// so the CC key decides:
//   - "relay" (an intermediate hop, exact mode): to the relay queue, where
//     the relay re-plans from x-due-at and publishes the next hop;
//   - the channel's routing key (the final hop, and every hop in round-up
//     mode): through an exchange-to-exchange binding to the channel's
//     exchange and queue. The broker delivers it at expiry, without the
//     relay on the path: a burst due at once costs no relay round trips at
//     its due time.
//
// A message without a routable CC key (published to the delay exchange by
// something other than msgpulse) would match nothing on the route exchange
// and be dropped; its alternate exchange parks it in queue.delay.unrouted,
// where the DLQ tool shows it.
func (m *Model) addDelay(d DelayConfig, qt QueueType) {
	dt := DelayTopology{
		Mode: d.Mode, Exchange: d.Exchange, PreciseQueue: "queue.delay.precise", PreciseKey: "delay.precise",
		RouteExchange: d.Exchange + ".route", PreciseThreshold: d.PreciseThreshold, Max: d.Max, MaxLength: d.MaxLength,
		UnroutedQueue: "queue.delay.unrouted", UnroutedExchange: d.Exchange + ".unrouted",
	}
	m.Exchanges = append(m.Exchanges,
		Exchange{Name: d.Exchange, Kind: "direct", Durable: true},
		Exchange{Name: dt.RouteExchange, Kind: "direct", Durable: true, Args: map[string]any{"alternate-exchange": dt.UnroutedExchange}},
		Exchange{Name: dt.UnroutedExchange, Kind: "fanout", Durable: true},
	)
	m.Queues = append(m.Queues, Queue{Name: dt.UnroutedQueue, Type: qt, Durable: true, Role: RoleRelayDeadLetter, Args: map[string]any{}, Sources: map[string]string{}})
	m.Bindings = append(m.Bindings, Binding{Source: dt.UnroutedExchange, Destination: dt.UnroutedQueue, DestinationType: "queue"})
	addQueue := func(name, key string, ttl time.Duration) {
		args := map[string]any{ArgMaxLength: int64(d.MaxLength), ArgOverflow: "reject-publish", ArgDeadLetterExchange: dt.RouteExchange}
		if ttl > 0 {
			args[ArgMessageTTL] = ttl.Milliseconds()
		}
		if qt == Quorum {
			args[ArgDeadLetterStrategy] = "at-least-once"
		}
		m.Queues = append(m.Queues, Queue{Name: name, Type: qt, Durable: true, Role: RoleDelay, Args: args,
			Sources: map[string]string{ArgMaxLength: "DELAY_QUEUE_MAX_LENGTH"}})
		m.Bindings = append(m.Bindings, Binding{Source: d.Exchange, Destination: name, DestinationType: "queue", RoutingKey: key})
	}
	for _, t := range d.Tiers {
		tier := DelayTier{TTL: t, Queue: "queue.delay." + TierName(t), RoutingKey: "delay." + TierName(t)}
		dt.Tiers = append(dt.Tiers, tier)
		addQueue(tier.Queue, tier.RoutingKey, t)
	}
	if d.Mode == DelayExact || d.PreciseThreshold > 0 {
		addQueue(dt.PreciseQueue, dt.PreciseKey, 0)
	} else {
		dt.PreciseQueue, dt.PreciseKey = "", ""
	}
	// A due message goes back to the level it left: its final hop carries
	// that level's routing key.
	for _, c := range m.Channels {
		for _, lt := range c.Levels {
			m.Bindings = append(m.Bindings, Binding{Source: dt.RouteExchange, Destination: c.Exchange, DestinationType: "exchange", RoutingKey: lt.RoutingKey})
		}
	}
	if d.Mode == DelayExact {
		dt.RelayQueue, dt.RelayKey = "queue.delay.relay", "relay"
		dt.RelayDeadLetterQ, dt.RelayDeadKey = "queue.delay.relay.dlq", "delay.relay.dead"
		// The relay queue is unbounded on purpose: delay queues dead-letter
		// into it, and a classic queue silently drops dead letters that a
		// full reject-publish target refuses. Its depth is watched instead.
		m.Queues = append(m.Queues,
			Queue{Name: dt.RelayQueue, Type: qt, Durable: true, Role: RoleRelay,
				Args:    map[string]any{ArgDeadLetterExchange: d.Exchange, ArgDeadLetterRK: dt.RelayDeadKey},
				Sources: map[string]string{}},
			Queue{Name: dt.RelayDeadLetterQ, Type: qt, Durable: true, Role: RoleRelayDeadLetter, Args: map[string]any{}, Sources: map[string]string{}},
		)
		m.Bindings = append(m.Bindings,
			Binding{Source: dt.RouteExchange, Destination: dt.RelayQueue, DestinationType: "queue", RoutingKey: dt.RelayKey},
			Binding{Source: d.Exchange, Destination: dt.RelayDeadLetterQ, DestinationType: "queue", RoutingKey: dt.RelayDeadKey},
		)
	}
	m.Delay = dt
}
