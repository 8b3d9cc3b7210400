package breaker

import (
	"cmp"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults used for zero Config fields.
const (
	DefaultFailureThreshold = 5
	DefaultOpenFor          = 30 * time.Second
	DefaultHalfOpenProbes   = 1
)

// ErrOpen is what callers wrap when they refuse work because a breaker is
// open, so errors.Is can tell "not tried" from "tried and failed".
var ErrOpen = errors.New("circuit breaker open")

// State is where a breaker is in its cycle.
type State int

// States.
const (
	Closed   State = iota // calls flow; consecutive failures are counted
	Open                  // calls are refused until OpenFor has passed
	HalfOpen              // a few probe calls decide whether to close again
)

func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// Config tunes a breaker; zero fields take the defaults above.
type Config struct {
	// FailureThreshold is how many consecutive failures open the breaker.
	FailureThreshold int
	// OpenFor is how long the breaker refuses calls before probing.
	OpenFor time.Duration
	// HalfOpenProbes is how many calls may probe at once while half-open.
	HalfOpenProbes int
}

// WithDefaults returns c with zero fields set to the defaults.
func (c Config) WithDefaults() Config {
	c.FailureThreshold = cmp.Or(c.FailureThreshold, DefaultFailureThreshold)
	c.OpenFor = cmp.Or(c.OpenFor, DefaultOpenFor)
	c.HalfOpenProbes = cmp.Or(c.HalfOpenProbes, DefaultHalfOpenProbes)
	return c
}

// Validate rejects negative values; zero means "use the default".
func (c Config) Validate() error {
	var errs []error
	if c.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("breaker: FailureThreshold %d must not be negative", c.FailureThreshold))
	}
	if c.OpenFor < 0 {
		errs = append(errs, fmt.Errorf("breaker: OpenFor %s must not be negative", c.OpenFor))
	}
	if c.HalfOpenProbes < 0 {
		errs = append(errs, fmt.Errorf("breaker: HalfOpenProbes %d must not be negative", c.HalfOpenProbes))
	}
	return errors.Join(errs...)
}

// Breaker is safe for concurrent use.
type Breaker struct {
	cfg Config
	now func() time.Time

	mu       sync.Mutex
	state    State
	failures int       // consecutive, while closed
	openedAt time.Time // when the breaker last opened
	inFlight int       // probes let through while half-open
	probedAt time.Time // when the last probe was let through
}

// New returns a closed breaker. Invalid (negative) fields fall back to the
// defaults rather than panicking: call cfg.Validate first to reject them. A
// nil now means time.Now.
func New(cfg Config, now func() time.Time) *Breaker {
	if cfg.Validate() != nil {
		cfg = Config{}
	}
	if now == nil {
		now = time.Now
	}
	return &Breaker{cfg: cfg.WithDefaults(), now: now}
}

// Config returns the effective configuration, defaults filled in.
func (b *Breaker) Config() Config { return b.cfg }

// Allow reports whether a call may go ahead. When it may not, retryIn is how
// long until the breaker will let a call through again (a hint for the
// caller's retry delay). Every allowed call must be followed by exactly one
// Success or Failure; a half-open probe whose outcome is never reported is
// written off after OpenFor so the breaker cannot wedge.
func (b *Breaker) Allow() (ok bool, retryIn time.Duration) {
	now := b.lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true, 0
	case Open:
		return false, b.openedAt.Add(b.cfg.OpenFor).Sub(now)
	}
	// Half-open.
	if b.inFlight > 0 && !now.Before(b.probedAt.Add(b.cfg.OpenFor)) {
		b.inFlight = 0 // the probes never reported back; try again
	}
	if b.inFlight < b.cfg.HalfOpenProbes {
		b.inFlight++
		b.probedAt = now
		return true, 0
	}
	return false, b.probedAt.Add(b.cfg.OpenFor).Sub(now)
}

// lock takes the breaker's lock and brings its state up to now (an open
// breaker whose OpenFor passed is half-open), which every method reads
// first; the caller unlocks.
func (b *Breaker) lock() time.Time {
	b.mu.Lock()
	now := b.now()
	b.advance(now)
	return now
}

// Success records a call that showed the dependency is healthy.
func (b *Breaker) Success() {
	b.lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		b.failures = 0
	case HalfOpen:
		b.close()
	case Open:
		// A call started before the breaker opened; one late success does
		// not outweigh the failures that opened it.
	}
}

// Failure records a call that showed the dependency is unhealthy.
func (b *Breaker) Failure() {
	now := b.lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		b.failures++
		if b.failures >= b.cfg.FailureThreshold {
			b.open(now)
		}
	case HalfOpen:
		b.open(now)
	case Open:
		// Late result of a call started before the breaker opened: already
		// counted as the reason to open; extending the pause would punish
		// the vendor twice for one outage.
	}
}

// State returns the current state; an open breaker whose pause has passed
// reports half-open, since the next Allow will probe.
func (b *Breaker) State() State {
	b.lock()
	defer b.mu.Unlock()
	return b.state
}

// advance moves an open breaker to half-open once OpenFor has passed. Lazy,
// so no timer goroutine is needed.
func (b *Breaker) advance(now time.Time) {
	if b.state == Open && !now.Before(b.openedAt.Add(b.cfg.OpenFor)) {
		b.state = HalfOpen
		b.inFlight = 0
	}
}

func (b *Breaker) open(now time.Time) {
	b.state = Open
	b.openedAt = now
	b.failures = 0
	b.inFlight = 0
}

func (b *Breaker) close() {
	b.state = Closed
	b.failures = 0
	b.inFlight = 0
}
