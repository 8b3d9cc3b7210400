package bounce

import (
	"strings"

	"github.com/msgpulse/msgpulse/internal/receipt"
)

// Sources of the receipts made here (receipt.Receipt.Source).
const (
	SourceDSN = "dsn"
	SourceARF = "arf"
)

// DSNReceipts turns a DSN's per-recipient blocks into receipts for the
// message taskID:
//
//	Status   Action          Kind       Suppress
//	5.x.x    any but below   Bounced    hard bounce
//	4.x.x    failed          Bounced    none (given up for a passing reason: the address may be fine)
//	4.x.x    other           Delayed    none (an event; the status stays)
//	none     failed          Bounced    none
//	none     delayed         Delayed    none
//	2.x.x, or delivered, relayed, expanded: nothing (the message went on)
//
// Recipient is the block's Final-Recipient, so the Applier applies it
// only to the message sent to that address.
func DSNReceipts(rep *Report, taskID string) []receipt.Receipt {
	var out []receipt.Receipt
	for _, rs := range rep.Recipients {
		switch rs.Action {
		case "delivered", "relayed", "expanded":
			continue
		}
		r := receipt.Receipt{TaskID: taskID, Channel: "email", Code: rs.Status, Detail: rs.Diagnostic,
			At: rs.At, Source: SourceDSN, Recipient: rs.Recipient}
		switch {
		case strings.HasPrefix(rs.Status, "2."):
			continue
		case strings.HasPrefix(rs.Status, "5."):
			r.Kind, r.Suppress = receipt.Bounced, receipt.SuppressHardBounce
		case rs.Action == "failed":
			r.Kind = receipt.Bounced
		case strings.HasPrefix(rs.Status, "4."), rs.Action == "delayed":
			r.Kind = receipt.Delayed
		default:
			continue
		}
		out = append(out, r)
	}
	return out
}

// complaintTypes are the Feedback-Types that are a reader's complaint:
// "abuse" (spam; what mailbox providers send) and "fraud" (phishing).
// "not-spam", "virus", "auth-failure" (RFC 6591, a DMARC failure report)
// and "other" say nothing about whether the reader wants the mail.
var complaintTypes = map[string]bool{"abuse": true, "fraud": true, "": true}

// ARFReceipt turns a feedback report into a Complained receipt for
// taskID; ok is false when the report is not a complaint.
func ARFReceipt(rep *Report, taskID string) (receipt.Receipt, bool) {
	f := rep.Feedback
	if f == nil || !complaintTypes[f.Type] {
		return receipt.Receipt{}, false
	}
	code := f.Type
	if code == "" {
		code = "abuse"
	}
	return receipt.Receipt{TaskID: taskID, Channel: "email", Kind: receipt.Complained, Code: code,
		At: f.At, Source: SourceARF, Recipient: f.Recipient, Suppress: receipt.SuppressComplaint}, true
}
