package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/internal/verify"
)

func newTaskID() string {
	id, err := uuid.NewV7() // time-ordered: status keys and logs sort by creation
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// LevelFullError is a publish the broker refused because the level's
// queue is at its bound (reject-publish).
type LevelFullError struct {
	Level topology.LevelTopology
	Err   error
}

func (e *LevelFullError) Error() string {
	return fmt.Sprintf("%s is full (bound %d, %s)", e.Level.Queue, e.Level.MaxLength, e.Level.EnvMaxLength)
}

func (e *LevelFullError) Unwrap() error { return e.Err }

// levelFullRetryAfter is the Retry-After of a 503 for a full level queue:
// long enough for a consumer to drain a share of it, short enough that a
// caller's backlog keeps moving.
const levelFullRetryAfter = 5 * time.Second

// publish sends m to its level's queue (m.Level; none is high) on its
// channel's exchange, now or after delay, and waits for the broker's
// confirm.
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
		err = s.d.Publisher.Publish(ctx, ct.Exchange, lt.RoutingKey, msg)
		// A level queue refuses publishes only when it is full: that nack
		// is back-pressure the caller can act on, not a broker fault.
		if errors.Is(err, broker.ErrNacked) && lt.Level != topology.High {
			err = &LevelFullError{Level: lt, Err: err}
		}
	}
	s.metrics.publish.WithLabelValues(publishResult(err)).Inc()
	if err != nil {
		span.Fail(publishResult(err))
	}
	return err
}

func publishResult(err error) string {
	var full *LevelFullError
	switch {
	case err == nil:
		return "confirmed"
	case errors.As(err, &full):
		return "full"
	case errors.Is(err, broker.ErrReturned):
		return "returned"
	case errors.Is(err, delay.ErrOverflow):
		return "overflow"
	case errors.Is(err, broker.ErrNacked):
		return "nacked"
	case errors.Is(err, broker.ErrBlocked):
		return "blocked"
	case errors.Is(err, broker.ErrConfirmTimeout), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "unavailable"
}

// publishFailure is the 503 a caller gets when the broker did not take the
// message. It says why in words an on-call engineer can act on.
func publishFailure(err error) *apiError {
	var full *LevelFullError
	if errors.As(err, &full) {
		e := unavailable(err, "message not accepted: %s; nothing was kept, so it is safe to retry", full.Error())
		e.RetryAfter = levelFullRetryAfter
		return e
	}
	why := map[string]string{
		"returned":    "no queue is bound for it (run `topology declare`)",
		"overflow":    "the delay queue is full",
		"nacked":      "the broker refused it",
		"blocked":     "the broker is blocking publishers (memory or disk alarm)",
		"timeout":     "no confirm arrived within PUBLISH_TIMEOUT",
		"unavailable": "there is no connection to RabbitMQ",
	}[publishResult(err)]
	return unavailable(err, "message not accepted: %s; nothing was kept (no code, no rate-limit count), so it is safe to retry", why)
}

// undo removes what a request wrote before its publish failed. It runs on a
// context of its own: a caller that hung up must not leave a code or a
// counted attempt behind.
type undo struct {
	reservation *ratelimit.Reservation
	code        *verify.Issued
	taskID      string // status record to delete
}

// rollbackLater is rollback in the background, for a request whose
// limiter script failed: Redis is most likely unreachable, each step
// would wait out REDIS_TIMEOUT, and the caller should get its 503 at
// once. Nothing depends on the undo having finished: the code and the
// record it removes were never announced to anyone. Server.Wait waits
// for it at shutdown.
func (s *Server) rollbackLater(ctx context.Context, u undo) {
	s.cleanup.Add(1)
	go func() {
		defer s.cleanup.Done()
		s.rollback(context.WithoutCancel(ctx), u)
	}()
}

func (s *Server) rollback(ctx context.Context, u undo) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var steps []func(context.Context) error
	if u.code != nil {
		steps = append(steps, func(ctx context.Context) error { return s.d.Codes.Rollback(ctx, u.code) })
	}
	if u.taskID != "" {
		steps = append(steps, func(ctx context.Context) error { return s.d.Status.Delete(ctx, u.taskID) })
	}
	if u.reservation != nil {
		steps = append(steps, func(ctx context.Context) error { return s.d.Limiter.Rollback(ctx, u.reservation) })
	}
	var errs []error
	for _, step := range steps {
		err := step(ctx)
		errs = append(errs, err)
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			// Redis did not answer (an error reply would be redis.Error):
			// the next steps would each wait out REDIS_TIMEOUT too, and the
			// caller is waiting for its 503.
			break
		}
	}
	if err := errors.Join(errs...); err != nil {
		// What is left expires by itself (the code with CODE_TTL, the
		// counts with their windows); say so loudly.
		s.log.Error("rollback after a failed publish was incomplete; leftovers expire on their own", zap.String("task_id", u.taskID), telemetry.LogField(ctx), zap.Error(err))
	}
}
