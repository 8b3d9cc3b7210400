package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/verify"
)

// The one admit / take-over / rollback of the three sending endpoints
// (a code, a message, a batch). Before it publishes, a request is let
// through frequency control, and only if it is, its status record (and
// a code's code) is written and its Idempotency-Key's entry reserved: all
// in the limiter's one script, one round trip. A request whose entry is a
// released one of this very request is taken over under the ids the
// failed attempt may have published (admitUnderKey). What a request that
// failed had written is undone (undoAdmission, rollbackBatch).

// candidate is one message a sending request asks to be let through.
type candidate struct {
	taskID, recipient string
	// limits are its rules, its cooldown and its fraud guard; admit adds
	// the writes and the entry.
	limits ratelimit.Request
	record status.Record
	// code is a verification code's, stored with the record; nil for a
	// message.
	code *verify.Issued
	once *ratelimit.Once // the Idempotency-Key's entry; nil without one
}

// admitted is one message that frequency control let through.
type admitted struct {
	recipient string
	taskID    string
	res       *ratelimit.Reservation
	code      *verify.Issued // a verification code's; nil for a message
	// record is the status record still to be written (admitBulk's, for
	// Status.CreateBatch); nil once it is.
	record *status.Record
}

// admit runs a through frequency control and, only if it is admitted,
// stores its status record and its code in the same round trip. When
// another request holds a's Idempotency-Key, the error is the
// *ratelimit.OnceError (see onceOf) and nothing was written; any other
// refusal is an *apiError: 429 for a limit or the fraud guard, 422 for a
// suppressed recipient, 503 (what
// could have landed is being undone) when Redis did not answer.
func (s *Server) admit(ctx context.Context, a candidate) (admitted, error) {
	insert, err := s.d.Status.InsertCommands(a.record)
	if err != nil {
		return admitted{}, internal(err)
	}
	lr := a.limits
	lr.Then, lr.Once = insert, a.once
	stored := func([]any) error { return nil }
	if a.code != nil {
		lr.Then, stored = s.d.Codes.IssueWith(a.code, insert...)
	}
	res, err := s.d.Limiter.Take(ctx, lr)
	if err != nil {
		if errors.Is(err, ratelimit.ErrOnce) {
			return admitted{}, err
		}
		if !errors.Is(err, ratelimit.ErrLimited) {
			// The script may have failed part-way (it is not a
			// transaction): undo what could have landed; each undo is a
			// no-op on what is not there or no longer ours.
			u := undo{code: a.code, taskID: a.taskID}
			if a.once != nil {
				u.once, u.onceIDs = s.d.Limiter.OnceKey(a.once.Key), a.once.IDs
			}
			s.rollbackLater(ctx, u)
		}
		var ge *ratelimit.GuardError
		if errors.As(err, &ge) {
			return admitted{}, s.pumping(ctx, a.record.Tenant, ge)
		}
		var se *ratelimit.SuppressedError
		if errors.As(err, &se) {
			return admitted{}, s.suppressed(ctx, a.record.Tenant, a.record.Channel, a.recipient, se)
		}
		return admitted{}, s.limited(ctx, err)
	}
	ad := admitted{recipient: a.recipient, taskID: a.taskID, res: res, code: a.code}
	if err := stored(res.Replies); err != nil {
		s.undoAdmission(ctx, ad)
		return admitted{}, unavailable(err, "could not store the code (Redis); nothing was sent, try again")
	}
	return ad, nil
}

// admitUnderKey admits a request (admit, under ids) and, when its
// Idempotency-Key's entry turns out to be a released one of this very
// request held under other ids (takeOver), admits it once more under
// those: the attempt that released it may have published them, and the
// consumer's claim makes the two copies one delivery. When it does not
// admit, ok is false and answer is what to return: the answer of the
// request that holds the key (onceAnswer), or admit's refusal.
func admitUnderKey[T any](s *Server, c *echo.Context, in *idem, ids string, admit func(ids string) (T, error)) (a T, ok bool, answer error) {
	a, err := admit(ids)
	if oe := onceOf(err); oe != nil {
		if id, took := s.takeOver(in, oe, ids); took {
			a, err = admit(id)
		}
	}
	if oe := onceOf(err); oe != nil {
		return a, false, s.onceAnswer(c, in, oe)
	}
	if err != nil {
		return a, false, err
	}
	return a, true, nil
}

// durableAdmission waits until what an admitted request wrote (its status
// record, its code, its Idempotency-Key entry) is on the replicas
// REDIS_WAIT_REPLICAS asks for (durable.go): only then may it be published.
func (s *Server) durableAdmission(ctx context.Context, a admitted) error {
	keys := []string{s.d.Status.Key(a.taskID), a.res.OnceKey}
	if a.code != nil {
		keys = append(keys, a.code.Key())
	}
	return s.durable(ctx, keys...)
}

// undoAdmission undoes what an admitted request wrote (its counts, status
// record, code, and the entry it holds under its task id) once it cannot
// publish.
func (s *Server) undoAdmission(ctx context.Context, a admitted) {
	s.rollback(ctx, undo{reservation: a.res, code: a.code, taskID: a.taskID, once: a.res.OnceKey, onceIDs: a.taskID})
}

// admitAs admits one recipient of a message under a given task id; with
// once, for a request with an Idempotency-Key, its entry too.
func (s *Server) admitAs(ctx context.Context, caller apikey.Key, req *Message, recipient string, now time.Time, taskID string, once *ratelimit.Once) (admitted, error) {
	limits := rlRequest(s.noticeRules(caller, req))
	limits.Suppress = s.suppressCheck(caller.Tenant, req.channel, recipient, false)
	return s.admit(ctx, candidate{
		taskID: taskID, recipient: recipient,
		limits: limits,
		record: acceptedRecord(ctx, caller, req, recipient, taskID, now),
		once:   once,
	})
}

// admitBulk runs recipients that share every rule (a batch's, once its
// Idempotency-Key entry is held, if it has one) through frequency control
// together, in one Limiter.TakeUpTo: one script where a Take per
// recipient would cost Redis a script and a dozen commands each. The
// first ones that fit are admitted, as one by one they would be; refused
// is the limit's 429 for all the others (nil when none was refused).
// Suppressed recipients are left out first, each with its 422 in
// suppressed (by index in recipients): the others are admitted as if they
// had not been there. The
// admitted ones' status records are left to Status.CreateBatch, with the
// batch's task list, in composites of a bounded size: inside the admitting
// script, a batch's 1,000 records held Redis for about 7 ms in front of
// every code (issue 22). A non-nil fatal is the 503 (or 500) for the whole
// batch: what could have landed of these recipients is being undone.
func (s *Server) admitBulk(ctx context.Context, caller apikey.Key, req *Message, recipients, taskIDs []string, now time.Time) (as []admitted, suppressed map[int]*apiError, refused, fatal *apiError) {
	limits := rlRequest(s.noticeRules(caller, req))
	if s.suppressCheck(caller.Tenant, req.channel, "", false) != nil {
		limits.SuppressEach = make([]*ratelimit.Suppress, len(recipients))
		for i, r := range recipients {
			limits.SuppressEach[i] = s.suppressCheck(caller.Tenant, req.channel, r, false)
		}
	}
	b, err := s.d.Limiter.TakeUpTo(ctx, limits, make([][]rdb.Command, len(recipients)))
	if err != nil {
		// On one Redis the script is not a transaction, and on a Redis
		// Cluster the units admitted before the error hold reservations
		// of their own.
		for i := range b.Admitted {
			s.rollbackLater(ctx, undo{reservation: b.Reservation(i)})
		}
		return nil, nil, nil, s.limited(ctx, err)
	}
	as = make([]admitted, 0, b.Admitted)
	for i := range recipients {
		if se := b.Suppressed[i]; se != nil {
			if suppressed == nil {
				suppressed = map[int]*apiError{}
			}
			suppressed[i] = s.suppressed(ctx, caller.Tenant, req.channel, recipients[i], se)
			continue
		}
		if len(as) == b.Admitted {
			continue
		}
		rec := acceptedRecord(ctx, caller, req, recipients[i], taskIDs[i], now)
		as = append(as, admitted{recipient: recipients[i], taskID: taskIDs[i], res: b.Reservation(len(as)), record: &rec})
	}
	if b.Refused != nil {
		refused = s.limited(ctx, b.Refused)
	} else if b.Admitted+len(b.Suppressed) < len(recipients) {
		// TakeUpTo refuses every unit it does not admit; anything else is
		// a bug, and nothing of the batch is kept for it.
		for _, r := range b.Reservations() {
			s.rollbackLater(ctx, undo{reservation: r})
		}
		return nil, nil, nil, internal(fmt.Errorf("frequency control admitted %d of %d recipients and refused none", b.Admitted, len(recipients)))
	}
	return as, suppressed, refused, nil
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

// onceOf is the entry another request holds, when that is why e refused.
func onceOf(err error) *ratelimit.OnceError {
	var oe *ratelimit.OnceError
	if errors.As(err, &oe) {
		return oe
	}
	return nil
}

// takeOver reports the ids to publish under when oe is a released entry of
// this very request (same digest) held under other ids: the request that
// released it may have published them.
func (s *Server) takeOver(in *idem, oe *ratelimit.OnceError, ids string) (string, bool) {
	if oe.State == ratelimit.OnceReleased && oe.Digest == in.digest && oe.IDs != ids && oe.IDs != "" {
		s.metrics.idempotent.WithLabelValues("retried").Inc()
		s.log.Info("idempotent retry: publishing under the failed attempt's ids", zap.String("ids", oe.IDs))
		return oe.IDs, true
	}
	return "", false
}

// onceAnswer is the answer to a request whose key another request holds.
func (s *Server) onceAnswer(c *echo.Context, in *idem, oe *ratelimit.OnceError) error {
	switch {
	case oe.Digest != in.digest:
		return &apiError{Status: http.StatusUnprocessableEntity, Msg: fmt.Sprintf(
			"%s %q was used for another request (method, path or body differ); use a new key for a new request", HeaderIdempotencyKey, truncate(in.header, 64))}
	case oe.State == ratelimit.OnceDone && oe.Code != 0 && len(oe.Answer) > 0:
		s.metrics.idempotent.WithLabelValues("replayed").Inc()
		c.Response().Header().Set(HeaderIdempotentReplayed, "true")
		return c.Blob(oe.Code, echo.MIMEApplicationJSON, oe.Answer)
	}
	s.metrics.idempotent.WithLabelValues("conflict").Inc()
	// The lease only bounds how long the first request may take (it ends
	// in milliseconds as a rule): ask for a retry in a second, not at the
	// lease's end.
	return &apiError{Status: http.StatusConflict, RetryAfter: time.Second, Msg: fmt.Sprintf(
		"a request with %s %q is still being handled; retry after it ends to get its answer", HeaderIdempotencyKey, truncate(in.header, 64))}
}

// limited turns a Take error into the answer: 429 naming the limit, or 503
// when Redis cannot be asked (failing closed: no message goes out unchecked).
func (s *Server) limited(ctx context.Context, err error) *apiError {
	var le *ratelimit.LimitError
	if errors.As(err, &le) {
		if lb := le.LeftBehind; lb != nil {
			s.logLeftBehind(ctx, lb)
		}
		label := le.Rule
		if le.Label != "" {
			label = le.Label
		}
		if !le.Cooldown {
			label += " " + ratelimit.WindowName(le.Window)
		}
		return &apiError{Status: http.StatusTooManyRequests, Msg: le.Error(), RetryAfter: le.RetryAfter, Limit: label, cause: err}
	}
	if refusedForReplicas(err) {
		// The master refused the writes (min-replicas-to-write, or it is
		// a replica now): nothing was stored, as with Redis away.
		return notDurable(err)
	}
	return unavailable(err, "frequency control is unavailable (Redis); nothing was sent, try again")
}

// logLeftBehind says what a refused request could not undo on a Redis
// Cluster (ratelimit.LeftBehind): until it expires, its rules count a
// request that was refused, and a cooldown refuses the recipient's next
// one, so whoever is asked why should find it in the log (issue 38).
func (s *Server) logLeftBehind(ctx context.Context, lb *ratelimit.LeftBehind) {
	const msg = "a refused request's reservation could not be undone; it expires by itself"
	if s.quiet.Allow(msg, zapcore.WarnLevel, zap.String("of", msg)) {
		s.log.Warn(msg, zap.String("reservation", lb.Reservation), zap.Strings("rules", lb.Rules),
			zap.Duration("expires_within", lb.For), telemetry.LogField(ctx), zap.Error(lb.Err))
	}
}

// pumping is the 429 for a code refused by the fraud guard: it names the
// prefix, why, for how long, and how to lift the block, and lists the
// block for GET /api/fraud/blocks.
func (s *Server) pumping(ctx context.Context, tenant string, ge *ratelimit.GuardError) *apiError {
	cfg := s.d.Fraud.Config()
	prefix := ge.Destination
	s.fraud.Refused.WithLabelValues(fraud.RefusedPumping).Inc()
	if lb := ge.LeftBehind; lb != nil {
		s.logLeftBehind(ctx, lb)
	}
	if ge.Started {
		s.log.Warn("fraud guard: prefix blocked for suspected SMS pumping", zap.String("tenant", tenant), zap.String("prefix", prefix),
			zap.String("country", ge.Label), zap.Stringer("reason", ge.Reason), zap.Int("sent", ge.Sent), zap.Int("verified", ge.Verified),
			zap.Duration("for", ge.RetryAfter))
	}
	// Listed even when the caller hung up: the block exists either way.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := s.d.Fraud.Refused(lctx, tenant, prefix, ge); err != nil {
		// Every refused code tries again, so under a flood this would be a
		// line per request: held back as the refusals' own lines are.
		const msg = "fraud guard: could not list a block (the next refusal lists it)"
		if s.quiet.Allow(msg, zapcore.WarnLevel, zap.String("of", msg)) {
			s.log.Warn(msg, zap.Error(err))
		}
	}
	why := fmt.Sprintf("%d codes sent to it in the last %s, %d verified", ge.Sent, windowWords(cfg.Window), ge.Verified)
	if ge.Reason == ratelimit.GuardSpike {
		why = fmt.Sprintf("%d codes sent to it in the last %s, far above its usual traffic", ge.Sent, windowWords(cfg.Window))
	}
	return &apiError{Status: http.StatusTooManyRequests, RetryAfter: ge.RetryAfter, Limit: "fraud guard", cause: ge,
		Msg: fmt.Sprintf("suspected SMS pumping to %s (%s): codes to this prefix are refused for %s (%s; FRAUD_GUARD=%s); if this traffic is legitimate, lift the block with DELETE /api/fraud/blocks/%s/%s",
			prefix, ge.Label, ge.RetryAfter.Round(time.Second), why, cfg.Level, tenant, url.PathEscape(prefix))}
}

func windowWords(d time.Duration) string {
	if d == time.Hour {
		return "hour"
	}
	return d.String()
}

// suppressed is the 422 of a request the limiter refused for its
// recipient's entry: "recipient is suppressed: hard bounce 5.1.1 on …".
func (s *Server) suppressed(ctx context.Context, tenant, channel, recipient string, se *ratelimit.SuppressedError) *apiError {
	if lb := se.LeftBehind; lb != nil {
		s.logLeftBehind(ctx, lb)
	}
	s.metrics.rejections.WithLabelValues("suppressed").Inc()
	e := suppression.Refused(tenant, channel, recipient, se)
	return &apiError{Status: http.StatusUnprocessableEntity, Msg: e.Refusal(), cause: se}
}
