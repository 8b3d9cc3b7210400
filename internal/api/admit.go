package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/status"
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
	// number is an SMS code's recipient, which a fraud guard's refusal
	// names.
	number phone.Number
	once   *ratelimit.Once // the Idempotency-Key's entry; nil without one
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
			return admitted{}, s.pumping(ctx, a.record.Tenant, a.number, ge)
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
