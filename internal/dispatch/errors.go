package dispatch

import (
	"time"

	"errors"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/status"
)

// SnoozeError asks for the message to come back later, without counting a
// send attempt (channel.SnoozeError).
type SnoozeError = channel.SnoozeError

// Snooze returns a SnoozeError.
func Snooze(d time.Duration, reason string) error { return channel.Snooze(d, reason) }

// Control errors of the pipeline; a channel's outcomes are package
// channel's (ErrTemplate, ErrAccountDown, ErrRedis, ErrHandedOff).
var (
	// ErrAlreadySent: the claim says this message was sent; ack, send nothing.
	ErrAlreadySent = errors.New("already sent")
	// ErrDeadline: the message is past its deadline (an expired code).
	ErrDeadline = errors.New("past its deadline")
	// ErrTemplate: the message cannot be rendered; retrying cannot help.
	ErrTemplate = channel.ErrTemplate
	// ErrAccountDown: the provider refused the credentials of the
	// message's account; the message waits, with backoff, up to its
	// deadline.
	ErrAccountDown = channel.ErrAccountDown
)

// ClassAccountDown labels the retries of messages waiting for an account
// whose credentials the provider refused.
const ClassAccountDown = channel.ClassAccountDown

// Reasons recorded on status records, read by the DLQ tool.
const (
	ReasonMalformed = status.ReasonMalformed
	ReasonDeadline  = status.ReasonDeadline
	ReasonPermanent = status.ReasonPermanent
	ReasonExhausted = status.ReasonExhausted
	ReasonPanic     = status.ReasonPanic
)
