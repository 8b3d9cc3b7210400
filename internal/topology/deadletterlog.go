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

// addDeadLetterLogs gives every DLQ (a channel's, the relay's, the
// unrouted one) a log with the DLQ's own bindings. It runs after every DLQ
// and its bindings are in the model, and before applyQuorum, which leaves
// the logs classic.
func (m *Model) addDeadLetterLogs(c DeadLetterLogConfig) {
	m.DeadLetterLog = c
	var logs []Queue
	var binds []Binding
	for _, q := range m.Queues {
		if q.Role != RoleDeadLetter && q.Role != RoleRelayDeadLetter {
			continue
		}
		l := Queue{Name: DeadLetterLogName(q.Name), Type: Classic, Durable: true, Role: RoleDeadLetterLog, Channel: q.Channel, LogOf: q.Name,
			Args: map[string]any{
				ArgMessageTTL:     c.MaxAge.Milliseconds(),
				ArgMaxLengthBytes: c.MaxBytes,
				ArgOverflow:       "drop-head",
			},
			Sources: map[string]string{ArgMessageTTL: "DLQ_LOG_MAX_AGE", ArgMaxLengthBytes: "DLQ_LOG_MAX_BYTES"}}
		logs = append(logs, l)
		for _, b := range m.Bindings {
			if b.DestinationType == "queue" && b.Destination == q.Name {
				b.Destination = l.Name
				binds = append(binds, b)
			}
		}
	}
	m.Queues = append(m.Queues, logs...)
	m.Bindings = append(m.Bindings, binds...)
}

// LogOf returns the dead-letter log of the DLQ named dlq.
func (m *Model) LogOf(dlq string) (Queue, bool) {
	for _, q := range m.Queues {
		if q.Role == RoleDeadLetterLog && q.LogOf == dlq {
			return q, true
		}
	}
	return Queue{}, false
}
