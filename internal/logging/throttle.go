package logging

import (
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// ThrottleConfig bounds the lines of one kind that arrive in floods.
type ThrottleConfig struct {
	// Burst is how many lines of one key are written in each Interval;
	// the rest are counted. 0 writes every line (no throttle).
	Burst int
	// Interval is the window Burst applies to, and how often a summary
	// of the lines held back is written. Default 10 s.
	Interval time.Duration
}

// Defaults of ThrottleConfig (LOG_REQUEST_BURST, LOG_REQUEST_INTERVAL).
const (
	DefaultThrottleBurst    = 20
	DefaultThrottleInterval = 10 * time.Second
)

// HeldBack is the message of a Throttle's summary lines.
const HeldBack = "log lines held back"

// Throttle bounds the lines of a kind that come in floods exactly when the
// system is already busiest, such as the API's refused requests under
// overload (issue 38: 19,920 refusals in 5 s wrote 39,839 lines). Per key
// (a route and status), the first Burst lines of each Interval are
// written, the rest only counted; once an Interval in which some were
// held back has passed, one line per such key says how many
// ("held_back", with the key's fields, "of" naming the lines by
// convention, and the "interval"). A flood of any
// length then writes at most Burst+1 lines per key and Interval, while
// the metrics, which a Throttle never sees, count every event.
//
// A Throttle must never hold back what someone has to act on one by one:
// errors and panics go around it. Its timer writes a summary even when
// the flood stops; Close writes what is still owed. It is safe for
// concurrent use.
type Throttle struct {
	log   *zap.Logger
	cfg   ThrottleConfig
	now   func() time.Time
	mu    sync.Mutex
	start time.Time // of the current interval; zero when none is open
	keys  map[string]*throttled
	owed  bool        // some line of the interval was held back
	timer *time.Timer // writes the interval's summary when it ends
	gen   int         // which interval the timer was armed for
	done  bool
}

type throttled struct {
	written, held int
	level         zapcore.Level
	fields        []zap.Field // the key's, for its summary line
}

// NewThrottle returns a Throttle writing its summaries to log.
func NewThrottle(log *zap.Logger, cfg ThrottleConfig) *Throttle {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultThrottleInterval
	}
	return &Throttle{log: log, cfg: cfg, now: time.Now, keys: map[string]*throttled{}}
}

// Allow reports whether a line of key at level may be written now; when
// not, it is counted for key's summary line, which carries fields (the
// first call's in the interval: say what the key is, route and status).
func (t *Throttle) Allow(key string, level zapcore.Level, fields ...zap.Field) bool {
	if t == nil || t.cfg.Burst <= 0 {
		return true
	}
	t.mu.Lock()
	if t.done {
		t.mu.Unlock()
		return true
	}
	now := t.now()
	var due []*throttled
	if !t.start.IsZero() && now.Sub(t.start) >= t.cfg.Interval {
		due = t.rollLocked()
	}
	if t.start.IsZero() {
		t.start = now
	}
	k := t.keys[key]
	if k == nil {
		k = &throttled{level: level, fields: fields}
		t.keys[key] = k
	}
	allow := k.written < t.cfg.Burst
	if allow {
		k.written++
	} else {
		k.held++
		k.level = max(k.level, level)
		if !t.owed {
			t.owed = true
			gen := t.gen
			t.timer = time.AfterFunc(t.start.Add(t.cfg.Interval).Sub(now), func() { t.expire(gen) })
		}
	}
	t.mu.Unlock()
	t.write(due)
	return allow
}

// expire ends interval gen, if it is still the current one.
func (t *Throttle) expire(gen int) {
	t.mu.Lock()
	var due []*throttled
	if gen == t.gen && !t.done {
		due = t.rollLocked()
	}
	t.mu.Unlock()
	t.write(due)
}

// rollLocked closes the current interval and returns the keys whose
// summary is owed.
func (t *Throttle) rollLocked() []*throttled {
	var due []*throttled
	for _, k := range t.keys {
		if k.held > 0 {
			due = append(due, k)
		}
	}
	if t.timer != nil {
		t.timer.Stop()
		t.timer = nil
	}
	clear(t.keys)
	t.start, t.owed = time.Time{}, false
	t.gen++
	return due
}

func (t *Throttle) write(due []*throttled) {
	for _, k := range due {
		if ce := t.log.Check(k.level, HeldBack); ce != nil {
			ce.Write(slices.Concat(k.fields, []zap.Field{zap.Int("held_back", k.held), zap.Int("logged", k.written), zap.Duration("interval", t.cfg.Interval)})...)
		}
	}
}

// Close writes the summaries still owed and stops the timer; lines
// allowed after it are written, never counted.
func (t *Throttle) Close() {
	if t == nil {
		return
	}
	t.mu.Lock()
	due := t.rollLocked()
	t.done = true
	t.mu.Unlock()
	t.write(due)
}
