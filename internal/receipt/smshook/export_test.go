package smshook

import "time"

// SetNow sets the hooks' clock.
func SetNow(h *Hooks, now func() time.Time) { h.now = now }
