package broker

import (
	"errors"
	"fmt"
	"regexp"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/topology"
)

// ConflictError lists resources that exist with other properties than the
// model wants. RabbitMQ cannot change them in place (406 PRECONDITION_FAILED).
type ConflictError struct{ Conflicts []topology.Change }

func (e *ConflictError) Error() string {
	if len(e.Conflicts) == 1 {
		return "topology conflict: " + e.Conflicts[0].String()
	}
	return fmt.Sprintf("topology conflict: %d resources differ from the model (first: %s)", len(e.Conflicts), e.Conflicts[0].String())
}

func table(args map[string]any) amqp.Table {
	t := amqp.Table{}
	for k, v := range args {
		t[k] = v
	}
	return t
}

// queueArgs always name the queue's type (see topology.Queue.DeclareArgs).
func queueArgs(q topology.Queue) amqp.Table { return table(q.DeclareArgs()) }

// probe runs f on a fresh channel, because a failed declare closes the
// channel it ran on. It returns the broker's error code (0 when f succeeded).
func probe(conn *amqp.Connection, f func(ch *amqp.Channel) error) (int, string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return 0, "", fmt.Errorf("%w: open channel: %w", ErrUnavailable, err)
	}
	err = f(ch)
	if err == nil {
		_ = ch.Close()
		return 0, "", nil
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		return ae.Code, ae.Reason, nil
	}
	return 0, "", err
}

// Preflight checks, before anything is declared, that every resource of the
// model that already exists is equivalent to what the model wants. It asks
// the broker itself: a passive declare tells whether a resource exists, and
// re-declaring an existing one with the model's arguments is a no-op when
// they are equivalent and a 406 (with nothing changed) when they are not.
// Missing resources are left alone.
func Preflight(conn *amqp.Connection, m *topology.Model) error {
	var conflicts []topology.Change
	for _, e := range m.Exchanges {
		code, _, err := probe(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclarePassive(e.Name, e.Kind, e.Durable, e.AutoDelete, e.Internal, false, nil)
		})
		if err != nil {
			return err
		}
		if code == amqp.NotFound {
			continue
		}
		code, reason, err := probe(conn, func(ch *amqp.Channel) error {
			return ch.ExchangeDeclare(e.Name, e.Kind, e.Durable, e.AutoDelete, e.Internal, false, table(e.Args))
		})
		if err != nil {
			return err
		}
		if code != 0 {
			conflicts = append(conflicts, parseConflict("exchange", e.Name, code, reason))
		}
	}
	for _, q := range m.Queues {
		code, _, err := probe(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclarePassive(q.Name, q.Durable, false, false, false, nil)
			return err
		})
		if err != nil {
			return err
		}
		if code == amqp.NotFound {
			continue
		}
		code, reason, err := probe(conn, func(ch *amqp.Channel) error {
			_, err := ch.QueueDeclare(q.Name, q.Durable, false, false, false, queueArgs(q))
			return err
		})
		if err != nil {
			return err
		}
		if code != 0 {
			c := parseConflict("queue", q.Name, code, reason)
			c.Source = q.Sources[c.Field]
			conflicts = append(conflicts, c)
		}
	}
	if len(conflicts) > 0 {
		return &ConflictError{Conflicts: conflicts}
	}
	return nil
}

var inequivalent = regexp.MustCompile(`inequivalent arg '([^']+)' for \w+ '[^']*' in vhost '[^']*': received (none|(?:the value )?'[^']*'(?: of type '[^']*')?) but current is (none|(?:the value )?'[^']*'(?: of type '[^']*')?)`)

var quoted = regexp.MustCompile(`'([^']*)'`)

func brokerValue(s string) string {
	if m := quoted.FindStringSubmatch(s); m != nil {
		return m[1]
	}
	return "(none)"
}

// parseConflict turns a broker 406 text into a Change. The text has been
// stable for years; when it does not parse, the raw text is kept.
func parseConflict(resource, name string, code int, reason string) topology.Change {
	c := topology.Change{Kind: topology.Conflict, Resource: resource, Name: name, Field: "(broker)", Current: reason, Wanted: "the model's arguments"}
	if mm := inequivalent.FindStringSubmatch(reason); mm != nil {
		c.Field, c.Wanted, c.Current = mm[1], brokerValue(mm[2]), brokerValue(mm[3])
	} else if code != amqp.PreconditionFailed {
		c.Field = fmt.Sprintf("(broker error %d)", code)
	}
	return c
}

// Declare declares every exchange, queue and binding of the model, in that
// order, on one channel. Run Preflight first: declare stops at the first
// failure.
func Declare(conn *amqp.Connection, m *topology.Model) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("%w: open channel: %w", ErrUnavailable, err)
	}
	defer func() { _ = ch.Close() }()
	for _, e := range m.Exchanges {
		if err := ch.ExchangeDeclare(e.Name, e.Kind, e.Durable, e.AutoDelete, e.Internal, false, table(e.Args)); err != nil {
			return fmt.Errorf("declare exchange %s: %w", e.Name, err)
		}
	}
	for _, q := range m.Queues {
		if _, err := ch.QueueDeclare(q.Name, q.Durable, false, false, false, queueArgs(q)); err != nil {
			return fmt.Errorf("declare queue %s: %w", q.Name, err)
		}
	}
	for _, b := range m.Bindings {
		var err error
		if b.DestinationType == "exchange" {
			err = ch.ExchangeBind(b.Destination, b.RoutingKey, b.Source, false, nil)
		} else {
			err = ch.QueueBind(b.Destination, b.RoutingKey, b.Source, false, nil)
		}
		if err != nil {
			return fmt.Errorf("bind %s -> %s [%s]: %w", b.Source, b.Destination, b.RoutingKey, err)
		}
	}
	return nil
}
