package dispatch

import (
	"errors"
	"fmt"
	"time"

	"github.com/msgpulse/msgpulse/internal/status"
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

// Control errors.
var (
	// ErrAlreadySent: the claim says this message was sent; ack, send nothing.
	ErrAlreadySent = errors.New("already sent")
	// ErrDeadline: the message is past its deadline (an expired code).
	ErrDeadline = errors.New("past its deadline")
	// errRedis: the idempotency or status store is unreachable; work pauses
	// until it is back (nothing is sent or acked without the check).
	errRedis = errors.New("redis unavailable")
	// ErrTemplate: the message cannot be rendered; retrying cannot help.
	ErrTemplate = errors.New("cannot render the message")
	// ErrAccountDown: WeCom refused the credentials of the message's
	// account; the message waits, with backoff, up to its deadline.
	ErrAccountDown = errors.New("WeCom account down")
	// errHandedOn: the job was handed on (merge buffer, media pool), whose
	// holder finishes it; its worker is free.
	errHandedOn = errors.New("handed on")
)

// Reasons recorded on status records, read by the DLQ tool.
const (
	ReasonMalformed = status.ReasonMalformed
	ReasonDeadline  = status.ReasonDeadline
	ReasonPermanent = status.ReasonPermanent
	ReasonExhausted = status.ReasonExhausted
	ReasonPanic     = status.ReasonPanic
)
