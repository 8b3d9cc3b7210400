// Package suppression keeps each tenant's list of recipients msgpulse must
// not send to: mailboxes that hard-bounced or complained, numbers a vendor
// reports as opted out or unreachable, and readers who unsubscribed.
//
// An entry is kept per tenant, channel and recipient; the recipient is
// normalised as the API's limits key it (a bare lower-case mailbox, E.164).
// It must never let one tenant read, add or remove another's entries
// (only the admin role lists every tenant's), and never store a secret.
package suppression

import (
	"errors"
	"fmt"
	"time"
)

// Reason is why a recipient is suppressed. Every reason but Unsubscribe
// stops codes too: a mailbox that does not exist gets no code either. An
// unsubscribe stops notices only: a reader who leaves a newsletter still
// logs in.
type Reason string

const (
	HardBounce  Reason = "hard_bounce" // a DSN 5.x.x, or 5.1.x during the send
	Complaint   Reason = "complaint"   // an ARF feedback report
	OptOut      Reason = "opt_out"     // the vendor says the number opted out (Twilio 21610)
	Unreachable Reason = "unreachable" // the vendor says the number cannot be reached, for good
	Unsubscribe Reason = "unsubscribe" // one-click unsubscribe (RFC 8058)
	Manual      Reason = "manual"      // added by hand (POST /api/suppressions)
)

// Valid reports whether r is one of the reasons above.
func (r Reason) Valid() bool {
	switch r {
	case HardBounce, Complaint, OptOut, Unreachable, Unsubscribe, Manual:
		return true
	}
	return false
}

// NoticesOnly reports whether r stops notices but not verification codes.
func (r Reason) NoticesOnly() bool { return r == Unsubscribe }

// Describe is how the reason reads in a refusal: "hard bounce".
func (r Reason) Describe() string {
	switch r {
	case HardBounce:
		return "hard bounce"
	case OptOut:
		return "opted out"
	case Unsubscribe:
		return "unsubscribed"
	}
	return string(r)
}

// Channels an entry can be for (the API's names).
const (
	ChannelEmail = "email"
	ChannelSMS   = "sms"
)

// Entry is one suppressed recipient of one tenant.
type Entry struct {
	Tenant    string    `json:"tenant"`
	Channel   string    `json:"channel"`   // "email" or "sms"
	Recipient string    `json:"recipient"` // normalised
	Reason    Reason    `json:"reason"`
	Code      string    `json:"code,omitempty"`   // "5.1.1", "21610"
	TaskID    string    `json:"taskId,omitempty"` // the message that caused it, if any
	At        time.Time `json:"at"`
}

// Validate reports the first thing wrong with e.
func (e Entry) Validate() error {
	switch {
	case e.Tenant == "":
		return errors.New("suppression: tenant is required")
	case e.Channel != ChannelEmail && e.Channel != ChannelSMS:
		return fmt.Errorf("suppression: channel %q: must be %q or %q", e.Channel, ChannelEmail, ChannelSMS)
	case e.Recipient == "":
		return errors.New("suppression: recipient is required")
	case !e.Reason.Valid():
		return fmt.Errorf("suppression: unknown reason %q", e.Reason)
	}
	return nil
}

// Refusal is the sentence a refused send carries:
// "recipient is suppressed: hard bounce 5.1.1 on 2026-11-29".
func (e Entry) Refusal() string {
	s := "recipient is suppressed: " + e.Reason.Describe()
	if e.Code != "" {
		s += " " + e.Code
	}
	if !e.At.IsZero() {
		s += " on " + e.At.UTC().Format("2006-01-02")
	}
	return s
}
