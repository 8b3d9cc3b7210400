package mailcatcher

import "sync"

// SMTPOutage is a hook (Server.SetHook) for a provider outage, for fault
// tests and trying a consumer's retries by hand: while it
// lasts, every message is refused at DATA with 451 (try again later), as a
// mail server that is down for a while answers. It counts the attempts by
// recipient. Before, when set, runs first for each message (to hold some
// attempts until a moment of the test's choosing).
type SMTPOutage struct {
	Before func(Envelope)

	mu    sync.Mutex
	down  bool
	tried map[string]int
}

// NewSMTPOutage returns an outage that has begun.
func NewSMTPOutage() *SMTPOutage { return &SMTPOutage{down: true, tried: map[string]int{}} }

// Hook decides each message (Server.SetHook).
func (o *SMTPOutage) Hook(e Envelope) error {
	if e.Stage != StageData {
		return nil
	}
	if o.Before != nil {
		o.Before(e)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.tried[e.To[0]]++
	if o.down {
		return Reject(451, "4.3.0 try again later")
	}
	return nil
}

// End ends the outage: what comes next is accepted.
func (o *SMTPOutage) End() {
	o.mu.Lock()
	o.down = false
	o.mu.Unlock()
}

// Recipients is how many recipients were tried; Attempts how many tries
// there were in all.
func (o *SMTPOutage) Recipients() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.tried)
}

// Attempts counts every message the server was asked to take.
func (o *SMTPOutage) Attempts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, k := range o.tried {
		n += k
	}
	return n
}
