package channel

import (
	"errors"
	"fmt"
	"time"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/telemetry"
)

// SnoozeError asks for the message to come back after For, without counting
// a send attempt: another consumer holds its claim, or the provider's rate
// limit is reached. Like river's JobSnooze.
type SnoozeError struct {
	For    time.Duration
	Reason string
}

func (e *SnoozeError) Error() string { return fmt.Sprintf("snoozed for %s: %s", e.For, e.Reason) }

// Snooze returns a SnoozeError.
func Snooze(d time.Duration, reason string) error { return &SnoozeError{For: d, Reason: reason} }

// Outcomes a channel may report besides a provider's error.
var (
	// ErrRedis: the idempotency or status store is unreachable; work pauses
	// until it is back (nothing is sent or acked without the check).
	ErrRedis = errors.New("redis unavailable")
	// ErrTemplate: the message cannot be rendered; retrying cannot help.
	ErrTemplate = errors.New("cannot render the message")
	// ErrAccountDown: the provider refused the credentials of the
	// message's account (a WeCom application); the message waits, with
	// backoff, up to its deadline.
	ErrAccountDown = errors.New("WeCom account down")
	// ErrHandedOff: Send handed the task off (see Task.Finish); its holder
	// finishes it, and its worker is free.
	ErrHandedOff = errors.New("handed off")
)

// ClassAccountDown labels the retries of messages waiting for an account
// whose credentials the provider refused.
const ClassAccountDown = "account_down"

// Class is an error's class in metrics, spans and status records.
func Class(err error) string {
	switch {
	case errors.Is(err, ErrTemplate):
		return "template"
	case errors.Is(err, envelope.ErrMalformed):
		return "malformed"
	}
	return string(provider.Classify(err))
}

// EndCall ends a provider call's span, failed by the error's class (never
// its text: a provider's answer can quote the recipient).
func EndCall(span telemetry.Span, err error) {
	if err != nil {
		span.Fail(Class(err))
	}
	span.End()
}
