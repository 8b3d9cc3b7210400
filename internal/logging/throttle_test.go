package logging

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// clock is a Throttle's time, moved by the test.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func setupThrottle(t *testing.T, cfg ThrottleConfig) (*Throttle, *clock, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	th := NewThrottle(zap.New(core), cfg)
	c := &clock{t: time.Unix(1_700_000_000, 0)}
	th.now = c.now
	t.Cleanup(th.Close)
	return th, c, logs
}

// summaries are the held-back lines written, by their "route".
func summaries(logs *observer.ObservedLogs) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, e := range logs.FilterMessage(HeldBack).All() {
		m := e.ContextMap()
		m["level"] = e.Level.String()
		out[m["route"].(string)] = m
	}
	return out
}

// Per key, Burst lines an interval; the rest are counted, and the next
// interval starts with one line per key that held some back.
func TestThrottleWritesABurstPerKeyThenOneSummary(t *testing.T) {
	t.Parallel()
	th, c, logs := setupThrottle(t, ThrottleConfig{Burst: 3, Interval: time.Hour})
	allowed := map[string]int{}
	for range 1000 {
		if th.Allow("send 503", zapcore.WarnLevel, zap.String("route", "send")) {
			allowed["send"]++
		}
	}
	for range 2 {
		if th.Allow("get 404", zapcore.InfoLevel, zap.String("route", "get")) {
			allowed["get"]++
		}
	}
	require.Equal(t, map[string]int{"send": 3, "get": 2}, allowed)
	require.Zero(t, logs.Len(), "no summary before the interval ends")

	c.add(time.Hour)
	require.True(t, th.Allow("send 503", zapcore.WarnLevel, zap.String("route", "send")), "a new interval, a new burst")
	got := summaries(logs)
	require.Len(t, got, 1, "a key that held nothing back has no summary")
	require.Equal(t, map[string]any{"route": "send", "held_back": int64(997), "logged": int64(3), "interval": time.Hour, "level": "warn"}, got["send"])
}

// The timer writes the summary once the interval is over, also when no
// line comes after the flood; Close writes what is owed at once.
func TestThrottleSummarisesWithoutAnotherLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		interval time.Duration
		close    bool
	}{
		{"timer", 20 * time.Millisecond, false},
		{"close", time.Hour, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			core, logs := observer.New(zapcore.DebugLevel)
			th := NewThrottle(zap.New(core), ThrottleConfig{Burst: 1, Interval: tc.interval})
			t.Cleanup(th.Close)
			for range 5 {
				th.Allow("k", zapcore.InfoLevel, zap.String("route", "r"))
			}
			if tc.close {
				th.Close()
				require.True(t, th.Allow("k", zapcore.InfoLevel), "after Close every line is written")
			}
			testenv.WaitFor(t, 10*time.Second, "a summary line", func() bool { return logs.FilterMessage(HeldBack).Len() > 0 })
			got := summaries(logs)
			require.Len(t, got, 1)
			require.Equal(t, int64(4), got["r"]["held_back"])
			th.Close()
			require.Equal(t, 1, logs.FilterMessage(HeldBack).Len(), "each summary once")
		})
	}
}

// Burst 0 is no throttle: every line, no summary.
func TestThrottleOff(t *testing.T) {
	t.Parallel()
	th, _, logs := setupThrottle(t, ThrottleConfig{})
	for range 100 {
		require.True(t, th.Allow("k", zapcore.WarnLevel))
	}
	th.Close()
	require.Zero(t, logs.Len())
	var none *Throttle
	require.True(t, none.Allow("k", zapcore.WarnLevel), "a nil Throttle writes everything")
}
