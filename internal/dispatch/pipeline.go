package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// process runs the pipeline for j: check, the channel's admission, then
// the channel's send wrapped in the cross-cutting steps, each of which
// does its part, calls the rest and sees its outcome (as watermill's
// middleware wraps a handler): the claim, then the provider limits. It
// returns nil when the provider accepted the message, or an error whose
// kind tells decide what to do.
func (d *Dispatcher) process(ctx context.Context, j *job) error {
	if err := d.check(j); err != nil {
		return err
	}
	rules, err := d.admit(ctx, j)
	if err != nil {
		return err
	}
	return d.withClaim(ctx, j, len(rules) == 0, func(ctx context.Context) error {
		return d.withLimits(ctx, j, rules, func(ctx context.Context) error {
			return d.send(ctx, j)
		})
	})
}

// check decodes the delivery's message and refuses one that is malformed
// or past its deadline.
func (d *Dispatcher) check(j *job) error {
	if n := len(j.del.Body); n > d.cfg.MaxMessageBytes {
		// The API never writes one this big: rendering and sending it would
		// only spend the provider's time and the recipient's patience.
		return fmt.Errorf("%w: body of %d bytes exceeds MAX_MESSAGE_BYTES (%d)", envelope.ErrMalformed, n, d.cfg.MaxMessageBytes)
	}
	msg, err := envelope.Decode(j.del.Body)
	if err != nil {
		return err
	}
	if msg.Channel != j.channel {
		return fmt.Errorf("%w: a %s message in the %s queue", envelope.ErrMalformed, msg.Channel, j.channel)
	}
	if msg.Level != "" {
		if _, err := topology.ParseLevel(msg.Level); err != nil {
			return fmt.Errorf("%w: %w", envelope.ErrMalformed, err)
		}
	}
	j.msg, j.task.Msg = msg, msg
	if msg.Expired(d.now()) {
		return ErrDeadline
	}
	return nil
}

// admit asks the channel to admit the message, and returns the provider
// limits to take before the send: the provider's (every one keeps its
// last tokens for codes), with the channel's own.
func (d *Dispatcher) admit(ctx context.Context, j *job) ([]ratelimit.Rule, error) {
	var rules []ratelimit.Rule
	if d.cfg.RateLimits != nil {
		rules = d.cfg.RateLimits.Rules(j.provider)
	}
	return j.ch.Admit(ctx, &j.task, channel.ReserveForCodes(j.level, rules))
}

// withClaim runs next holding the message's claim, its lease renewed
// while next runs (afterSend stops it, and gives the claim back unless the
// message was sent), or says why there is none: sent already, or held by
// another consumer (a snooze until its lease can have expired). The
// sending mark rides with the claim only when no provider limit may still
// hold the message back (noLimits), and only for a message of one task: a
// batch's id has no status record of its own.
func (d *Dispatcher) withClaim(ctx context.Context, j *job, noLimits bool, next func(context.Context) error) error {
	key := d.cfg.Claims.TaskKey(j.channel, j.msg.TaskID)
	if j.msg.Kind == envelope.Verification {
		key = d.cfg.Claims.VerificationKey(j.channel, j.msg.Recipient, j.msg.CodeDigest, j.msg.Purpose, j.msg.TaskID)
	}
	cctx, cspan := telemetry.Start(ctx, "claim")
	res, err := d.claim(cctx, j, key, noLimits && len(j.msg.Recipients) == 0)
	cspan.End()
	if err != nil {
		return fmt.Errorf("%w: claim: %w", channel.ErrRedis, notDurableIf(key, err))
	}
	switch res.Outcome {
	case claim.AlreadySent:
		return ErrAlreadySent
	case claim.Held:
		// Another consumer is sending it now. Come back once its lease
		// can have expired: by then it is either marked sent or free.
		return channel.Snooze(res.HeldFor+time.Second, "claimed by "+res.HeldBy)
	}
	if err := d.durable(ctx, res.Claim); err != nil {
		return err
	}
	j.claimed, j.stopRenew = res.Claim, d.renew.Hold(res.Claim)
	err = next(ctx)
	if errors.Is(err, channel.ErrHandedOff) {
		return err // finish completes it
	}
	return d.afterSend(ctx, j, err)
}

// withLimits runs next once the provider limits let the message go; when
// they hold it back, it comes back when they would let it (a snooze).
func (d *Dispatcher) withLimits(ctx context.Context, j *job, rules []ratelimit.Rule, next func(context.Context) error) error {
	if len(rules) > 0 {
		if _, err := d.cfg.Limiter.Take(ctx, ratelimit.Request{Rules: rules}); err != nil {
			var le *ratelimit.LimitError
			if errors.As(err, &le) {
				return channel.Snooze(le.RetryAfter, "provider "+j.provider+" "+le.Error())
			}
			return fmt.Errorf("%w: provider limit: %w", channel.ErrRedis, err)
		}
	}
	return next(ctx)
}

// afterSend stops renewing the claim of a send that is done (or never
// made: a provider limit held it back), releasing it unless the message
// was sent.
func (d *Dispatcher) afterSend(ctx context.Context, j *job, err error) error {
	j.stopRenew()
	if err != nil {
		d.release(ctx, j.claimed)
		return err
	}
	// decide marks the claim sent at once, together with the status: the
	// gap between the provider's yes and that write is the only window in
	// which a crash leads to a duplicate.
	j.claim = j.claimed
	return nil
}

// claim acquires the message's idempotency claim. With withSending, the
// "sending" status update rides in the same round trip, guarded by the
// claim's lease so that it changes nothing unless the claim is ours; it is
// left for send when a provider limit may still hold the message back.
//
// Only the claim's result decides: a status write never decides a
// message's fate, and retrying the pipeline after the claim ran would find
// our own lease.
func (d *Dispatcher) claim(ctx context.Context, j *job, key string, withSending bool) (claim.Result, error) {
	var res claim.Result
	err := d.burst.Do(channel.Urgent(j.level), func(p redis.Scripter) (func() error, error) {
		a, err := d.cfg.Claims.QueueAcquire(ctx, p, key, d.cfg.Owner)
		if err != nil {
			return nil, err
		}
		var sending func() (status.Record, error)
		j.sendingRecorded = false
		if withSending {
			u := d.sendingUpdate(j)
			u.Guard = &status.Guard{Key: key, Value: a.Lease}
			if sending, err = d.cfg.Status.QueueUpdate(ctx, p, j.msg.TaskID, u); err != nil {
				return nil, err
			}
		}
		return func() error {
			if res, err = a.Result(); err != nil {
				return err
			}
			if sending != nil && res.Outcome == claim.Claimed {
				_, serr := sending()
				d.logStatusError(j.msg.TaskID, status.Sending, serr)
				j.sendingRecorded = serr == nil
			}
			return nil
		}, nil
	})
	return res, err
}

// sendingUpdate is the "sending" status, the one write made before every
// send. An email's or SMS's carries what a receipt's applier needs later,
// whenever the receipt comes (before "sent" too, in a crash between the
// provider's yes and that write): the callback URL and a keyed digest of
// the recipient. In this write they cost no round trip of their own.
func (d *Dispatcher) sendingUpdate(j *job) status.Update {
	u := status.Update{Status: status.Sending, IncAttempts: true, Provider: ptr(j.provider), Blind: true}
	// The channels receipts come back for are the ones a recipient can be
	// suppressed on (suppression.Suppressible): the pipeline names none.
	names, ok := topology.ByQueue(j.channel, false)
	if len(j.msg.Recipients) == 0 && ok && suppression.Suppressible(names.API) {
		u.RecipientDigest = ptr(status.DigestRecipient(d.cfg.Keys, names.API, j.msg.Recipient))
		if j.msg.CallbackURL != "" {
			u.CallbackURL = ptr(j.msg.CallbackURL)
		}
	}
	return u
}

func (d *Dispatcher) release(ctx context.Context, cl *claim.Claim) {
	if err := cl.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, claim.ErrLost) {
		d.log.Warn("could not release the claim; it expires with its lease", zap.String("key", cl.Key()), zap.Error(err))
	}
}

// send records the "sending" status (one more attempt) and has the
// channel render and send, within SEND_TIMEOUT.
func (d *Dispatcher) send(ctx context.Context, j *job) error {
	vars, err := d.variables(j.msg)
	if err != nil {
		return err
	}
	d.recordSending(ctx, j)
	call, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
	defer cancel()
	j.sendStart = d.now()
	j.task.Vars = vars
	rcpt, err := j.ch.Send(ctx, call, &j.task)
	switch {
	case errors.Is(err, channel.ErrHandedOff):
		return err // whoever holds it calls finish
	case errors.Is(err, channel.ErrTemplate):
		return err // nothing reached the provider: no send to time
	}
	return d.sent(j, rcpt, err)
}

// variables are the template's variables of msg, its code opened.
func (d *Dispatcher) variables(msg *envelope.Message) (map[string]string, error) {
	vars := maps.Clone(msg.Variables)
	if vars == nil {
		vars = map[string]string{}
	}
	if msg.Kind == envelope.Verification {
		code, err := d.cfg.Keys.Open(msg.SealedCode, msg.TaskID)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", channel.ErrTemplate, err)
		}
		vars["code"] = code
	} else if d.cfg.Templates.IsCode(msg.Template) {
		// The API refuses these; a message that got here anyway (an older
		// API, a hand-made publish) would carry a code its sender chose.
		return nil, fmt.Errorf("%w: template %s carries a verification code and is sent only by POST /api/verification-codes", channel.ErrTemplate, msg.Template)
	}
	return vars, nil
}

// recordSending writes the "sending" status, unless it rode with the
// claim.
func (d *Dispatcher) recordSending(ctx context.Context, j *job) {
	switch {
	case j.sendingRecorded:
	case len(j.msg.Recipients) > 0:
		// A batch's records, up to 1,000, take Redis tens of milliseconds
		// on a busy machine: the call does not wait for them (issue 22:
		// they were a fifth of a WeCom batch's time to its recipients).
		// The goroutine is the job's: decide, and the handler on its way
		// out, wait for it (waitSending).
		done := make(chan struct{})
		ids, u := j.taskIDs(), d.sendingUpdate(j)
		go func() {
			defer close(done)
			d.recordAll(ctx, j.msg.TaskID, ids, u)
		}()
		j.sending = done
	default:
		d.recordJob(ctx, j, d.sendingUpdate(j))
	}
}

// sent notes which provider answered a send, and how long it took.
func (d *Dispatcher) sent(j *job, rcpt provider.Receipt, err error) error {
	var pe *provider.Error
	switch {
	case err == nil && rcpt.Provider != "":
		j.provider = rcpt.Provider
	case errors.As(err, &pe) && pe.Provider != "":
		j.provider = pe.Provider
	}
	d.hot.sendDuration(j.channel, j.provider).Observe(d.now().Sub(j.sendStart).Seconds())
	return err
}
