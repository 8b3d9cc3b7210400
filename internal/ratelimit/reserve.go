package ratelimit

import "math"

// Reserve returns rules held back from the last share of every window (at
// least one request; a limit of one is left whole, or the requests held
// back could never pass), under the same keys: counted together with the
// requests checked against rules themselves, they stop where those still
// pass, and the rest of each window is theirs alone (seed 004's traffic
// shaper). for names who the reserve is for, in the rules' names and so in
// a refusal's message. rules are not changed.
//
// Each lowered window keeps its full limit (Window.Full), which decides how
// it is counted: a reserve that took a window under LIMIT_EXACT_MAX would
// otherwise count it in another structure than its full form, where
// neither would see the other.
func Reserve(rules []Rule, share float64, forWhom string) []Rule {
	out := make([]Rule, len(rules))
	for i, r := range rules {
		r.Windows = append([]Window(nil), r.Windows...)
		for k := range r.Windows {
			w := &r.Windows[k]
			w.Full = max(w.Full, w.Limit)
			if w.Limit > 1 {
				w.Limit -= max(1, int(math.Ceil(float64(w.Limit)*share)))
			}
		}
		r.Name += " (less the reserve for " + forWhom + ")"
		out[i] = r
	}
	return out
}
