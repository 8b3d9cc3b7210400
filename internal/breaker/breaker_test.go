package breaker

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is advanced by hand so that no test waits on real time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setup(t *testing.T, cfg Config) (*Breaker, *fakeClock) {
	t.Helper()
	clk := &fakeClock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	return New(cfg, clk.Now), clk
}

// step is one thing done to a breaker and what it must answer.
type step struct {
	op        string // allow, deny, success, failure, wait, state
	d         time.Duration
	wantRetry time.Duration
	wantState State
}

func allow() step                   { return step{op: "allow"} }
func deny(retry time.Duration) step { return step{op: "deny", wantRetry: retry} }
func success() step                 { return step{op: "success"} }
func failure() step                 { return step{op: "failure"} }
func wait(d time.Duration) step     { return step{op: "wait", d: d} }
func state(s State) step            { return step{op: "state", wantState: s} }
func failures(n int) (steps []step) {
	for range n {
		steps = append(steps, allow(), failure())
	}
	return steps
}

func seq(parts ...any) (out []step) {
	for _, p := range parts {
		switch v := p.(type) {
		case step:
			out = append(out, v)
		case []step:
			out = append(out, v...)
		}
	}
	return out
}

func TestBreakerTransitions(t *testing.T) {
	t.Parallel()
	def := Config{FailureThreshold: 3, OpenFor: 10 * time.Second, HalfOpenProbes: 1}
	for _, tc := range []struct {
		name  string
		cfg   Config
		steps []step
	}{
		{"starts closed and allows", def, seq(state(Closed), allow(), success(), state(Closed))},
		{"opens after threshold consecutive failures", def, seq(failures(2), state(Closed), failures(1), state(Open), deny(10*time.Second))},
		{"a success resets the consecutive count", def, seq(failures(2), allow(), success(), failures(2), state(Closed), failures(1), state(Open))},
		{"retryIn counts down while open", def, seq(failures(3), wait(4*time.Second), deny(6*time.Second), wait(5*time.Second), deny(time.Second))},
		{"half-open after OpenFor", def, seq(failures(3), wait(10*time.Second), state(HalfOpen), allow())},
		{"half-open lets only HalfOpenProbes through", def, seq(failures(3), wait(10*time.Second), allow(), deny(10*time.Second), state(HalfOpen))},
		{"probe success closes", def, seq(failures(3), wait(10*time.Second), allow(), success(), state(Closed), allow(), allow())},
		{"probe failure re-opens for a full OpenFor", def, seq(failures(3), wait(10*time.Second), allow(), failure(), state(Open), deny(10*time.Second), wait(9*time.Second), deny(time.Second), wait(time.Second), allow())},
		{"after closing again it needs threshold failures to open", def, seq(failures(3), wait(10*time.Second), allow(), success(), failures(2), state(Closed), failures(1), state(Open))},
		{"two probes when configured", Config{FailureThreshold: 1, OpenFor: time.Second, HalfOpenProbes: 2}, seq(failures(1), wait(time.Second), allow(), allow(), deny(time.Second))},
		{"unreported probe is written off after OpenFor", def, seq(failures(3), wait(10*time.Second), allow(), wait(3*time.Second), deny(7*time.Second), wait(7*time.Second), allow())},
		{"late success while open does not close", def, seq(failures(3), success(), state(Open), deny(10*time.Second))},
		{"late failure while open does not extend the pause", def, seq(failures(3), wait(5*time.Second), failure(), deny(5*time.Second))},
		{"zero config takes defaults", Config{}, seq(failures(4), state(Closed), failures(1), state(Open), deny(DefaultOpenFor))},
		{"negative config falls back to defaults", Config{FailureThreshold: -1, OpenFor: -time.Second}, seq(failures(4), state(Closed), failures(1), deny(DefaultOpenFor))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b, clk := setup(t, tc.cfg)
			for i, s := range tc.steps {
				switch s.op {
				case "allow":
					ok, retry := b.Allow()
					require.True(t, ok, "step %d: allow", i)
					require.Zero(t, retry, "step %d", i)
				case "deny":
					ok, retry := b.Allow()
					require.False(t, ok, "step %d: deny", i)
					require.Equal(t, s.wantRetry, retry, "step %d: retryIn", i)
				case "success":
					b.Success()
				case "failure":
					b.Failure()
				case "wait":
					clk.Advance(s.d)
				case "state":
					require.Equal(t, s.wantState, b.State(), "step %d: state", i)
				}
			}
		})
	}
}

func TestConfigValidateAndDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		cfg     Config
		wantErr string
	}{
		{"zero is valid", Config{}, ""},
		{"explicit", Config{FailureThreshold: 2, OpenFor: time.Minute, HalfOpenProbes: 3}, ""},
		{"negative threshold", Config{FailureThreshold: -1}, "FailureThreshold"},
		{"negative open", Config{OpenFor: -time.Second}, "OpenFor"},
		{"negative probes", Config{HalfOpenProbes: -2}, "HalfOpenProbes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.wantErr)
		})
	}
	require.Equal(t, Config{FailureThreshold: 5, OpenFor: 30 * time.Second, HalfOpenProbes: 1}, Config{}.WithDefaults())
	require.Equal(t, Config{FailureThreshold: 2, OpenFor: time.Minute, HalfOpenProbes: 3},
		New(Config{FailureThreshold: 2, OpenFor: time.Minute, HalfOpenProbes: 3}, nil).Config())
}

func TestStateString(t *testing.T) {
	t.Parallel()
	for s, want := range map[State]string{Closed: "closed", Open: "open", HalfOpen: "half-open", State(9): "State(9)"} {
		require.Equal(t, want, s.String())
	}
}

// Hammers one breaker from many goroutines under -race, and checks the
// half-open promise holds under contention: never more than HalfOpenProbes
// calls in flight at once while half-open.
func TestBreakerConcurrent(t *testing.T) {
	t.Parallel()
	const probes = 2
	b, clk := setup(t, Config{FailureThreshold: 3, OpenFor: time.Second, HalfOpenProbes: probes})
	for range 3 {
		b.Allow()
		b.Failure()
	}
	require.Equal(t, Open, b.State())
	clk.Advance(time.Second)

	// Nobody reports back: exactly `probes` goroutines may get through.
	var allowed atomic.Int32
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if ok, _ := b.Allow(); ok {
				allowed.Add(1)
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, probes, allowed.Load())

	// Then a storm of mixed outcomes and clock moves: it must stay
	// consistent (no race, no panic, a valid state).
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				if ok, _ := b.Allow(); ok {
					if (i+j)%3 == 0 {
						b.Failure()
					} else {
						b.Success()
					}
				}
				if j%50 == 0 {
					clk.Advance(100 * time.Millisecond)
				}
				_ = b.State().String()
			}
		}()
	}
	wg.Wait()
	require.Contains(t, []State{Closed, Open, HalfOpen}, b.State())
}
