// Package wecom is the WeCom channel of the consumer pipeline: application
// messages and group robots' posts, each sent from an account resolved
// once (accounts.go), with the account's own limits and adaptive rate, its
// health and down mark, the merge of single messages (merge.go) and the
// download and upload of media files (media.go).
//
// A task that must wait (for others to merge with, for its file's
// download) is handed off (channel.ErrHandedOff) with its delivery, and
// finished by whoever holds it through Task.Finish. It never touches AMQP,
// claims or status records: the pipeline (internal/dispatch) does, and it
// never decides a delivery's fate, it reports the outcome.
package wecom

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Channel sends WeCom messages.
type Channel struct {
	cfg   Config
	log   *zap.Logger
	now   func() time.Time
	merge *merger // nil = sends are not merged
	// media downloads and uploads media files off the send workers.
	media *mediaPool
	// uploads: one media upload per file at a time in this process (the
	// fleet's is Media.Upload's lock).
	uploads flight
	// accounts are the WeCom accounts, each resolved once.
	accounts *accounts
}

// New returns the WeCom channel of cfg, which Config.Validate checked
// (dispatch.Config.Validate does).
func New(cfg Config) *Channel {
	c := &Channel{cfg: cfg, log: cfg.Logger, now: time.Now}
	c.accounts = newAccounts(&c.cfg)
	if cfg.MergeWindow > 0 {
		c.merge = newMerger(c, cfg.MergeWindow, cfg.MergeMax)
	}
	c.media = newMediaPool(c, cfg.MediaWorkers, cfg.MediaTenantWorkers, cfg.MediaMaxBytes, cfg.MediaTenantMaxBytes)
	return c
}

// Provider is the client's name.
func (c *Channel) Provider() string { return c.cfg.Client.Name() }

// Resolutions counts the accounts resolved: one per task (tests).
func (c *Channel) Resolutions() int64 { return c.accounts.resolved.Load() }

// job is a WeCom task with the channel's state of it (Task.State).
type job struct {
	*channel.Task
	// acct is the task's account, resolved once (accounts.resolve) and
	// handed down to everything that needs it.
	acct *account
	// groupRules: the provider limits of a message that waits to be
	// merged, taken once for its merged send.
	groupRules []ratelimit.Rule
	// media is the job's place in the media pool (mediaPool.reserve), and
	// mediaFile the file it holds there.
	media     mediaSlot
	mediaFile *mediaFile
}

// jobOf is t's state, made at its first run.
func jobOf(t *channel.Task) *job {
	j, ok := t.State.(*job)
	if !ok {
		j = &job{Task: t}
		t.State = j
	}
	return j
}

// Admit resolves the task's account (once, even when a Redis pause runs
// it again) and checks it is up; adds its limits and rate to rules, unless
// the task waits to be merged (its group takes them once, at its send);
// and, for a media message that may be handed off, takes its place in the
// media pool: before the claim, so a full pool is a snooze with nothing
// attempted and nothing recorded.
func (c *Channel) Admit(ctx context.Context, t *channel.Task, rules []ratelimit.Rule) ([]ratelimit.Rule, error) {
	j := jobOf(t)
	if j.acct == nil {
		a, err := c.accounts.resolve(t.Msg)
		if err != nil {
			return nil, err
		}
		j.acct = a
	}
	if err := c.accountUp(ctx, j.acct); err != nil {
		return nil, err
	}
	mergeable := c.mergeable(j)
	if !mergeable {
		more, err := c.noteRateAndRules(ctx, j.acct)
		if err != nil {
			return nil, fmt.Errorf("%w: adaptive rate: %w", channel.ErrRedis, err)
		}
		rules = append(rules, channel.ReserveForCodes(t.Level, more)...)
	}
	if t.Msg.Media != nil && c.cfg.Media != nil && t.Finish != nil {
		if err := c.media.reserve(j); err != nil {
			return nil, err
		}
	}
	if mergeable {
		j.groupRules = rules
		return nil, nil
	}
	return rules, nil
}

// Release gives back the task's place in the media pool, if the pool has
// not taken it.
func (c *Channel) Release(t *channel.Task) {
	if j, ok := t.State.(*job); ok {
		c.media.unreserve(j)
	}
}

// Holds is the room a notices' queue keeps for what is handed off: the
// media pool's jobs, and the merge buffer's members where the level is
// merged. Never the codes' queue: a code has no media and is never
// merged, so its queue keeps the plain prefetch and its deliveries no Hold.
func (c *Channel) Holds(l topology.Level) int {
	if l == topology.Code {
		return 0
	}
	n := c.media.capacity()
	if c.merge != nil && !channel.Urgent(l) { // urgent notices are never merged
		n += c.merge.max
	}
	return n
}

// Drain makes the merged sends go at once, and the media not yet
// downloading come back later (a snooze).
func (c *Channel) Drain() {
	if c.merge != nil {
		c.merge.drain()
	}
	c.media.drain()
}

// Send renders and sends a WeCom message (one call for every recipient of
// a batch) from the task's account, notes the recipients WeCom refused,
// and moves the account's adaptive rate. A media message goes to the media
// pool, and a message that may wait for others to the merge buffer: they
// are handed off (channel.ErrHandedOff), and finished there.
func (c *Channel) Send(ctx, call context.Context, t *channel.Task) (provider.Receipt, error) {
	pctx, span := telemetry.StartProviderCall(call, topology.WeCom, c.Provider())
	rcpt, err := c.send(ctx, pctx, jobOf(t))
	if errors.Is(err, channel.ErrHandedOff) {
		span.End() // its call is made by whoever holds it
		return rcpt, err
	}
	channel.EndCall(span, err)
	return rcpt, err
}

func (c *Channel) send(ctx, sctx context.Context, j *job) (provider.Receipt, error) {
	m := wecomMessage(j.Msg)
	if err := refuseNonUsers(j.Task, &m); err != nil {
		return provider.Receipt{}, err
	}
	if j.Msg.Media != nil {
		if j.media == mediaReserved {
			return provider.Receipt{}, c.media.submit(ctx, j, m)
		}
		// Not handed off (after a Redis pause): here, within SEND_TIMEOUT.
		if err := c.fetchAndUpload(sctx, j, &m); err != nil {
			return provider.Receipt{}, err
		}
	} else {
		w, err := c.cfg.Templates.RenderWeCom(j.Msg.Template, j.Msg.Locale, j.Vars)
		if err != nil {
			return provider.Receipt{}, fmt.Errorf("%w: %w", channel.ErrTemplate, err)
		}
		m.Format, m.Content = w.Format, w.Content
		m.Title, m.Description, m.URL = w.Title, w.Description, w.URL
	}
	return c.callOrMerge(ctx, sctx, j, m)
}

// callOrMerge makes m's call, or, when j may wait for others to share it,
// adds j to the merge buffer: handed off, or, where it cannot be, waiting
// here for the merged send.
func (c *Channel) callOrMerge(ctx, sctx context.Context, j *job, m provider.WeCom) (provider.Receipt, error) {
	if !c.mergeable(j) {
		rcpt, err := c.call(ctx, sctx, j.acct, m)
		j.Reject(rcpt.Rejected)
		return rcpt.Receipt, err
	}
	if finish := j.Finish; finish != nil {
		c.merge.add(ctx, j, m, func(o mergeOutcome) {
			j.Reject(o.rejected)
			finish(o.rcpt, o.err)
		})
		return provider.Receipt{}, channel.ErrHandedOff
	}
	out := make(chan mergeOutcome, 1)
	c.merge.add(ctx, j, m, func(o mergeOutcome) { out <- o })
	// Wait whatever ctx says: once gathered the send may happen, and its
	// outcome must be recorded for this member.
	o := <-out
	j.Reject(o.rejected)
	return o.rcpt, o.err
}

// call makes one WeCom call from a, counts it in the account's health
// and moves the account's adaptive rate.
func (c *Channel) call(ctx, sctx context.Context, a *account, m provider.WeCom) (provider.WeComReceipt, error) {
	var rcpt provider.WeComReceipt
	var err error
	if a.app != nil {
		rcpt, err = c.cfg.Client.SendApp(sctx, a.app, m)
		err = c.noteAccountSend(ctx, a, err)
	} else {
		rcpt, err = c.cfg.Client.SendRobot(sctx, a.robot, m)
	}
	if a.rate != nil {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		var aerr error
		switch {
		case err == nil:
			_, aerr = a.rate.Succeeded(actx)
		case errors.Is(err, provider.ErrThrottled):
			var r float64
			r, aerr = a.rate.Throttled(actx)
			c.log.Info("WeCom throttled: adaptive rate lowered", zap.String("account", a.rateKey), zap.Float64("per_second", r))
		}
		cancel()
		if aerr != nil {
			c.log.Warn("could not move the adaptive rate", zap.Error(aerr))
		}
	}
	return rcpt, err
}
