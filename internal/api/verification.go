package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
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
	now := s.now()
	// A retry of a failed attempt with the same Idempotency-Key comes back
	// under that attempt's task id, and so with its code.
	code, ok, answer := admitUnderKey(s, c, in, newTaskID(), func(taskID string) (admittedCode, error) {
		return s.admitCode(ctx, caller, &req, in, taskID, now)
	})
	if !ok {
		return answer
	}
	// The code, its record and the Idempotency-Key entry survive a
	// failover before the code is sent: a code that no longer verifies,
	// or a retry that sends a second one, is what a lost write costs.
	if err := s.durableAdmission(ctx, code.admitted); err != nil {
		s.undoAdmission(ctx, code.admitted)
		return notDurable(err)
	}
	// No level on the message: the codes' queue, which is theirs alone.
	if err := s.publish(ctx, req.Channel, code.msg, 0); err != nil {
		s.undoAdmission(ctx, code.admitted)
		return publishFailure(err)
	}
	s.metrics.codes.WithLabelValues(req.Channel).Inc()
	return s.answer(c, in, code.res, http.StatusAccepted, "verification code queued", VerificationCode{
		TaskID: code.taskID, Status: string(status.Queued),
		ExpiresAt: code.code.ExpiresAt.UTC().Truncate(time.Second), ResendAfter: now.Add(s.opts.Limits.ResendInterval).UTC().Truncate(time.Second),
	})
}

// admittedCode is a code that frequency control let through, stored, and
// the message that carries it sealed.
type admittedCode struct {
	admitted
	msg *envelope.Message
}

// admitCode draws the code of req under taskID, sealed for its message,
// and admits it: the limits and, only if they admit it, the code and its
// status record, in one round trip (admit).
func (s *Server) admitCode(ctx context.Context, caller apikey.Key, req *VerificationCodeRequest, in *idem, taskID string, now time.Time) (admittedCode, error) {
	record := codeRecord(ctx, caller, req, taskID, now)
	// The number's type and country first: a number the tenant may not
	// send codes to is refused before anything is counted.
	if req.Channel == chSMS {
		if e := s.checkNumber(caller.Tenant, req.number); e != nil {
			return admittedCode{}, e
		}
	}
	limits := s.verifyRequest(caller, req)
	// Under an Idempotency-Key the code comes from the task id, so a retry
	// of an ambiguous 503 (its copy may be queued) seals the same code.
	code, err := s.d.Codes.Draft(caller.Tenant, req.Channel, req.Recipient, req.Purpose, taskID, in != nil)
	if err != nil {
		return admittedCode{}, internal(err)
	}
	a, err := s.admit(ctx, candidate{
		taskID: taskID, recipient: req.Recipient,
		limits: limits, record: record,
		code: code,
		once: in.once(taskID, s.lease(1)),
	})
	if err != nil {
		return admittedCode{}, err
	}
	return admittedCode{admitted: a, msg: s.codeMessage(caller, req, code, now)}, nil
}

// codeMessage is the envelope that carries code, sealed.
func (s *Server) codeMessage(caller apikey.Key, req *VerificationCodeRequest, code *verify.Issued, now time.Time) *envelope.Message {
	ttlMinutes := int((s.d.Codes.TTL() + time.Minute - 1) / time.Minute)
	return &envelope.Message{
		Version: envelope.SchemaVersion, TaskID: code.TaskID, Kind: envelope.Verification,
		Channel: topologyChannel(req.Channel), Recipient: req.Recipient, Template: "verify_code", Locale: req.Locale,
		Variables: map[string]string{"ttlMinutes": strconv.Itoa(ttlMinutes)},
		Purpose:   req.Purpose, SealedCode: code.Sealed, CodeDigest: code.Digest, Deadline: &code.ExpiresAt, Tenant: caller.Tenant, CreatedAt: now,
	}
}

// codeRecord is the status record a code starts with once admitted.
func codeRecord(ctx context.Context, caller apikey.Key, req *VerificationCodeRequest, taskID string, now time.Time) status.Record {
	return status.Record{TaskID: taskID, Status: status.Queued, Channel: req.Channel, Recipient: logging.Mask(req.Recipient),
		Kind: string(envelope.Verification), Template: "verify_code", Tenant: caller.Tenant, CreatedAt: now, UpdatedAt: now,
		Priority: string(topology.High), // codes are always high: they go stale in a minute
		TraceID:  telemetry.TraceID(ctx)}
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
