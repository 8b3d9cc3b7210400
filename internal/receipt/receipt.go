// Package receipt names what comes back about a message after a provider
// accepted it: a handset's delivery report, a mail server's bounce (DSN), a
// reader's complaint (ARF), a delay notice. Receivers (the bounce SMTP
// server, the SMS vendors' hooks) turn what they parse into a Receipt and
// hand it to an Applier, which owns what follows: the status, the callback
// and the suppression list.
//
// It is a leaf: it imports nothing of ours, so that receivers and the
// applier depend on it and not on each other. It must never carry a
// secret (a token, a signature, a hook's path) in a Receipt: what is in
// one ends up in a status record and a callback.
package receipt

import (
	"context"
	"errors"
	"time"
)

// Kind is what a receipt says became of a message.
type Kind string

const (
	// Delivered: the handset or mailbox took it (an SMS delivery report).
	Delivered Kind = "delivered"
	// Undelivered: the vendor reports it could not be delivered (an SMS
	// delivery report with an error code).
	Undelivered Kind = "undelivered"
	// Bounced: a mail server reports a permanent failure (DSN 5.x.x), or
	// refused the recipient during the send (550 5.1.1).
	Bounced Kind = "bounced"
	// Complained: the reader marked it as spam (an ARF feedback report).
	Complained Kind = "complained"
	// Delayed: a mail server reports a transient failure (DSN 4.x.x); it
	// is kept as an event and the status stays.
	Delayed Kind = "delayed"
	// Accepted: a vendor's intermediate report (Twilio's "sent",
	// "queued"); kept as an event, and it never undoes a later state.
	Accepted Kind = "accepted"
)

// Valid reports whether k is one of the kinds above.
func (k Kind) Valid() bool {
	switch k {
	case Delivered, Undelivered, Bounced, Complained, Delayed, Accepted:
		return true
	}
	return false
}

// Suppress names why a receipt puts its recipient on the tenant's
// suppression list; "" puts nobody there. The values are
// suppression.Reason's.
type Suppress string

const (
	SuppressNone        Suppress = ""
	SuppressHardBounce  Suppress = "hard_bounce"
	SuppressComplaint   Suppress = "complaint"
	SuppressOptOut      Suppress = "opt_out"
	SuppressUnreachable Suppress = "unreachable"
)

// Receipt is one report about one message.
type Receipt struct {
	// TaskID names the message: from a VERP token, an ARF report's
	// original headers, or the vendor message id lookup.
	TaskID string
	// Channel is the API's channel name: "email" or "sms".
	Channel string
	Kind    Kind
	// Code is the report's own code: a DSN status ("5.1.1"), a Twilio
	// ErrorCode ("30003"), Aliyun's err_code ("DELIVERED", "MK:0001"),
	// Tencent's report code; "" when it has none.
	Code string
	// Detail is the human part: a DSN's Diagnostic-Code, a vendor's
	// errmsg. The applier redacts it before it stores it.
	Detail string
	// At is when the handset or mail server says it happened; zero means
	// when it is applied.
	At time.Time
	// Source is where it came from: "dsn", "arf", "smtp" (refused during
	// the send), "twilio", "aliyun", "tencent".
	Source string
	// Recipient is the recipient the report names, normalised as the
	// API's limits key it (a bare lower-case mailbox, E.164); "" when the
	// report names none. When set, the applier applies the receipt only
	// if it matches the message's own recipient.
	Recipient string
	// Suppress, when set, puts the message's recipient on its tenant's
	// suppression list for this reason.
	Suppress Suppress
}

// Applier applies receipts. Apply is idempotent: the same receipt twice,
// or a late one that would take a message back (an "accepted" after
// "delivered"), changes nothing more.
type Applier interface {
	Apply(ctx context.Context, r Receipt) error
}

var (
	// ErrUnknownMessage: the receipt names no message the store knows, or
	// a recipient other than the message's. Nothing was changed; a
	// receiver answers as it would to a receipt it applied (a vendor or
	// an MTA must not retry it forever, and a forger learns nothing).
	ErrUnknownMessage = errors.New("receipt: no such message")
	// ErrInvalid: the receipt itself is malformed (no task, unknown kind).
	ErrInvalid = errors.New("receipt: invalid")
)

// Validate reports whether r can be applied.
func (r Receipt) Validate() error {
	switch {
	case r.TaskID == "":
		return errors.Join(ErrInvalid, errors.New("receipt: TaskID is required"))
	case !r.Kind.Valid():
		return errors.Join(ErrInvalid, errors.New("receipt: unknown kind "+string(r.Kind)))
	case r.Channel == "":
		return errors.Join(ErrInvalid, errors.New("receipt: Channel is required"))
	}
	return nil
}

// RefusedError is a provider's refusal during the send that is a receipt
// in itself: an SMTP server's 550 5.1.1 (no such mailbox), Twilio's 21610
// (the number opted out). Nothing can succeed on a later attempt, and
// nothing needs fixing on call: the pipeline acks the message (no retry,
// no dead letter) and applies Receipt, whose TaskID it fills in.
type RefusedError struct {
	Receipt Receipt
	Err     error // the provider's error, for the log
}

func (e *RefusedError) Error() string {
	return "refused by the provider (" + string(e.Receipt.Kind) + " " + e.Receipt.Code + "): " + e.Err.Error()
}

func (e *RefusedError) Unwrap() error { return e.Err }
