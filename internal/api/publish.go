package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func newTaskID() string {
	id, err := uuid.NewV7() // time-ordered: status keys and logs sort by creation
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// LevelFullError is a publish refused because the level's queue is full:
// by the broker (reject-publish), or by the API's admission before it,
// when the queue is close to its bound (Admission set).
type LevelFullError struct {
	Level topology.LevelTopology
	// Admission, when not nil, is the API's refusal: the queue held about
	// Depth messages, past the admission limit.
	Admission *AdmissionRefusal
	Err       error
}

// AdmissionRefusal says why admission refused a publish.
type AdmissionRefusal struct {
	Depth, Limit int
	Fill         float64
	EnvFill      string
}

func (e *LevelFullError) Error() string {
	if a := e.Admission; a != nil {
		return fmt.Sprintf("%s is nearly full (about %d messages; the API admits up to %d, %s=%g of the bound %d, %s)",
			e.Level.Queue, a.Depth, a.Limit, a.EnvFill, a.Fill, e.Level.MaxLength, e.Level.EnvMaxLength)
	}
	return fmt.Sprintf("%s is full (bound %d, %s)", e.Level.Queue, e.Level.MaxLength, e.Level.EnvMaxLength)
}

func (e *LevelFullError) Unwrap() error { return e.Err }

// errAdmission is what a LevelFullError from admission wraps.
var errAdmission = errors.New("admission: queue nearly full")

// Retry-After of a 503 for a full level queue: long enough for the
// consumers to drain a share of it, short enough that a caller's backlog
// keeps moving. The codes' queue has workers of its own and a code is
// wanted now, so its callers come back sooner.
const (
	levelFullRetryAfter = 5 * time.Second
	codeFullRetryAfter  = time.Second
	// unavailableRetryAfter is every other 503's (see unavailable).
	unavailableRetryAfter = time.Second
)

// admission is a level queue's admission limit, in messages.
type admission struct {
	limit int
	fill  float64
	env   string
}

// admissions computes every bounded level queue's admission limit from
// the model and each channel's fill ({CH}_QUEUE_ADMIT_FILL). A fill of 1
// turns admission off for the channel: up to the bound, the queue's own
// overflow rule decides.
func admissions(m *topology.Model, fills map[string]float64) map[string]admission {
	out := map[string]admission{}
	for _, ct := range m.Channels {
		fill, ok := fills[ct.Name]
		if !ok {
			fill = config.DefaultAdmitFill
		}
		if fill >= 1 {
			continue
		}
		for _, lt := range ct.Levels {
			if lt.MaxLength > 0 {
				out[lt.Queue] = admission{limit: max(1, int(fill*float64(lt.MaxLength))), fill: fill, env: AdmitFillEnv(ct.Name)}
			}
		}
	}
	return out
}

// AdmitFillEnv is the variable setting a channel's admission fill.
func AdmitFillEnv(channel string) string { return topology.EnvPrefix(channel) + "_QUEUE_ADMIT_FILL" }

// AdmitQueues lists the queues admission watches: every bounded level
// queue of the model.
func AdmitQueues(m *topology.Model) []string {
	var out []string
	for _, ct := range m.Channels {
		for _, lt := range ct.Levels {
			if lt.MaxLength > 0 {
				out = append(out, lt.Queue)
			}
		}
	}
	return out
}

// publish sends m to its level's queue (m.Level; none is high) on its
// channel's exchange, now or after delay, and waits for the broker's
// confirm. A publish for now is first admitted: a level queue that is
// close to its bound refuses it here, before the broker would drop the
// oldest code (drop-head) or refuse it (reject-publish).
func (s *Server) publish(ctx context.Context, apiChannel string, m *envelope.Message, after time.Duration) error {
	ct, err := s.d.Model.Channel(topologyChannel(apiChannel))
	if err != nil {
		return err
	}
	lt := ct.Level(topology.Level(m.Level))
	msg, err := envelope.Publishing(m)
	if err != nil {
		return err
	}
	ctx, span := telemetry.StartPublish(ctx, ct.Exchange, lt.RoutingKey, &msg)
	defer span.End()
	ctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
	defer cancel()
	if after > 0 {
		err = s.d.Delayed.PublishDelayed(ctx, broker.Outgoing{Exchange: ct.Exchange, RoutingKey: lt.RoutingKey, Msg: msg}, after)
	} else {
		err = s.publishNow(ctx, ct, lt, msg)
	}
	s.metrics.publish.WithLabelValues(publishResult(err)).Inc()
	if err != nil {
		span.Fail(publishResult(err))
	}
	return err
}

func (s *Server) publishNow(ctx context.Context, ct topology.ChannelTopology, lt topology.LevelTopology, msg amqp.Publishing) error {
	var ticket broker.Ticket
	if a, ok := s.admits[lt.Queue]; ok {
		t, depth, admitted := s.d.Gauge.Admit(lt.Queue, a.limit)
		if !admitted {
			return &LevelFullError{Level: lt, Admission: &AdmissionRefusal{Depth: depth, Limit: a.limit, Fill: a.fill, EnvFill: a.env}, Err: errAdmission}
		}
		ticket = t
	}
	err := s.d.Publisher.Publish(ctx, ct.Exchange, lt.RoutingKey, msg)
	// A message that may have been kept counts as in the queue.
	ticket.Done(err == nil || broker.MayBeKept(err))
	// A notice queue refuses publishes only when it is full: that nack is
	// back-pressure the caller can act on, not a broker fault. The codes'
	// queue drops its oldest instead, so a nack there is the broker's own
	// refusal (a quorum leader change).
	if errors.Is(err, broker.ErrNacked) && lt.Level != topology.Code {
		err = &LevelFullError{Level: lt, Err: err}
	}
	return err
}

func publishResult(err error) string {
	var full *LevelFullError
	switch {
	case err == nil:
		return "confirmed"
	case errors.As(err, &full):
		if full.Admission != nil {
			return "admission"
		}
		return "full"
	case errors.Is(err, broker.ErrReturned):
		return "returned"
	case errors.Is(err, delay.ErrOverflow):
		return "overflow"
	case errors.Is(err, broker.ErrNacked):
		return "nacked"
	case errors.Is(err, broker.ErrBlocked):
		return "blocked"
	case errors.Is(err, broker.ErrTooLarge):
		return "too_large"
	case errors.Is(err, broker.ErrConfirmTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, broker.ErrConfirmLost):
		return "lost"
	}
	var ae *amqp.Error
	if errors.As(err, &ae) && ae.Code == amqp.NotFound {
		return "missing"
	}
	return "unavailable"
}

// publishFailure is the 503 a caller gets when the broker did not take the
// message, or may not have. It says why in words an on-call engineer can
// act on, and always when to come back (Retry-After).
func publishFailure(err error) *apiError {
	var full *LevelFullError
	if errors.As(err, &full) {
		e := unavailable(err, "message not accepted: %s; nothing was kept, so it is safe to retry", full.Error())
		e.RetryAfter = levelFullRetryAfter
		if full.Level.Level == topology.Code {
			e.RetryAfter = codeFullRetryAfter
		}
		return e
	}
	if broker.MayBeKept(err) {
		// The message went out and no confirm came back: the broker may
		// have queued it, and it may still be delivered. A plain retry
		// could deliver it twice; one with the same Idempotency-Key
		// publishes the same task again, which the consumer's claim
		// delivers once.
		why := "no confirm arrived within PUBLISH_TIMEOUT"
		if errors.Is(err, broker.ErrConfirmLost) {
			why = "the connection to RabbitMQ was lost before the confirm arrived"
		}
		return unavailable(err, "message not confirmed: %s; it MAY have been kept and may still be delivered, "+
			"so retry with the same Idempotency-Key header to avoid a second copy", why)
	}
	why := map[string]string{
		"returned":    "no queue is bound for it (run `topology declare`)",
		"missing":     "its exchange does not exist (run `topology declare`)",
		"overflow":    "the delay queue is full",
		"nacked":      "the broker refused it",
		"blocked":     "the broker is blocking publishers (memory or disk alarm)",
		"too_large":   "it is larger than the broker's max_message_size (lower BATCH_MAX_BYTES to it)",
		"unavailable": "there is no connection to RabbitMQ",
	}[publishResult(err)]
	e := unavailable(err, "message not accepted: %s; nothing was kept (no code, no rate-limit count), so it is safe to retry", why)
	if errors.Is(err, delay.ErrOverflow) || errors.Is(err, broker.ErrBlocked) {
		e.RetryAfter = levelFullRetryAfter
	}
	return e
}
