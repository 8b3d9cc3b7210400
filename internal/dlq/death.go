package dlq

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
)

// Reasons the broker writes into x-death.
const (
	BrokerRejected      = "rejected"       // the consumer rejected it without requeue
	BrokerExpired       = "expired"        // the queue's TTL (or the message's) ran out
	BrokerMaxLen        = "maxlen"         // the queue was full and dropped its head
	BrokerDeliveryLimit = "delivery_limit" // a quorum queue's delivery limit was reached
	// ReasonUnknown is shown when a message carries no death record at all
	// (someone published into the DLQ by hand).
	ReasonUnknown = "unknown"
)

// Reasons is every reason --reason accepts: the broker's and the
// consumer's refinements of "rejected" (status.Reason*).
var Reasons = []string{
	BrokerRejected, BrokerExpired, BrokerMaxLen, BrokerDeliveryLimit,
	status.ReasonMalformed, status.ReasonPermanent, status.ReasonExhausted, status.ReasonDeadline, status.ReasonPanic,
	ReasonUnknown,
}

// Death is one x-death entry (envelope.Death).
type Death = envelope.Death

// refine turns the broker's reason into the one on-call acts on: a body
// that does not decode is malformed whatever the broker says; a consumer
// rejection takes the reason the consumer recorded (permanent,
// retries_exhausted, deadline, panic, malformed).
func refine(broker string, malformed bool, rec *status.Record) string {
	switch {
	case malformed:
		return status.ReasonMalformed
	case broker == BrokerRejected && rec != nil && rec.Reason != "":
		return rec.Reason
	case broker == "":
		return ReasonUnknown
	}
	return broker
}

// KnownReason says whether r is one of Reasons (a --reason, or a console
// filter, that could match a dead letter).
func KnownReason(r string) bool { return slices.Contains(Reasons, r) }

// reasonCounts prints counts as "a=1 b=2", largest first.
func reasonCounts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%d", k, m[k])
	}
	return strings.Join(parts, " ")
}
