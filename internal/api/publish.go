package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
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

// undo removes what a request wrote before its publish failed. It runs on a
// context of its own: a caller that hung up must not leave a code or a
// counted attempt behind.
type undo struct {
	reservation *ratelimit.Reservation
	code        *verify.Issued
	taskID      string // status record to delete
	// once is the Idempotency-Key entry the request held under onceIDs: it
	// is released, never deleted, so that a retry publishes the same ids.
	once, onceIDs string
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
	s.bounded(func() {
		if _, err := s.undoAll(ctx, []undo{u}, "", nil); err != nil {
			s.rollbackFailed(ctx, zap.String("task_id", u.taskID), err)
		}
	})
}

// bounded runs undo and waits for it at most RedisTimeout; what is left
// of it then goes on in the background (Wait waits for it at shutdown).
// One round trip is all an undo costs, but a Redis that stopped answering
// holds a pipeline for up to twice its timeout before go-redis gives up
// (a pipeline that must dial spills from its pipeline pool to the main
// pool and dials again), and the caller is waiting for its 503. Nothing
// depends on the undo having finished: what it removes was never
// announced to anyone, and a retry with the same Idempotency-Key takes
// the entry over once it is released or its lease ends.
func (s *Server) bounded(undo func()) {
	done := make(chan struct{})
	s.cleanup.Add(1)
	go func() {
		defer s.cleanup.Done()
		defer close(done)
		undo()
	}()
	t := time.NewTimer(s.opts.RedisTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// undoAll removes what failed requests wrote (us) and a batch's task list
// (list; "" for none), and withdraws the messages the broker may have
// queued (the claim keys in withdraw, whose failure it reports apart: it
// may mean a send): everything in one pipeline. That is one round trip,
// per node of a Redis Cluster and in parallel, so it is bounded by one
// REDIS_TIMEOUT however many recipients a batch had; step by step, a
// batch of 1,000 took 1,000 of them with Redis away (issue 38).
func (s *Server) undoAll(ctx context.Context, us []undo, list string, withdraw []string) (werr, err error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	var withdrawn func() error
	var steps []func() error
	_, _ = s.d.Redis.Pipelined(ctx, func(p redis.Pipeliner) error { // each step reads its own reply below
		if len(withdraw) > 0 && s.d.Claims != nil {
			withdrawn = s.d.Claims.QueueWithdraw(ctx, p, withdraw)
		}
		if list != "" {
			steps = append(steps, s.d.Status.QueueDeleteBatch(ctx, p, list))
		}
		for _, u := range us {
			if u.code != nil {
				steps = append(steps, s.d.Codes.QueueRollback(ctx, p, u.code))
			}
			if u.taskID != "" {
				deleted := s.d.Status.QueueDelete(ctx, p, u.taskID)
				// A record that never landed (a batch's, written after
				// its admission) is already undone.
				steps = append(steps, func() error {
					if err := deleted(); !errors.Is(err, status.ErrNotFound) {
						return err
					}
					return nil
				})
			}
			if u.reservation != nil {
				steps = append(steps, s.d.Limiter.QueueRollback(ctx, p, u.reservation))
			}
			if u.once != "" {
				steps = append(steps, s.d.Limiter.QueueRelease(ctx, p, u.once, u.onceIDs))
			}
		}
		return nil
	})
	if withdrawn != nil {
		werr = withdrawn()
	}
	failed := 0
	for _, step := range steps {
		if e := step(); e != nil {
			if failed == 0 {
				err = e
			}
			failed++
		}
	}
	if failed > 1 {
		// A round trip that failed fails every step the same way: one is
		// enough to say why.
		err = fmt.Errorf("%d of %d steps failed, the first: %w", failed, len(steps), err)
	}
	return werr, err
}

// rollbackFailed logs an undo that did not finish. What is left expires
// by itself (a code with CODE_TTL, the counts with their windows, a
// record with STATUS_TTL). Redis away is what makes a rollback fail, and
// then every request fails so: a warning, held back past a burst like the
// 503s it follows, not an error line each.
func (s *Server) rollbackFailed(ctx context.Context, what zap.Field, err error) {
	const msg = "rollback after a failed publish was incomplete; leftovers expire on their own"
	if s.quiet.Allow(msg, zapcore.WarnLevel, zap.String("of", msg)) {
		s.log.Warn(msg, what, telemetry.LogField(ctx), zap.Error(err))
	}
}
