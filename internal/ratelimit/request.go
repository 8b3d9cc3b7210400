package ratelimit

import (
	"time"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// What a caller asks a Take for (Request, its Rules and Cooldown) and what
// a Take gives back to undo it (Reservation).

// Window is one sliding window of a rule. Limit 0 means unlimited: the window
// is skipped.
type Window struct {
	Length time.Duration
	Limit  int
	// Full is the window's limit before a reserve lowered it (see
	// Reserve); 0 means Limit. It, not Limit, decides whether the window
	// is counted exactly or approximately (LIMIT_EXACT_MAX), so that the
	// requests held to the reserve and those that may use it count in the
	// same place and see each other.
	Full int
}

// Rule is one dimension of a request, counted under Key (without the
// limiter's prefix). Name is for humans and metrics: "per recipient",
// "global email", "rate limit cfg-1 (provider aliyun)".
type Rule struct {
	Name string
	// Label names the rule in metrics when Name carries what an operator
	// chose (a configured rule's id): a label drawn from a set that grows
	// makes series that are never freed. "" means Name.
	Label   string
	Key     string
	Windows []Window
	// Tag is what the rule protects (a recipient, an IP); keys with the
	// same tag share a Redis Cluster slot, and so one atomic check. ""
	// means Key.
	Tag string
}

// Cooldown admits one request per For under Key (e.g. one code resend per
// recipient per minute), whatever the windows say.
type Cooldown struct {
	Name string
	Key  string
	For  time.Duration
	Tag  string // as Rule.Tag: give a cooldown and a rule on the same thing one tag
}

// Request is everything one Take checks and records together.
type Request struct {
	Rules    []Rule
	Cooldown *Cooldown
	// Then are writes that belong to the admitted request (a code, its
	// status record): the script runs them, in order, right after it
	// records the request, and only if it admits it. One round trip, and
	// a refused request writes nothing. Their replies are in
	// Reservation.Replies. On a Redis Cluster they run right after the
	// checks admitted the request, each slot's commands in one MULTI, and a
	// failure undoes the reservation.
	Then []rdb.Command
	// Once, when set, makes the request idempotent under a caller's key:
	// the same script first looks the key up and, if an earlier request
	// holds it, returns an *OnceError and does nothing else (see once.go).
	Once *Once
	// Guard, when set, also judges the request's destination (guard.go):
	// a blocked one refuses it with a *GuardError.
	Guard *Guard
	// Suppress, when set, refuses the request when its recipient is
	// suppressed (suppress.go), with a *SuppressedError, before anything
	// is recorded.
	Suppress *Suppress
	// SuppressEach are TakeUpTo's per unit (nil or one per unit, nil for
	// a unit that is not checked): a suppressed unit is left out of the
	// bulk, the others are admitted as if it had not been there.
	SuppressEach []*Suppress
}

// Reservation is what Take recorded, with enough to undo it from any replica.
type Reservation struct {
	ID          string   // member written to every log and value of the cooldown key
	Keys        []string // full Redis keys of the logs holding ID
	CooldownKey string   // full Redis key of the cooldown, "" when none was set
	// Counters are the full Redis keys of the rules' window counters (windows
	// over the limiter's ExactMax, see counter.go) and Marks the keys that
	// say this reservation counted there: one per slot holding counters.
	Counters []string
	Marks    []string
	Replies  []any  // one per Request.Then command, in order
	OnceKey  string // full Redis key of the Once entry, "" when none
	// Units is how many units a bulk reservation (TakeUpTo on one Redis)
	// holds: each is counted once in the counters and logged as ID:1 …
	// ID:Units. 0 for Take's, which log ID and count one.
	Units int
}
