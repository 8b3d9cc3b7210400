package dispatch

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/status"

	"github.com/msgpulse/msgpulse/internal/broker"
)

// ClassAccountDown labels the retries of messages waiting for an account
// whose credentials WeCom refused.
const ClassAccountDown = "account_down"

// accountUp returns ErrAccountDown when msg's WeCom application account is
// marked down: its message waits without asking WeCom again, so a refused
// secret costs no call per message and slows no other account.
func (d *Dispatcher) accountUp(ctx context.Context, msg *envelope.Message) error {
	if msg.Robot || d.cfg.Accounts == nil {
		return nil
	}
	name := wecom.AccountName(wecomMessage(msg))
	why, err := d.cfg.Accounts.Down(ctx, name)
	if err != nil {
		return fmt.Errorf("%w: %w", errRedis, err)
	}
	if why != "" {
		return fmt.Errorf("%w: %s: %s", ErrAccountDown, name, why)
	}
	return nil
}

// accountRules are an application account's limits per second, minute,
// hour and day, and its send rate: the adaptive rate times its health.
func (d *Dispatcher) accountRules(ctx context.Context, m provider.WeCom) ([]ratelimit.Rule, error) {
	name := wecom.AccountName(m)
	var rules []ratelimit.Rule
	if l, ok := d.cfg.WeComLimits[name]; ok {
		var ws []ratelimit.Window
		for _, w := range []struct {
			n int
			d time.Duration
		}{{l.PerSecond, time.Second}, {l.PerMinute, time.Minute}, {l.PerHour, time.Hour}, {l.PerDay, 24 * time.Hour}} {
			if w.n > 0 {
				ws = append(ws, ratelimit.Window{Length: w.d, Limit: w.n})
			}
		}
		if len(ws) > 0 {
			rules = append(rules, ratelimit.Rule{Name: "WeCom account " + name + " (WECOM_ACCOUNT_LIMITS)", Key: "wecom-account:" + name, Windows: ws})
		}
	}
	if d.cfg.Adaptive == nil {
		return rules, nil
	}
	b := d.bounds(m)
	account := d.cfg.WeCom.Account(m)
	rate, err := d.cfg.Adaptive.Rate(ctx, account, b)
	if err != nil {
		return nil, err
	}
	health := 1.0
	if d.cfg.Accounts != nil {
		if health, err = d.cfg.Accounts.Health(ctx, name); err != nil {
			return nil, err
		}
	}
	// Never below the floor: an account whose sends all failed still
	// sends now and then, or it could never show it recovered.
	r := max(rate*health, b.Min)
	d.cfg.Adaptive.Gauge().WithLabelValues(account).Set(rate)
	d.cfg.Metrics.AccountRate.WithLabelValues(name).Set(r)
	d.cfg.Metrics.AccountHealth.WithLabelValues(name).Set(health)
	if d.cfg.Accounts != nil && d.noteRateDue(name) {
		// For /api/queues/stats; at most once a second per account.
		if err := d.cfg.Accounts.NoteRate(ctx, name, r); err != nil {
			d.log.Debug("could not note the account's rate", zap.String("account", name), zap.Error(err))
		}
	}
	return append(rules, ratelimit.RateRule("send rate of WeCom account "+name+" (adaptive × health)", "adaptive:"+account, r)), nil
}

// noteAccountSend counts a send in the account's health and marks the
// account down when WeCom refused its credentials; it returns the error
// the pipeline goes on with.
func (d *Dispatcher) noteAccountSend(ctx context.Context, m provider.WeCom, err error) error {
	if d.cfg.Accounts == nil {
		return err
	}
	name := wecom.AccountName(m)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	refused := wecom.IsCredentialsRefused(err)
	// A user WeCom does not know says nothing about the account; a
	// throttle, a vendor failure or refused credentials do.
	counts := err == nil || refused || errors.Is(err, provider.ErrThrottled) || errors.Is(err, provider.ErrTransient)
	if counts {
		if rerr := d.cfg.Accounts.Record(sctx, name, err == nil); rerr != nil {
			d.log.Warn("could not count a send in the account's health", zap.String("account", name), zap.Error(rerr))
		}
	}
	if !refused {
		return err
	}
	if merr := d.cfg.Accounts.MarkDown(sctx, name, err.Error()); merr != nil {
		d.log.Warn("could not mark the WeCom account down", zap.String("account", name), zap.Error(merr))
	}
	d.log.Error("WeCom refused the account's credentials: its messages wait until it is fixed or their deadline passes", zap.String("account", name), zap.Error(err))
	return fmt.Errorf("%w: %s: %w", ErrAccountDown, name, err)
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

// noteRateDue reports whether account's rate was last noted a second ago
// or more, and if so counts now as the last time.
func (d *Dispatcher) noteRateDue(account string) bool {
	now := d.now()
	last, loaded := d.rateNoted.Load(account)
	if loaded && now.Sub(last.(time.Time)) < time.Second {
		return false
	}
	d.rateNoted.Store(account, now)
	return true
}
