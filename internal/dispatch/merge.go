package dispatch

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// mergeHold bounds how many windows a merged send may wait for more
// members while they keep arriving: a steady stream still goes out.
const mergeHold = 10

// merger gathers single WeCom application messages with the same account,
// type and rendered content that arrive within the merge window of each
// other, and sends them as one message/send (seed 004's
// BatchSendingOptimizer): up to wecom.MaxUsers users a call. Each member
// keeps its delivery, claim, status record and callback; only the call is
// shared.
type merger struct {
	d      *Dispatcher
	window time.Duration

	mu     sync.Mutex
	groups map[[32]byte]*group
}

// group is one merged send being gathered. Its goroutine, started by the
// first member, owns it: it sends once the window passed without a new
// member (or the hold ran out, or it is full) and hands every member its
// outcome.
type group struct {
	key   [32]byte
	acct  *account
	m     provider.WeCom // without users
	rules []ratelimit.Rule
	ctx   context.Context // the first member's, without its cancel

	first, last time.Time
	members     []*member
	full        chan struct{}
}

type member struct {
	user string
	out  chan mergeOutcome
}

type mergeOutcome struct {
	rejected map[string]string
	rcpt     provider.Receipt
	err      error
}

func newMerger(d *Dispatcher, window time.Duration) *merger {
	return &merger{d: d, window: window, groups: map[[32]byte]*group{}}
}

// mergeable reports whether j may wait for others to share its send: a
// single WeCom application message that is not high (codes and urgent
// notices are never held).
func (d *Dispatcher) mergeable(j *job) bool {
	return d.merge != nil && j.channel == topology.WeCom && j.msg != nil && !j.msg.Robot && len(j.msg.Recipients) == 0 &&
		j.msg.Kind == envelope.Notification && j.level != topology.High
}

// join adds m's one user to the group of its account, type and content,
// and waits for the group's send. rules are taken once for the group.
func (mg *merger) join(ctx context.Context, a *account, m provider.WeCom, rules []ratelimit.Rule) mergeOutcome {
	key := sha256.Sum256([]byte(a.name + "\x00" + m.Format + "\x00" + m.Content + "\x00" + m.MediaID))
	me := &member{user: m.ToUsers[0], out: make(chan mergeOutcome, 1)}
	now := time.Now()
	mg.mu.Lock()
	g, ok := mg.groups[key]
	if !ok {
		g = &group{key: key, acct: a, m: m, rules: rules, ctx: context.WithoutCancel(ctx), first: now, full: make(chan struct{})}
		g.m.ToUsers, g.m.TaskID = nil, ""
		mg.groups[key] = g
		go mg.run(g)
	}
	g.last = now
	g.members = append(g.members, me)
	if len(g.members) >= wecom.MaxUsers {
		// Full: it goes now, and the next member starts a new group.
		delete(mg.groups, key)
		close(g.full)
	}
	mg.mu.Unlock()
	// Wait whatever ctx says: once gathered the send may happen, and its
	// outcome must be recorded for this member.
	return <-me.out
}

func (mg *merger) run(g *group) {
	for {
		mg.mu.Lock()
		now := time.Now()
		wait := min(g.last.Add(mg.window).Sub(now), g.first.Add(mergeHold*mg.window).Sub(now))
		mg.mu.Unlock()
		if wait <= 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-g.full:
			t.Stop()
		case <-t.C:
			continue
		}
		break
	}
	mg.mu.Lock()
	if mg.groups[g.key] == g {
		delete(mg.groups, g.key)
	}
	members := g.members
	mg.mu.Unlock()
	out := mg.send(g, members)
	for _, me := range members {
		o := out
		if why, ok := out.rejected[me.user]; ok {
			o.rejected = map[string]string{me.user: why}
		} else {
			o.rejected = nil
		}
		me.out <- o
	}
}

// send takes the group's provider limits once and makes the one call.
func (mg *merger) send(g *group, members []*member) mergeOutcome {
	d := mg.d
	m := g.m
	for _, me := range members {
		// The same user twice with the same content: WeCom's duplicate
		// check would deliver it once anyway; both members share the call.
		if !slices.Contains(m.ToUsers, me.user) {
			m.ToUsers = append(m.ToUsers, me.user)
		}
	}
	if len(g.rules) > 0 {
		if _, err := d.cfg.Limiter.Take(g.ctx, ratelimit.Request{Rules: g.rules}); err != nil {
			var le *ratelimit.LimitError
			if errors.As(err, &le) {
				return mergeOutcome{err: Snooze(le.RetryAfter, "provider "+wecom.Name+" "+le.Error()+" (merged send)")}
			}
			return mergeOutcome{err: fmt.Errorf("%w: provider limit: %w", errRedis, err)}
		}
	}
	sctx, cancel := context.WithTimeout(g.ctx, d.cfg.SendTimeout)
	defer cancel()
	rcpt, err := d.callWeCom(g.ctx, sctx, g.acct, m)
	d.cfg.Metrics.MergedSends.Inc()
	d.cfg.Metrics.MergedUsers.Observe(float64(len(m.ToUsers)))
	return mergeOutcome{rcpt: rcpt.Receipt, rejected: rcpt.Rejected, err: err}
}
