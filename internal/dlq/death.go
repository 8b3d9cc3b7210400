package dlq

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/topology"
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

// Death is one x-death entry: RabbitMQ keeps one per (queue, reason),
// most recent first, counting repeats.
type Death struct {
	Reason      string     `json:"reason"`
	Queue       string     `json:"queue"`
	Exchange    string     `json:"exchange"`
	RoutingKeys []string   `json:"routingKeys,omitempty"`
	Count       int64      `json:"count"`
	Time        *time.Time `json:"time,omitempty"`
}

// deaths reads the x-death header, most recent first. Entries of a shape
// it does not know are skipped rather than guessed at.
func deaths(h amqp.Table) []Death {
	list, _ := h[envelope.HeaderXDeath].([]any)
	out := make([]Death, 0, len(list))
	for _, e := range list {
		t, ok := e.(amqp.Table)
		if !ok {
			continue
		}
		d := Death{}
		d.Reason, _ = t["reason"].(string)
		d.Queue, _ = t["queue"].(string)
		d.Exchange, _ = t["exchange"].(string)
		d.Count, _ = envelope.HeaderInt(t, "count")
		if keys, ok := t["routing-keys"].([]any); ok {
			for _, k := range keys {
				if s, ok := k.(string); ok {
					d.RoutingKeys = append(d.RoutingKeys, s)
				}
			}
		}
		if ts, ok := t["time"].(time.Time); ok {
			ts = ts.UTC()
			d.Time = &ts
		}
		out = append(out, d)
	}
	return out
}

// firstDeath reads x-first-death-*, which RabbitMQ sets once, on the first
// dead-lettering, and never changes.
func firstDeath(h amqp.Table) (Death, bool) {
	get := func(k string) string { s, _ := h[envelope.HeaderFirstDeathPfx+k].(string); return s }
	d := Death{Reason: get("reason"), Queue: get("queue"), Exchange: get("exchange")}
	return d, d.Reason != ""
}

// feeders returns the queues whose dead letters reach dlq, read from the
// model: the queues whose dead-letter exchange is bound to dlq (any queue
// for a fanout exchange, the one with the matching dead-letter routing key
// for a direct one). For queue.mail.dlq that is queue.mail; for the relay
// DLQ, the relay queue.
func feeders(m *topology.Model, dlq string) map[string]bool {
	kinds := map[string]string{}
	for _, e := range m.Exchanges {
		kinds[e.Name] = e.Kind
	}
	out := map[string]bool{}
	for _, b := range m.Bindings {
		if b.Destination != dlq || b.DestinationType != "queue" {
			continue
		}
		for _, q := range m.Queues {
			if dlx, _ := q.Args[topology.ArgDeadLetterExchange].(string); dlx != b.Source {
				continue
			}
			key, _ := q.Args[topology.ArgDeadLetterRK].(string)
			if kinds[b.Source] == "fanout" || key == b.RoutingKey {
				out[q.Name] = true
			}
		}
	}
	return out
}

// deathHere picks the death that put the message into this DLQ: the most
// recent x-death entry from a queue that dead-letters here. x-first-death
// is not it when the message had died before (a round-up delay hop
// expires into the main queue, leaving an "expired" first death on a
// message the consumer later rejected). Falls back to the most recent
// entry, then to x-first-death-*.
func deathHere(h amqp.Table, from map[string]bool) (Death, bool) {
	ds := deaths(h)
	for _, d := range ds {
		if from[d.Queue] {
			return d, true
		}
	}
	if len(ds) > 0 {
		return ds[0], true
	}
	return firstDeath(h)
}

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
