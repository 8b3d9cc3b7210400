package broker

import (
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueState is a queue's depth and consumer count.
type QueueState struct {
	Name      string
	Exists    bool
	Messages  int
	Consumers int
}

// Inspect reads depth and consumers of each queue with passive declares,
// which need no management plugin. A missing queue is reported, not an
// error.
func Inspect(conn *amqp.Connection, names []string) ([]QueueState, error) {
	out := make([]QueueState, 0, len(names))
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	for _, n := range names {
		if ch == nil || ch.IsClosed() {
			var err error
			if ch, err = conn.Channel(); err != nil {
				return out, fmt.Errorf("%w: open channel: %w", ErrUnavailable, err)
			}
		}
		q, err := ch.QueueDeclarePassive(n, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			out = append(out, QueueState{Name: n, Exists: true, Messages: q.Messages, Consumers: q.Consumers})
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			out = append(out, QueueState{Name: n})
		default:
			return out, fmt.Errorf("inspect %s: %w", n, err)
		}
	}
	return out, nil
}
