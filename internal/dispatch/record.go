package dispatch

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
)

// markSent marks the claim sent and records the outcome in one round
// trip, then fires the callbacks. The outcome is sent, except for the
// recipients of a WeCom message that WeCom refused for good: failed, with
// the reason. Only the claim's mark is retried after a NOSCRIPT: a
// repeated status update is harmless.
func (d *Dispatcher) markSent(ctx context.Context, j *job) {
	// The burst bounds its own round trip and the calls below only record,
	// so no timer of ours is needed. The outcome is written even when the
	// delivery's context ended: the message went out.
	ctx = context.WithoutCancel(ctx)
	now := d.now()
	blind := j.msg.CallbackURL == "" || d.cfg.Callbacks == nil
	sent := status.Update{Status: status.Sent, SentAt: &now, Provider: ptr(j.provider), LastError: ptr(""), Blind: blind}
	ids := j.taskIDs()
	updates := make([]status.Update, len(ids))
	for i := range ids {
		updates[i] = sent
		if why, ok := j.task.Rejected()[j.recipientAt(i)]; ok {
			updates[i] = status.Update{Status: status.Failed, Provider: ptr(j.provider), Reason: ptr(ReasonPermanent), ErrorClass: ptr(string(provider.Permanent)), LastError: ptr(why), Blind: blind}
		}
	}
	var recs []status.Record
	var recErr error
	err := d.burst.Do(channel.Urgent(j.level), func(p redis.Scripter) (func() error, error) {
		marked := j.claim.QueueMarkSent(ctx, p)
		results := make([]func() (status.Record, error), len(ids))
		for i, id := range ids {
			var err error
			if results[i], err = d.cfg.Status.QueueUpdate(ctx, p, id, updates[i]); err != nil {
				return nil, err
			}
		}
		var own func() error
		if w, ok := j.ch.(channel.SentWriter); ok {
			own = w.QueueSent(ctx, p, &j.task)
		}
		return func() error {
			if own != nil {
				if err := own(); err != nil {
					d.log.Warn("sent, but could not write the channel's own record of it (an SMS's vendor id: its delivery reports will not be matched)",
						zap.String("task_id", j.msg.TaskID), zap.Error(err))
				}
			}
			recs, recErr = recs[:0], nil
			for _, res := range results {
				rec, err := res()
				if err != nil {
					recErr = err
					continue
				}
				recs = append(recs, rec)
			}
			return marked()
		}, nil
	})
	if err != nil && !errors.Is(err, claim.ErrLost) {
		d.log.Error("sent, but could not mark the claim sent; a redelivery within the lease could send again",
			zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Error(err))
	}
	d.logStatusError(j.msg.TaskID, status.Sent, recErr)
	if !blind {
		for _, rec := range recs {
			d.cfg.Callbacks.Send(ctx, j.msg.CallbackURL, j.msg.Tenant, rec) // queues; its workers bound delivery
		}
	}
	if n := len(j.task.Rejected()); n > 0 {
		d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, ReasonPermanent).Add(float64(n))
		d.log.Warn("WeCom refused some recipients for good; they are failed", zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Int("refused", n), zap.Int("recipients", len(ids)))
	}
}

func (d *Dispatcher) logStatusError(taskID string, st status.State, err error) {
	if err != nil && !errors.Is(err, status.ErrFinal) && !errors.Is(err, status.ErrGuard) {
		d.log.Warn("could not update the status record", zap.String("task_id", taskID), zap.String("status", string(st)), zap.Error(err))
	}
}

// final records a final status and fires the callbacks, if any.
func (d *Dispatcher) final(ctx context.Context, j *job, u status.Update) {
	recs := d.recordJob(ctx, j, u)
	if d.cfg.Callbacks != nil && j.msg != nil && j.msg.CallbackURL != "" {
		for _, rec := range recs {
			d.cfg.Callbacks.Send(ctx, j.msg.CallbackURL, j.msg.Tenant, rec)
		}
	}
}

// recordJob updates the status records of a job (see taskIDs); a batch's
// go in one round trip. Like record, a failure is logged, never decides.
func (d *Dispatcher) recordJob(ctx context.Context, j *job, u status.Update) []status.Record {
	ids := j.taskIDs()
	if len(ids) == 1 {
		if rec := d.record(ctx, ids[0], u); rec != nil {
			return []status.Record{*rec}
		}
		return nil
	}
	return d.recordAll(ctx, j.msg.TaskID, ids, u)
}

// recordAll writes u to the status records ids of the batch taskID, in
// one round trip, and returns those it updated. The updates run as
// composites of the burst's Composer (issue 22): a WeCom batch's 1,000
// records cost Redis 1,000 EVALSHA as separate scripts, about 25 ms of its
// time, and about 8 composites as these (rdb.CompositeMax).
func (d *Dispatcher) recordAll(ctx context.Context, taskID string, ids []string, u status.Update) []status.Record {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rec := d.burst.comp.Recorder()
	results := make([]func() (status.Record, error), 0, len(ids))
	var recs []status.Record
	var first error
	for _, id := range ids {
		res, err := d.cfg.Status.QueueUpdate(ctx, rec, id, u)
		if err != nil {
			first, results = err, nil
			break
		}
		results = append(results, res)
	}
	if len(results) > 0 {
		// Each update carries its own reply or error; a failure of the
		// round trip reaches every one of them.
		_ = d.burst.comp.Exec(ctx, d.cfg.Redis, rec)
	}
	for _, res := range results {
		r, err := res()
		switch {
		case err == nil:
			recs = append(recs, r)
		case first == nil && !errors.Is(err, status.ErrFinal):
			first = err
		}
	}
	if first != nil {
		d.log.Warn("could not update the status records of a batch", zap.String("task_id", taskID), telemetry.LogField(ctx), zap.String("status", string(u.Status)), zap.Error(first))
	}
	return recs
}

// record updates a status record. A status write never decides a
// message's fate: a failure is logged and the message goes on.
func (d *Dispatcher) record(ctx context.Context, taskID string, u status.Update) *status.Record {
	if taskID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	rec, err := d.cfg.Status.Update(ctx, taskID, u)
	if err != nil && !errors.Is(err, status.ErrFinal) {
		d.log.Warn("could not update the status record", zap.String("task_id", taskID), telemetry.LogField(ctx), zap.String("status", string(u.Status)), zap.Error(err))
		return nil
	}
	return &rec
}

func ptr[T any](v T) *T { return &v }
