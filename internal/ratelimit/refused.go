package ratelimit

import (
	"errors"
	"fmt"
	"time"
)

// Why a Take refused a request: the limit it names (LimitError), and how
// the script's refusal is read back into it.

// ErrLimited is matched (errors.Is) by every *LimitError.
var ErrLimited = errors.New("ratelimit: limited")

// LimitError says which limit denied a request and when to retry.
type LimitError struct {
	Rule       string        // Rule.Name or Cooldown.Name
	Label      string        // Rule.Label: the metric's name for the rule ("" means Rule)
	Key        string        // Rule.Key or Cooldown.Key
	Window     time.Duration // the violated window's length; the cooldown's For
	Limit      int           // the violated window's limit; 1 for a cooldown
	RetryAfter time.Duration // until the request would be admitted as far as this limit goes
	Cooldown   bool
	// LeftBehind, on a Redis Cluster, is what the refused request may
	// still hold because its undo failed twice (nil: nothing).
	LeftBehind *LeftBehind
}

// LeftBehind is what a refused request may still hold on a Redis Cluster:
// its slots are checked by separate scripts, those that admit it reserve
// before another refuses, and undoing them failed. Each piece expires by
// itself, within For; until then it counts against its rule (a cooldown
// refuses the recipient's next request). It names no key: keys carry
// recipients.
type LeftBehind struct {
	Reservation string        // the id the keys hold (a log's member, the cooldown's value)
	Rules       []string      // the rules and the cooldown that may still count it
	For         time.Duration // the longest of their windows: all of it is gone by then
	Err         error         // why the undo failed
}

func (e *LimitError) Error() string {
	name := e.Rule
	if name == "" {
		name = e.Key
	}
	if e.Cooldown {
		return fmt.Sprintf("%s: wait %s", name, time.Duration(e.RetryAfterSeconds())*time.Second)
	}
	return fmt.Sprintf("%s: over the %s limit (%d)", name, WindowName(e.Window), e.Limit)
}

// Is makes errors.Is(err, ErrLimited) true.
func (e *LimitError) Is(target error) bool { return target == ErrLimited }

// RetryAfterSeconds is RetryAfter rounded up to whole seconds (at least 1),
// as the Retry-After header wants: rounding down would invite a retry that is
// still denied.
func (e *LimitError) RetryAfterSeconds() int {
	s := int((e.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// WindowName names a window length for messages and metric labels.
func WindowName(d time.Duration) string {
	switch d {
	case time.Second:
		return "per-second"
	case time.Minute:
		return "per-minute"
	case time.Hour:
		return "per-hour"
	case 24 * time.Hour:
		return "per-day"
	}
	return "per " + d.String()
}

// refusal reads the script's {1, rule, window, retry ms} reply, or the
// guard's {1, -1, reason, retry ms, sent, verified, started}.
func refusal(raw []any) ([]int64, error) {
	out := make([]int64, len(raw))
	for i, v := range raw {
		out[i], _ = v.(int64)
	}
	if len(out) != 4 && (len(out) != 7 || out[1] != -1) {
		return nil, fmt.Errorf("ratelimit: take: unexpected reply %v", raw)
	}
	return out, nil
}

// limitError turns a refusal into the LimitError naming the request's rule
// and window; rule and window are the script's 1-based positions, which
// ruleIdx and winIdx map back to req.
func limitError(req Request, out []int64, ruleIdx []int, winIdx [][]int) error {
	rule, window, retry := int(out[1]), int(out[2]), time.Duration(out[3])*time.Millisecond
	if rule == -1 && req.Guard != nil {
		ge := guardRefusal(out)
		ge.Destination, ge.Label = req.Guard.Destination, req.Guard.Label
		return ge
	}
	if rule == 0 {
		cd := req.Cooldown
		return &LimitError{Rule: cd.Name, Key: cd.Key, Window: cd.For, Limit: 1, RetryAfter: retry, Cooldown: true}
	}
	if rule < 1 || rule > len(ruleIdx) || window < 1 || window > len(winIdx[rule-1]) {
		return fmt.Errorf("ratelimit: take: reply names unknown window %d of rule %d", window, rule)
	}
	r := req.Rules[ruleIdx[rule-1]]
	w := r.Windows[winIdx[rule-1][window-1]]
	return &LimitError{Rule: r.Name, Label: r.Label, Key: r.Key, Window: w.Length, Limit: w.Limit, RetryAfter: retry}
}
