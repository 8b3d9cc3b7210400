package dispatch

import (
	"errors"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/status"
)

// Control errors of the pipeline's own steps; a channel's outcomes are
// package channel's (Snooze, ErrTemplate, ErrAccountDown, ErrRedis,
// ErrHandedOff).
var (
	// ErrAlreadySent: the claim says this message was sent; ack, send nothing.
	ErrAlreadySent = errors.New("already sent")
	// ErrDeadline: the message is past its deadline (an expired code).
	ErrDeadline = errors.New("past its deadline")
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
