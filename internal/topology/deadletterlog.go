package topology

import (
	"fmt"
	"time"
)

// DeadLetterLogConfig is the retention of the dead-letter logs.
//
// A dead-letter log is a classic queue bound to the same exchange, with
// the same routing key, as a DLQ, so the broker puts every dead letter in
// both: the DLQ, which only replay and purge consume, and the log, which
// the DLQ tool reads for stats, list and show. Reading takes a message and
// gives it back (nack with requeue); a classic queue has no delivery
// limit, so that costs nothing, whereas on a quorum DLQ every give-back
// counts toward x-delivery-limit (all returns before RabbitMQ 4.3, and
// basic.reject after) until the broker drops the message. The log stays
// classic under QUEUE_TYPE=quorum for that reason.
//
// Why not a stream, which is read without taking anything: RabbitMQ 3.10
// does not dead-letter into streams (a message routed there by the
// broker's dead-lettering never arrives, while one published to the same
// exchange does), and most dead letters are made by the broker (TTL,
// drop-head, delivery limit) with no code of ours running.
//
// A dead letter older than the retention is still in its DLQ (a DLQ has no
// TTL), but no longer in the log: the tool counts it and says it cannot
// list it. Keep MaxAge at least as long as dead letters are left unhandled.
type DeadLetterLogConfig struct {
	// MaxAge is each log's message TTL (x-message-ttl): a copy older than
	// this is dropped from the log (never from the DLQ).
	MaxAge time.Duration
	// MaxBytes bounds each log's bodies (x-max-length-bytes); the oldest
	// copies go first (drop-head, no dead-lettering).
	MaxBytes int64
}

// DefaultDeadLetterLog keeps two weeks and at most 1 GiB per log.
func DefaultDeadLetterLog() DeadLetterLogConfig {
	return DeadLetterLogConfig{MaxAge: 14 * 24 * time.Hour, MaxBytes: 1 << 30}
}

// Validate checks the retention.
func (c DeadLetterLogConfig) Validate() error {
	if c.MaxAge < time.Second {
		return fmt.Errorf("dead-letter log max age %s must be at least 1s", c.MaxAge)
	}
	if c.MaxBytes < 1<<20 {
		return fmt.Errorf("dead-letter log max bytes %d must be at least 1 MiB", c.MaxBytes)
	}
	return nil
}

// DeadLetterLogName is the log of the DLQ named dlq.
func DeadLetterLogName(dlq string) string { return dlq + ".log" }

// DeadLetterStatusName is the status queue of the DLQ named dlq.
func DeadLetterStatusName(dlq string) string { return dlq + ".status" }

// addDeadLetterLogs gives every DLQ (a channel's, the relay's, the
// unrouted one) a log with the DLQ's own bindings, and every DLQ of
// messages that have a status record (a channel's, the relay's) a status
// queue the same way. It runs after every DLQ and its bindings are in the
// model, and before applyQuorum, which leaves the logs classic and makes
// the status queues quorum with the rest.
func (m *Model) addDeadLetterLogs(c DeadLetterLogConfig) {
	m.DeadLetterLog = c
	retention := func() (map[string]any, map[string]string) {
		return map[string]any{
				ArgMessageTTL:     c.MaxAge.Milliseconds(),
				ArgMaxLengthBytes: c.MaxBytes,
				ArgOverflow:       "drop-head",
			},
			map[string]string{ArgMessageTTL: "DLQ_LOG_MAX_AGE", ArgMaxLengthBytes: "DLQ_LOG_MAX_BYTES"}
	}
	var added []Queue
	var binds []Binding
	for _, q := range m.Queues {
		if q.Role != RoleDeadLetter && q.Role != RoleRelayDeadLetter {
			continue
		}
		args, sources := retention()
		companions := []Queue{{Name: DeadLetterLogName(q.Name), Type: Classic, Durable: true, Role: RoleDeadLetterLog, Channel: q.Channel, LogOf: q.Name,
			Args: args, Sources: sources}}
		if q.Name != m.Delay.UnroutedQueue { // what lands there was never a message of ours
			args, sources := retention()
			companions = append(companions, Queue{Name: DeadLetterStatusName(q.Name), Type: q.Type, Durable: true, Role: RoleDeadLetterStatus, Channel: q.Channel, LogOf: q.Name,
				Args: args, Sources: sources})
		}
		for _, cq := range companions {
			added = append(added, cq)
			for _, b := range m.Bindings {
				if b.DestinationType == "queue" && b.Destination == q.Name {
					b.Destination = cq.Name
					binds = append(binds, b)
				}
			}
		}
	}
	m.Queues = append(m.Queues, added...)
	m.Bindings = append(m.Bindings, binds...)
}

// StatusQueueOf returns the status queue of the DLQ named dlq.
func (m *Model) StatusQueueOf(dlq string) (Queue, bool) {
	return m.companionOf(dlq, RoleDeadLetterStatus)
}

// LogOf returns the dead-letter log of the DLQ named dlq.
func (m *Model) LogOf(dlq string) (Queue, bool) { return m.companionOf(dlq, RoleDeadLetterLog) }

// companionOf returns the queue of role that gets copies of the DLQ named
// dlq.
func (m *Model) companionOf(dlq string, role Role) (Queue, bool) {
	for _, q := range m.Queues {
		if q.Role == role && q.LogOf == dlq {
			return q, true
		}
	}
	return Queue{}, false
}

// Feeders returns the queues whose dead letters reach dlq: the queues whose
// dead-letter exchange is bound to dlq (any queue for a fanout exchange,
// the one with the matching dead-letter routing key for a direct one). For
// queue.mail.dlq that is every queue of the mail channel; for the relay
// DLQ, the relay queue.
func (m *Model) Feeders(dlq string) map[string]bool {
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
			if dlx, _ := q.Args[ArgDeadLetterExchange].(string); dlx != b.Source {
				continue
			}
			key, _ := q.Args[ArgDeadLetterRK].(string)
			if kinds[b.Source] == "fanout" || key == b.RoutingKey {
				out[q.Name] = true
			}
		}
	}
	return out
}
