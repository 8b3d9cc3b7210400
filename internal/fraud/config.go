package fraud

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/phone"
)

// Level is FRAUD_GUARD: how eagerly the guard blocks a prefix.
type Level string

// The levels. Off turns the guard off; the others set every threshold's
// default (Levels).
const (
	Off      Level = "off"
	Basic    Level = "basic"
	Standard Level = "standard"
	Max      Level = "max"
)

// LevelNames lists the levels as FRAUD_GUARD spells them.
var LevelNames = []string{string(Off), string(Basic), string(Standard), string(Max)}

// Thresholds are what the guard judges a prefix by (ratelimit.Guard).
type Thresholds struct {
	// MinSends codes sent to a prefix in Window before its share of
	// verified codes is judged, and MinVerified that share.
	MinSends    int
	MinVerified float64
	// SpikeMin codes in Window, and more than SpikeFactor times the
	// prefix's own average per Window over Baseline, block it too.
	SpikeFactor float64
	SpikeMin    int
	Window      time.Duration
	Baseline    time.Duration
	// BlockFor is how long a block lasts, unless lifted.
	BlockFor time.Duration
}

// Levels are each level's thresholds: FRAUD_GUARD's meaning, and each
// FRAUD_GUARD_* setting's default. Legitimate SMS codes are verified at
// 60 to 90% in the hour; pumped ones almost never. A prefix here is a
// block of 10,000 numbers (Prefix): a hundred codes an hour to one such
// block from one tenant, with few of them verified, is not a crowd of
// users.
var Levels = map[Level]Thresholds{
	Basic:    {MinSends: 100, MinVerified: 0.10, SpikeFactor: 20, SpikeMin: 1000, Window: time.Hour, Baseline: 24 * time.Hour, BlockFor: 30 * time.Minute},
	Standard: {MinSends: 50, MinVerified: 0.20, SpikeFactor: 10, SpikeMin: 300, Window: time.Hour, Baseline: 24 * time.Hour, BlockFor: time.Hour},
	Max:      {MinSends: 20, MinVerified: 0.35, SpikeFactor: 5, SpikeMin: 100, Window: time.Hour, Baseline: 24 * time.Hour, BlockFor: 4 * time.Hour},
}

// Config configures the guard.
type Config struct {
	Level Level
	Thresholds
	// Lift says who may lift a block (FRAUD_GUARD_LIFT): "" is LiftTenant.
	Lift Lifter
	// PrefixDigits overrides, per country (ISO code), how many digits of
	// the national number a prefix keeps (FRAUD_GUARD_PREFIX_DIGITS);
	// elsewhere it is all but the last four (Prefix).
	PrefixDigits map[string]int
}

// Lifter is who may lift a block before it ends.
type Lifter string

const (
	// LiftTenant: the blocked tenant's own send keys, and admin keys. A
	// tenant that knows its traffic is real is not kept waiting on an
	// operator; its lifts are logged.
	LiftTenant Lifter = "tenant"
	// LiftAdmin: admin keys only. A tenant that lifts its own blocks again
	// and again (a compromised key, or a careless one) defeats the guard;
	// an operator who must decide takes that from it (issue 43).
	LiftAdmin Lifter = "admin"
)

// Validate checks the settings; a level other than off needs every
// threshold (LoadAPI fills them from Levels).
func (c *Config) Validate() error {
	c.Level = cmp.Or(c.Level, Standard)
	switch c.Lift {
	case "":
		c.Lift = LiftTenant
	case LiftTenant, LiftAdmin:
	default:
		return fmt.Errorf("fraud: lift %q: want tenant or admin", c.Lift)
	}
	if c.Level == Off {
		return nil
	}
	t, ok := Levels[c.Level]
	if !ok {
		return fmt.Errorf("fraud: level %q: want one of %s", c.Level, strings.Join(LevelNames, ", "))
	}
	if c.Thresholds == (Thresholds{}) {
		c.Thresholds = t
	}
	switch {
	case c.MinSends < 1 || c.SpikeMin < 1:
		return fmt.Errorf("fraud: min sends %d and spike min %d must be positive", c.MinSends, c.SpikeMin)
	case c.MinVerified < 0 || c.MinVerified > 1:
		return fmt.Errorf("fraud: min verified %g must be between 0 and 1", c.MinVerified)
	case c.SpikeFactor < 1:
		return fmt.Errorf("fraud: spike factor %g must be at least 1", c.SpikeFactor)
	case c.Window < time.Minute || c.Baseline < 2*c.Window:
		return fmt.Errorf("fraud: window %s (at least 1m) and baseline %s (at least twice the window)", c.Window, c.Baseline)
	case c.BlockFor < time.Second:
		return fmt.Errorf("fraud: block period %s is under 1s", c.BlockFor)
	}
	for region, n := range c.PrefixDigits {
		if n < 1 || n > 14 {
			return fmt.Errorf("fraud: prefix digits for %s: %d not in 1..14", region, n)
		}
	}
	return nil
}

// droppedDigits is how many digits of a national number the default prefix
// drops: a block of 10,000 numbers, the unit most numbering plans assign
// in (a NANP exchange NPA-NXX, a Chinese mobile "H code" 1XX-XXXX, a UK
// 07XXX-XX block), and what an attacker's sequential numbers share.
const droppedDigits = 4

// Prefix is the destination the guard watches for n: "+", the country
// calling code and the first digits of the national number: all but the
// last four (PrefixDigits overrides per country), at least one. A prefix
// never reaches past the national number.
func (c *Config) Prefix(n phone.Number) string {
	keep, ok := c.PrefixDigits[n.Region]
	if !ok {
		keep = len(n.National) - droppedDigits
	}
	keep = max(min(keep, len(n.National)), 1)
	return "+" + strconv.Itoa(n.CallingCode) + n.National[:keep]
}

// ParsePrefixDigits reads FRAUD_GUARD_PREFIX_DIGITS: GB=5,US=6.
func ParsePrefixDigits(entries []string) (map[string]int, error) {
	out := map[string]int{}
	for _, e := range entries {
		region, digits, ok := strings.Cut(e, "=")
		c, err := phone.ParseCountries(region)
		if !ok || err != nil || len(c) != 1 {
			return nil, fmt.Errorf("entry %q: want COUNTRY=DIGITS such as GB=5", e)
		}
		n, err := strconv.Atoi(strings.TrimSpace(digits))
		if err != nil || n < 1 || n > 14 {
			return nil, fmt.Errorf("entry %q: digits must be 1 to 14", e)
		}
		out[c[0]] = n
	}
	return out, nil
}
