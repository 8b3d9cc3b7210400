package ratelimit

import (
	"errors"
	"fmt"
	"regexp"
	"time"
)

// MaxLimit caps every limit of a Config. A rule's log holds up to its largest
// limit entries (~100 bytes each in Redis), so this bounds one config's
// memory to ~100 MB even with a per-day limit.
const MaxLimit = 1_000_000

var slugRE = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// Config is one admin-managed rate-limit configuration: global when Provider
// is nil, else for the messages sent through that provider. A zero limit is
// unlimited.
type Config struct {
	ID                string  `json:"id"`
	Provider          *string `json:"provider"`
	RequestsPerSecond int     `json:"requestsPerSecond"`
	RequestsPerMinute int     `json:"requestsPerMinute"`
	RequestsPerHour   int     `json:"requestsPerHour"`
	RequestsPerDay    int     `json:"requestsPerDay"`
	IsEnabled         bool    `json:"isEnabled"`
}

type configWindow struct {
	field string // JSON name, for validation messages
	w     Window
}

func (c Config) windows() [4]configWindow {
	return [4]configWindow{
		{"requestsPerSecond", Window{Length: time.Second, Limit: c.RequestsPerSecond}},
		{"requestsPerMinute", Window{Length: time.Minute, Limit: c.RequestsPerMinute}},
		{"requestsPerHour", Window{Length: time.Hour, Limit: c.RequestsPerHour}},
		{"requestsPerDay", Window{Length: 24 * time.Hour, Limit: c.RequestsPerDay}},
	}
}

// Validate reports every problem at once, naming the JSON fields, so the
// admin API can return it as is.
func (c Config) Validate() error {
	var errs []error
	if !slugRE.MatchString(c.ID) {
		errs = append(errs, fmt.Errorf("id %q: must be 1-64 of a-z 0-9 _ -", c.ID))
	}
	if c.Provider != nil && !slugRE.MatchString(*c.Provider) {
		errs = append(errs, fmt.Errorf("provider %q: must be 1-64 of a-z 0-9 _ - (or null for a global limit)", *c.Provider))
	}
	ws := c.windows()
	for _, w := range ws {
		if w.w.Limit < 0 || w.w.Limit > MaxLimit {
			errs = append(errs, fmt.Errorf("%s %d: must be between 0 (unlimited) and %d", w.field, w.w.Limit, MaxLimit))
		}
	}
	// A longer window with a smaller limit than a shorter one makes the
	// shorter one meaningless; that is almost always a typo.
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			a, b := ws[i].w.Limit, ws[j].w.Limit
			if a > 0 && b > 0 && a > b {
				errs = append(errs, fmt.Errorf("%s %d exceeds %s %d", ws[i].field, a, ws[j].field, b))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("ratelimit: invalid config: %w", errors.Join(errs...))
	}
	return nil
}

// Rules returns the rule this config imposes, or none when it is disabled or
// unlimited. Its key is the config id, so editing the limits keeps the
// history already counted.
func (c Config) Rules() []Rule {
	if !c.IsEnabled {
		return nil
	}
	var ws []Window
	for _, w := range c.windows() {
		if w.w.Limit > 0 {
			ws = append(ws, w.w)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	name := "rate limit " + c.ID
	if c.Provider != nil {
		name += " (provider " + *c.Provider + ")"
	}
	return []Rule{{Name: name, Label: "rate limit (configured)", Key: configRuleKey(c.ID), Windows: ws}}
}
