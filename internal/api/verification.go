package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/internal/verify"
)

// VerificationCode is the 202 answer's data.
type VerificationCode struct {
	TaskID      string    `json:"taskId"`
	Status      string    `json:"status"`
	ExpiresAt   time.Time `json:"expiresAt"`
	ResendAfter time.Time `json:"resendAfter"`
}

func (s *Server) requestCode(c *echo.Context) error {
	if e := checkContentType(c.Request()); e != nil {
		return e
	}
	var req VerificationCodeRequest
	in, e := s.decodeBody(c, s.opts.BodyLimit, &req)
	if e != nil {
		return e
	}
	if e := req.validate(s.d.Templates.HasLocale); e != nil {
		return e
	}
	ctx := c.Request().Context()
	caller := Caller(c)
	if req.Channel == chSMS {
		if e := s.checkNumber(caller.Tenant, req.number); e != nil {
			return e
		}
	}
	taskID := newTaskID()
	// A retry of a failed attempt with the same Idempotency-Key comes back
	// here once, under that attempt's task id (see takeOver).
	tookOver := false
again:
	var (
		iss *verify.Issued
		err error
	)
	if in != nil {
		// Under an Idempotency-Key the code comes from the task id, so a
		// retry of an ambiguous 503 (its copy may be queued) seals the same
		// code: the two copies are one claim, one mail, a code that works.
		iss = s.d.Codes.PrepareCode(caller.Tenant, req.Channel, req.Recipient, req.Purpose, taskID, s.d.Codes.For(taskID))
	} else if iss, err = s.d.Codes.Prepare(caller.Tenant, req.Channel, req.Recipient, req.Purpose, taskID); err != nil {
		return internal(err)
	}
	now := s.now()
	sealed, err := s.d.Keys.Seal(iss.Code, taskID)
	if err != nil {
		return internal(err)
	}
	ttlMinutes := int((s.d.Codes.TTL() + time.Minute - 1) / time.Minute)
	msg := &envelope.Message{
		Version: envelope.SchemaVersion, TaskID: taskID, Kind: envelope.Verification,
		Channel: topologyChannel(req.Channel), Recipient: req.Recipient, Template: "verify_code", Locale: req.Locale,
		Variables: map[string]string{"ttlMinutes": strconv.Itoa(ttlMinutes)},
		Purpose:   req.Purpose, SealedCode: sealed, CodeDigest: iss.Digest, Deadline: &iss.ExpiresAt, Tenant: caller.Tenant, CreatedAt: now,
	}
	rec := status.Record{TaskID: taskID, Status: status.Queued, Channel: req.Channel, Recipient: logging.Mask(req.Recipient),
		Kind: string(envelope.Verification), Template: "verify_code", Tenant: caller.Tenant, CreatedAt: now, UpdatedAt: now,
		Priority: string(topology.High)} // codes are always high: they go stale in a minute
	rec.TraceID = telemetry.TraceID(ctx)
	// One round trip: the limits, and only if they admit the request, the
	// code and its status record, in the limiter's script.
	issue := s.d.Codes.IssueCommands(iss)
	insert, err := s.d.Status.InsertCommands(rec)
	if err != nil {
		return internal(err)
	}
	lr := s.verifyRequest(caller, &req)
	lr.Then = append(issue, insert...)
	lr.Once = in.once(taskID, s.lease(1))
	res, err := s.d.Limiter.Take(ctx, lr)
	if oe := onceOf(err); oe != nil {
		if id, ok := s.takeOver(in, oe, taskID); ok && !tookOver {
			taskID, tookOver = id, true
			goto again
		}
		return s.onceAnswer(c, in, oe)
	}
	if err != nil {
		if !errors.Is(err, ratelimit.ErrLimited) {
			// The script may have failed part-way (it is not a
			// transaction): undo what could have landed; each undo is a
			// no-op on what is not there or no longer ours.
			s.rollbackLater(ctx, undo{code: iss, taskID: taskID, once: onceKey(s, lr.Once), onceIDs: taskID})
		}
		var ge *ratelimit.GuardError
		if errors.As(err, &ge) {
			return s.pumping(ctx, caller.Tenant, req.number, ge)
		}
		return s.limited(ctx, err)
	}
	if err := s.d.Codes.IssueResult(iss, res.Replies[:len(issue)]); err != nil {
		s.rollback(ctx, undo{reservation: res, code: iss, taskID: taskID, once: res.OnceKey, onceIDs: taskID})
		return unavailable(err, "could not store the code (Redis); nothing was sent, try again")
	}
	// The code, its record and the Idempotency-Key entry survive a
	// failover before the code is sent: a code that no longer verifies,
	// or a retry that sends a second one, is what a lost write costs.
	if err := s.durable(ctx, iss.Key(), s.d.Status.Key(taskID), res.OnceKey); err != nil {
		s.rollback(ctx, undo{reservation: res, code: iss, taskID: taskID, once: res.OnceKey, onceIDs: taskID})
		return notDurable(err)
	}
	// No level on the message: the codes' queue, which is theirs alone.
	if err := s.publish(ctx, req.Channel, msg, 0); err != nil {
		s.rollback(ctx, undo{reservation: res, code: iss, taskID: taskID, once: res.OnceKey, onceIDs: taskID})
		return publishFailure(err)
	}
	s.metrics.codes.WithLabelValues(req.Channel).Inc()
	return s.answer(c, in, res, http.StatusAccepted, "verification code queued", VerificationCode{
		TaskID: taskID, Status: string(status.Queued),
		ExpiresAt: iss.ExpiresAt.UTC().Truncate(time.Second), ResendAfter: now.Add(s.opts.Limits.ResendInterval).UTC().Truncate(time.Second),
	})
}

// VerifyResult is the verify answer's data.
type VerifyResult struct {
	Valid        bool `json:"valid"`
	AttemptsLeft int  `json:"attemptsLeft"`
}

func (s *Server) verifyCode(c *echo.Context) error {
	if e := checkContentType(c.Request()); e != nil {
		return e
	}
	var req VerifyRequest
	if e := decodeJSON(c.Request().Body, s.opts.BodyLimit, &req); e != nil {
		return e
	}
	if e := req.validate(); e != nil {
		return e
	}
	// The caller's tenant picks the code: another tenant's code for the
	// same recipient is neither seen nor counted against. A verified SMS
	// code is tallied for the fraud guard in the script that consumes it.
	tenant := Caller(c).Tenant
	var tally *verify.Tally
	if req.Channel == chSMS && s.d.Fraud != nil {
		tally = s.d.Fraud.Tally(tenant, req.number)
	}
	res, err := s.d.Codes.Check(c.Request().Context(), tenant, req.Channel, req.Recipient, req.Purpose, req.Code, tally)
	if err != nil && !res.Valid {
		return unavailable(err, "verification is unavailable (Redis); try again")
	}
	if err != nil {
		// Consumed, so valid; only the guard's count missed it (its prefix
		// looks a little less verified).
		s.log.Warn("a verified code was not tallied for the fraud guard", zap.String("tenant", tenant), zap.Error(err))
	}
	data := VerifyResult{Valid: res.Valid, AttemptsLeft: res.AttemptsLeft}
	switch {
	case res.Valid:
		s.metrics.checks.WithLabelValues("valid").Inc()
		return reply(c, http.StatusOK, "code is valid", data)
	case res.Burned:
		s.metrics.checks.WithLabelValues("burned").Inc()
		return &apiError{Status: http.StatusTooManyRequests, Msg: "too many wrong attempts: the code is no longer valid, request a new one", Data: data, Limit: "verify attempts"}
	case res.Locked: // still 429, not "wrong code": the user is locked out, not mistyping
		s.metrics.checks.WithLabelValues("locked").Inc()
		return &apiError{Status: http.StatusTooManyRequests, Msg: "too many wrong attempts: the code is locked until it would have expired, request a new one", Data: data, Limit: "verify attempts"}
	}
	s.metrics.checks.WithLabelValues("invalid").Inc()
	return reply(c, http.StatusOK, "code is not valid", data)
}
