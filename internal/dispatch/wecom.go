package dispatch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// Adaptive rate bounds of WeCom accounts (sends per second). An
// application starts at 20 a second and may climb to 50; a robot never
// goes above its documented 20 a minute.
var (
	DefaultAppRate   = ratelimit.Bounds{Start: 20, Min: 0.5, Max: 50, Decrease: 0.5, Increase: 0.5}
	DefaultRobotRate = ratelimit.Bounds{Start: wecom.RobotPerMinute / 60.0, Min: 1 / 60.0, Max: wecom.RobotPerMinute / 60.0, Decrease: 0.5, Increase: 0.01}
)

// wecomMessage is what the provider is asked to send for msg (without the
// rendered content).
func wecomMessage(msg *envelope.Message) provider.WeCom {
	// A message from before tenants has none: it was the default tenant's.
	m := provider.WeCom{Mentions: msg.Mentions, TaskID: msg.TaskID, Tenant: cmp.Or(msg.Tenant, apikey.DefaultTenant), Account: msg.Account}
	switch {
	case msg.Robot:
		m.Robot = msg.Recipient
	case len(msg.Recipients) > 0:
		for _, r := range msg.Recipients {
			m.ToUsers = append(m.ToUsers, r.Recipient)
		}
	default:
		m.ToUsers = []string{msg.Recipient}
	}
	return m
}

// sendWeCom renders and sends a WeCom message (one call for every
// recipient of a batch) from the job's account, notes the recipients WeCom
// refused, and moves the account's adaptive rate. A media message goes to
// the media pool, and a message that may wait for others to the merge
// buffer: they are handed on (errHandedOn), and finished there.
func (d *Dispatcher) sendWeCom(ctx, sctx context.Context, j *job, vars map[string]string) (provider.Receipt, error) {
	if d.cfg.WeCom == nil {
		return provider.Receipt{}, fmt.Errorf("%w: this consumer has no WeCom provider", ErrTemplate)
	}
	m := wecomMessage(j.msg)
	if err := refuseNonUsers(j, &m); err != nil {
		return provider.Receipt{}, err
	}
	if j.msg.Media != nil {
		if j.media == mediaReserved {
			return provider.Receipt{}, d.media.submit(ctx, j, m)
		}
		// Not handed on (after a Redis pause): here, within SEND_TIMEOUT.
		if err := d.wecomMedia(sctx, j, &m); err != nil {
			return provider.Receipt{}, err
		}
	} else {
		w, err := d.cfg.Templates.RenderWeCom(j.msg.Template, j.msg.Locale, vars)
		if err != nil {
			return provider.Receipt{}, fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		m.Format, m.Content = w.Format, w.Content
		m.Title, m.Description, m.URL = w.Title, w.Description, w.URL
	}
	return d.callOrMerge(ctx, sctx, j, m)
}

// refuseNonUsers is the consumer's second look at WeCom recipients
// (issue 43), for messages queued before the API refused "@all" and "a|b"
// lists, or published by anything but the API: WeCom never sees them. A
// single message to one fails, permanently, before any merge (never a
// merged call); a batch's are failed each, as recipients WeCom refused are,
// and the rest go out.
func refuseNonUsers(j *job, m *provider.WeCom) error {
	if len(m.ToUsers) <= 1 {
		return wecom.CheckUsers(m.ToUsers)
	}
	users := m.ToUsers[:0:0]
	for _, u := range m.ToUsers {
		if err := wecom.CheckUsers([]string{u}); err != nil {
			j.reject(map[string]string{u: err.Error()})
			continue
		}
		users = append(users, u)
	}
	if len(users) == 0 {
		return wecom.CheckUsers(m.ToUsers)
	}
	m.ToUsers = users
	return nil
}

// callOrMerge makes m's call, or, when j may wait for others to share it,
// adds j to the merge buffer: handed on, or, where it cannot be, waiting
// here for the merged send.
func (d *Dispatcher) callOrMerge(ctx, sctx context.Context, j *job, m provider.WeCom) (provider.Receipt, error) {
	if !d.mergeable(j) {
		rcpt, err := d.callWeCom(ctx, sctx, j.acct, m)
		j.reject(rcpt.Rejected)
		return rcpt.Receipt, err
	}
	if d.handsOn(j) {
		d.merge.add(ctx, j, m, func(o mergeOutcome) {
			j.reject(o.rejected)
			d.finish(ctx, j, o.rcpt, o.err)
		})
		return provider.Receipt{}, errHandedOn
	}
	out := make(chan mergeOutcome, 1)
	d.merge.add(ctx, j, m, func(o mergeOutcome) { out <- o })
	// Wait whatever ctx says: once gathered the send may happen, and its
	// outcome must be recorded for this member.
	o := <-out
	j.reject(o.rejected)
	return o.rcpt, o.err
}

// callWeCom makes one WeCom call from a, counts it in the account's health
// and moves the account's adaptive rate.
func (d *Dispatcher) callWeCom(ctx, sctx context.Context, a *account, m provider.WeCom) (provider.WeComReceipt, error) {
	var rcpt provider.WeComReceipt
	var err error
	if a.app != nil {
		rcpt, err = d.cfg.WeCom.SendApp(sctx, a.app, m)
		err = d.noteAccountSend(ctx, a, err)
	} else {
		rcpt, err = d.cfg.WeCom.SendRobot(sctx, a.robot, m)
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
			d.log.Info("WeCom throttled: adaptive rate lowered", zap.String("account", a.rateKey), zap.Float64("per_second", r))
		}
		cancel()
		if aerr != nil {
			d.log.Warn("could not move the adaptive rate", zap.Error(aerr))
		}
	}
	return rcpt, err
}
