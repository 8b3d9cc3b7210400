package config

import (
	"time"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Delay configures delayed delivery beyond what the topology model needs.
type Delay struct {
	Margin    time.Duration // a hop may take a tier up to this much longer than the time left
	Tolerance time.Duration // the relay delivers when this little is left
}

// loadDelay reads the relay's planning knobs.
func loadDelay(l *envconf.Loader) Delay {
	return Delay{
		Margin:    l.Duration("DELAY_MARGIN", 20*time.Millisecond, 0, time.Second, "exact mode: take a tier when it is at most this much longer than the time left (absorbs relay lag so a hop is not split into many; bounded per tier to 1/64 of it)"),
		Tolerance: l.Duration("DELAY_TOLERANCE", 2*time.Millisecond, 0, time.Second, "exact mode: the relay delivers a message when this little time is left"),
	}
}

func loadDelayTopology(l *envconf.Loader, c *topology.DelayConfig) {
	c.Exchange = l.String("DELAY_EXCHANGE", c.Exchange, "name of the delay exchange (seed 003's default)")
	c.Tiers = l.Durations("DELAY_TIERS", c.Tiers, time.Millisecond, 7*24*time.Hour, "delay queue tiers, ascending; each is a queue queue.delay.<tier> with that TTL")
	c.Mode = topology.DelayMode(l.Enum("DELAY_MODE", string(c.Mode), []string{string(topology.DelayExact), string(topology.DelayRoundUp)},
		"exact: compose hops and relay so every delay is on time; round-up: seed 003's scheme C"))
	c.PreciseThreshold = l.Duration("DELAY_PRECISE_THRESHOLD", c.PreciseThreshold, 0, 24*time.Hour, "round-up mode: delays below this use the precise queue (0 disables it)")
	c.MaxLength = l.Int("DELAY_QUEUE_MAX_LENGTH", c.MaxLength, 1, 100_000_000, "max messages per delay queue; a full one refuses publishes (reject-publish), never drops")
	c.Max = l.Duration("DELAY_MAX", c.Max, time.Millisecond, 7*24*time.Hour, "longest delay accepted; longer ones need an external scheduler")
	if err := c.Validate(); err != nil {
		l.Fail("DELAY_TIERS", "", "%v", err)
	}
}
