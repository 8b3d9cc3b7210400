package wecom

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/msgpulse/msgpulse/internal/dispatch/channel"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	wecomapi "github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// mergeHold bounds how many windows a merged send may wait for more
// members while they keep arriving: a steady stream still goes out.
const mergeHold = 10

// merger gathers single WeCom application messages with the same account,
// type and rendered content that arrive within the merge window of each
// other, and sends them as one message/send (seed 004's
// BatchSendingOptimizer): up to wecomapi.MaxUsers users a call. Each member
// keeps its delivery, claim, status record and callback; only the call is
// shared.
//
// Members wait in the merge buffer, not in workers (issue 37): their
// handlers hand them off (channel.ErrHandedOff) and return, and the group's send
// finishes each. So a merge gathers as many messages as arrive in its
// window, up to max in the buffer at once, whatever the worker count; the
// normal and low WeCom queues may hold that many deliveries more than
// their workers' (Pools). A member costs the buffer its delivery
// (the body, up to the API's BODY_LIMIT; a WeCom notice is about 1 KB)
// and a few hundred bytes of state.
type merger struct {
	c      *Channel
	window time.Duration
	max    int

	mu       sync.Mutex
	groups   map[[32]byte]*group
	held     int  // members in groups not yet sent
	draining bool // Drain: every group goes at once
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
	sent        bool // it left the buffer, and full was closed
}

type member struct {
	user string
	done func(mergeOutcome)
}

type mergeOutcome struct {
	rejected map[string]string
	rcpt     provider.Receipt
	err      error
}

func newMerger(c *Channel, window time.Duration, maxHeld int) *merger {
	return &merger{c: c, window: window, max: maxHeld, groups: map[[32]byte]*group{}}
}

// mergeable reports whether j may wait for others to share its send: a
// single application message that is not high (codes and urgent notices
// are never held).
func (c *Channel) mergeable(j *job) bool {
	return c.merge != nil && j.Msg != nil && !j.Msg.Robot && len(j.Msg.Recipients) == 0 &&
		j.Msg.Kind == envelope.Notification && !channel.Urgent(j.Level) && j.acct != nil && j.acct.app != nil
}

// add puts j's one user (m) in the group of its account, type and content;
// done gets the group's outcome, in a goroutine of its own, once it is
// sent. The group's limits are j's (groupRules) and its account's rate,
// taken once.
func (mg *merger) add(ctx context.Context, j *job, m provider.WeCom, done func(mergeOutcome)) {
	key := sha256.Sum256([]byte(j.acct.name + "\x00" + m.Format + "\x00" + m.Content + "\x00" + m.MediaID + "\x00" + m.Title + "\x00" + m.Description + "\x00" + m.URL))
	now := time.Now()
	mg.mu.Lock()
	defer mg.mu.Unlock()
	g, ok := mg.groups[key]
	if !ok {
		g = &group{key: key, acct: j.acct, m: m, rules: j.groupRules, ctx: context.WithoutCancel(ctx), first: now, full: make(chan struct{})}
		g.m.ToUsers, g.m.TaskID = nil, ""
		mg.groups[key] = g
		go mg.run(g)
	}
	g.last = now
	g.members = append(g.members, &member{user: m.ToUsers[0], done: done})
	mg.held++
	switch {
	case mg.held >= mg.max || mg.draining:
		// The buffer is full: every group goes now, as large as it got,
		// and gathering starts again. (Sending only the newcomer's would
		// keep the buffer full and send groups of one.)
		for _, g := range mg.groups {
			mg.sendNowLocked(g)
		}
	case len(g.members) >= wecomapi.MaxUsers:
		// Full (WeCom's 1,000 users): the next member starts a new group.
		mg.sendNowLocked(g)
	}
}

// sendNowLocked ends g's gathering: it leaves the buffer, and its
// goroutine sends it.
func (mg *merger) sendNowLocked(g *group) {
	if g.sent {
		return
	}
	g.sent = true
	delete(mg.groups, g.key)
	mg.held -= len(g.members)
	close(g.full)
}

// drain sends every group now, and every later one at once.
func (mg *merger) drain() {
	mg.mu.Lock()
	defer mg.mu.Unlock()
	mg.draining = true
	for _, g := range mg.groups {
		mg.sendNowLocked(g)
	}
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
	mg.sendNowLocked(g)
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
		// Each member finishes on its own (its sent mark, status and
		// settle): the burst batches their Redis work.
		go me.done(o)
	}
}

// send takes the group's provider limits once, its account's rate
// included (read now, once for the group), and makes the one call. A
// Redis that cannot answer gives every member channel.ErrRedis, as it would have
// before its claim: the claim is given back and the message runs again.
func (mg *merger) send(g *group, members []*member) mergeOutcome {
	c := mg.c
	m := g.m
	for _, me := range members {
		// The same user twice with the same content: WeCom's duplicate
		// check would deliver it once anyway; both members share the call.
		if !slices.Contains(m.ToUsers, me.user) {
			m.ToUsers = append(m.ToUsers, me.user)
		}
	}
	acctRules, err := c.noteRateAndRules(g.ctx, g.acct)
	if err != nil {
		return mergeOutcome{err: fmt.Errorf("%w: adaptive rate: %w", channel.ErrRedis, err)}
	}
	// Merged members are never codes: the account's rate keeps its last
	// tokens for them, as every other provider limit of theirs does.
	rules := append(slices.Clip(g.rules), channel.ReserveForCodes(topology.Normal, acctRules)...)
	if len(rules) > 0 {
		if _, err := c.cfg.Limiter.Take(g.ctx, ratelimit.Request{Rules: rules}); err != nil {
			var le *ratelimit.LimitError
			if errors.As(err, &le) {
				return mergeOutcome{err: channel.Snooze(le.RetryAfter, "provider "+wecomapi.Name+" "+le.Error()+" (merged send)")}
			}
			return mergeOutcome{err: fmt.Errorf("%w: provider limit: %w", channel.ErrRedis, err)}
		}
	}
	sctx, cancel := context.WithTimeout(g.ctx, c.cfg.SendTimeout)
	defer cancel()
	rcpt, err := c.call(g.ctx, sctx, g.acct, m)
	c.cfg.MergedSends.Inc()
	c.cfg.MergedUsers.Observe(float64(len(m.ToUsers)))
	return mergeOutcome{rcpt: rcpt.Receipt, rejected: rcpt.Rejected, err: err}
}
