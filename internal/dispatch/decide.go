package dispatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
)

// jobFields are the log fields of a job's outcome: the recipient and
// attempt only once its message is decoded.
func jobFields(ctx context.Context, taskID string, j *job) []zap.Field {
	f := []zap.Field{zap.String("task_id", taskID), zap.String("channel", j.channel), zap.String("provider", j.provider), telemetry.LogField(ctx)}
	if j.msg != nil {
		f = append(f, zap.String("recipient", logging.Mask(j.msg.Recipient)), zap.Int("attempt", j.msg.Attempt+1))
	}
	return f
}

// decide is the one place that turns a step's outcome into ack, retry or
// dead-letter.
func (d *Dispatcher) decide(ctx context.Context, j *job, err error) broker.Action {
	j.waitSending()
	var snooze *channel.SnoozeError
	var refused *receipt.RefusedError
	taskID := j.del.MessageId
	if j.msg != nil {
		taskID = j.msg.TaskID
	}
	if err == nil {
		d.markSent(ctx, j)
		d.hot.sent(j.channel, j.level, j.provider).Add(float64(len(j.taskIDs()) - len(j.task.Rejected())))
		// Debug: a line per message cost more than the rest of the
		// handler's own work (issue 22); msgpulse_sent_total and the
		// status record say the same. Failures are always logged. Checked
		// first, so that a success builds no logger.
		if ce := d.log.Check(zap.DebugLevel, "sent"); ce != nil {
			ce.Write(jobFields(ctx, taskID, j)...)
		}
		return broker.Ack
	}
	log := d.log.WithLazy(jobFields(ctx, taskID, j)...)
	switch {
	case errors.Is(err, ErrAlreadySent):
		d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "duplicate").Inc()
		log.Info("already sent; acking the duplicate delivery")
		return broker.Ack

	case errors.As(err, &snooze):
		a := d.later(ctx, j, snooze.For, false)
		if a != broker.Requeue {
			d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "snoozed").Inc()
			log.Info("snoozed", zap.Duration("for", snooze.For), zap.String("why", snooze.Reason))
		}
		return a

	case errors.Is(err, envelope.ErrMalformed):
		return d.deadLetter(ctx, j, log, ReasonMalformed, "malformed", err)

	case errors.Is(err, ErrDeadline):
		d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, ReasonDeadline).Inc()
		d.final(ctx, j, status.Update{Status: status.Expired, Reason: ptr(ReasonDeadline), ErrorClass: ptr("deadline"),
			LastError: ptr("not sent: its deadline " + j.msg.Deadline.UTC().Format(time.RFC3339) + " had passed")})
		log.Warn("past its deadline; dead-lettering without sending")
		return broker.Reject

	case errors.Is(err, channel.ErrAccountDown):
		return d.waitForAccount(ctx, j, log, err)

	case errors.As(err, &refused):
		// Before ErrPermanent: a refusal that is a receipt may wrap one.
		return d.refused(ctx, j, log, refused)

	case errors.Is(err, channel.ErrTemplate), errors.Is(err, provider.ErrPermanent):
		return d.deadLetter(ctx, j, log, ReasonPermanent, channel.Class(err), err)

	case errors.Is(err, breaker.ErrOpen):
		// Nothing was attempted: an open breaker refused the send. Come
		// back when it may let a probe through, without spending one of
		// the message's retries on a send that never happened.
		wait := time.Second
		var pe *provider.Error
		if errors.As(err, &pe) && pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		wait += time.Duration(rand.Int64N(int64(wait/4) + 1)) //nolint:gosec // spreading returns, not a secret
		a := d.retryLater(ctx, j, wait, false, status.Update{Status: status.Retrying, ErrorClass: ptr("circuit_open"), LastError: ptr(err.Error())})
		if a != broker.Requeue {
			d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "breaker_open").Inc()
			log.Info("circuit breaker open; the message comes back later", zap.Duration("in", wait))
		}
		return a
	}

	// Transient (timeouts, 4xx SMTP, throttling, vendor 5xx) and anything
	// unclassified: retry through the delay queues, up to MaxRetries.
	class := channel.Class(err)
	retry := j.msg.Attempt + 1
	if retry > d.cfg.Retry.MaxRetries {
		return d.deadLetter(ctx, j, log, ReasonExhausted, class, fmt.Errorf("after %d attempts: %w", retry, err))
	}
	var pe *provider.Error
	var hint time.Duration
	if errors.As(err, &pe) {
		hint = pe.RetryAfter
	}
	wait := d.cfg.Retry.Wait(retry, errors.Is(err, provider.ErrThrottled), hint)
	a := d.retryLater(ctx, j, wait, true, status.Update{Status: status.Retrying, ErrorClass: ptr(class), LastError: ptr(err.Error())})
	if a != broker.Requeue {
		d.cfg.Metrics.Retried.WithLabelValues(j.channel, string(j.level), j.provider, class).Inc()
		log.Warn("send failed; retry scheduled", zap.String("class", class), zap.Duration("in", wait), zap.Error(err))
	}
	return a
}

func (d *Dispatcher) deadLetter(ctx context.Context, j *job, log *zap.Logger, reason, class string, err error) broker.Action {
	d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, reason).Inc()
	d.final(ctx, j, status.Update{Status: status.Failed, Reason: ptr(reason), ErrorClass: ptr(class), LastError: ptr(err.Error())})
	log.Warn("dead-lettering", zap.String("reason", reason), zap.String("class", class), zap.Error(err))
	return broker.Reject
}

// waitForAccount sends a message of a down account back through the delay
// queues, waiting longer each time (RETRY_BACKOFF), never past its
// deadline: it then comes back once more and expires. A message without a
// deadline gives up after MAX_RETRIES waits.
func (d *Dispatcher) waitForAccount(ctx context.Context, j *job, log *zap.Logger, err error) broker.Action {
	retry := j.msg.Attempt + 1
	wait := d.cfg.Retry.Wait(retry, false, 0)
	if j.msg.Deadline != nil {
		wait = min(wait, j.msg.Deadline.Sub(d.now())+time.Millisecond)
	} else if retry > d.cfg.Retry.MaxRetries {
		return d.deadLetter(ctx, j, log, ReasonExhausted, ClassAccountDown, fmt.Errorf("after %d waits: %w", retry, err))
	}
	if a := d.retryLater(ctx, j, wait, true, status.Update{Status: status.Retrying, ErrorClass: ptr(ClassAccountDown), LastError: ptr(err.Error())}); a != broker.Ack {
		return a // held until the broker takes it (see later)
	}
	d.cfg.Metrics.Retried.WithLabelValues(j.channel, string(j.level), j.provider, ClassAccountDown).Inc()
	log.Info("WeCom account down; the message waits", zap.Duration("in", wait))
	return broker.Ack
}
