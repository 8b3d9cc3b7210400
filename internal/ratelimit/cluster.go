package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/rdb"
)

// On a Redis Cluster one script may only touch keys of one slot, and the
// limits of one request (a recipient, an IP, an API key, a global limit)
// live in different slots. Take then sends one take script per slot, all
// in one pipeline (go-redis sends each node its share in parallel): each
// checks and, when its limits admit, reserves. If any refuses, the
// reservations of the others are undone, so that a refused request leaves
// nothing behind; a request can only be refused, never over-admitted.

// slotGroup is the part of a request whose keys share a hash tag.
type slotGroup struct {
	tag   string
	keys  []string // per rule its log and counter, then the cooldown key when hasCD, then mark, then the suppression entry, then the guard's
	rules []int    // the script's 1-based rule positions in the whole request
	args  []any    // per rule: window count, then (length, limit, mode) triples
	hasCD bool
	mark  string // the reservation's mark when a window of the group is counted, or it has the guard
	guard bool   // the request's guard is here
	sup   bool   // the request's suppression entry is here
}

// groupBySlot splits what Take built (keys and the script's arguments)
// into slot groups, in the order their keys first appear. A group with a
// counted window, or with the guard (which counts), gets a mark of its
// own, in its slot.
func (l *Limiter) groupBySlot(p prepared, cooldownKey, id string) []*slotGroup {
	keys, args, nrules := p.keys, p.args, len(p.ruleIdx)
	var order []*slotGroup
	byTag := map[string]*slotGroup{}
	group := func(key string) *slotGroup {
		t := hashTag(key)
		g := byTag[t]
		if g == nil {
			g = &slotGroup{tag: t}
			byTag[t] = g
			order = append(order, g)
		}
		return g
	}
	a := 5
	for r := 1; r <= nrules; r++ {
		nw, _ := args[a].(int)
		g := group(keys[2*r-2])
		g.keys = append(g.keys, keys[2*r-2], keys[2*r-1])
		g.rules = append(g.rules, r)
		g.args = append(g.args, args[a:a+1+3*nw]...)
		for w := 0; w < nw; w++ {
			if m, _ := args[a+3+3*w].(int); m == 1 && g.mark == "" {
				g.mark = l.markKey(g.tag, id)
			}
		}
		a += 1 + 3*nw
	}
	if cooldownKey != "" {
		group(cooldownKey).hasCD = true
	}
	if p.supKey != "" {
		// A group of its own unless it shares a rule's tag (a code's
		// per-recipient rule): it writes nothing, so it needs no mark.
		group(p.supKey).sup = true
	}
	if len(p.guardKeys) > 0 {
		g := group(p.guardKeys[0])
		g.guard = true
		if g.mark == "" {
			g.mark = l.markKey(g.tag, id)
		}
	}
	for _, g := range order {
		if g.hasCD {
			g.keys = append(g.keys, cooldownKey)
		}
		if g.mark != "" {
			g.keys = append(g.keys, g.mark)
		}
		if g.sup {
			g.keys = append(g.keys, p.supKey)
		}
		if g.guard {
			g.keys = append(g.keys, p.guardKeys...)
		}
	}
	return order
}

func (l *Limiter) takeSpread(ctx context.Context, cc *redis.ClusterClient, req Request, res *Reservation, pr prepared) (*Reservation, error) {
	args, ruleIdx, winIdx := pr.args, pr.ruleIdx, pr.winIdx
	groups := l.groupBySlot(pr, res.CooldownKey, res.ID)
	for _, g := range groups {
		if g.mark != "" {
			res.Marks = append(res.Marks, g.mark)
		}
	}
	replies := make([][]any, len(groups))
	errs := make([]error, len(groups))
	// The Once entry has a slot of its own: its script (no rules, its
	// reservation as the writes) runs in the same pipeline as the groups.
	var (
		onceCmd   *redis.Cmd
		onceReply []any
		onceErr   error
	)
	err := rdb.Pipelined(ctx, cc, func(p redis.Pipeliner) (func() error, error) {
		if o := req.Once; o != nil {
			oargs := []any{o.Digest, o.IDs, res.ID, int64(0), 0, int64(0), args[4], 0, 0} // no rules, suppression check nor guard
			then := o.reserve(res.OnceKey, res.ID)
			oargs = append(oargs, len(then))
			for _, c := range then {
				oargs = append(oargs, len(c))
				oargs = append(oargs, c...)
			}
			onceCmd = takeOnceScript.EvalSha(ctx, p, []string{res.OnceKey, res.OnceKey + onceLeaseSuffix}, oargs...)
		}
		cmds := make([]*redis.Cmd, len(groups))
		for i, g := range groups {
			cd := any(int64(0))
			if g.hasCD {
				cd = args[1]
			}
			mark := any(int64(0))
			if g.mark != "" {
				mark = args[3]
			}
			gargs := append([]any{res.ID, cd, len(g.rules), mark, args[4]}, g.args...)
			if g.sup {
				gargs = append(gargs, pr.sup...)
			} else {
				gargs = append(gargs, 0)
			}
			if g.guard {
				gargs = append(gargs, pr.guard...)
			} else {
				gargs = append(gargs, 0)
			}
			gargs = append(gargs, 0) // no Then commands: they run once all admitted
			cmds[i] = takeScript.EvalSha(ctx, p, g.keys, gargs...)
		}
		return func() error {
			for i, c := range cmds {
				replies[i], errs[i] = c.Slice()
			}
			if onceCmd != nil {
				onceReply, onceErr = onceCmd.Slice()
				if onceErr != nil && rdb.IsNoScript(onceErr) {
					return onceErr
				}
			}
			for _, e := range errs {
				if e != nil && rdb.IsNoScript(e) {
					return e // rdb.Pipelined loads the script and sends again what got NOSCRIPT
				}
			}
			return nil
		}, nil
	}, func(ctx context.Context) error {
		if req.Once != nil {
			if err := takeOnceScript.Load(ctx, cc).Err(); err != nil {
				return err
			}
		}
		return takeScript.Load(ctx, cc).Err()
	})
	if err != nil && !rdb.IsNoScript(err) {
		return nil, fmt.Errorf("ratelimit: take: %w", err)
	}
	if req.Once != nil {
		// Another request holds the key: undo what the groups reserved
		// and answer with its entry. A reply that is neither an entry nor
		// an admission is a failure, which undoes the groups too.
		if oe := priorEntry(onceReply); oe != nil && onceErr == nil {
			if rerr := l.rollbackSpread(context.WithoutCancel(ctx), cc, res); rerr != nil {
				return nil, fmt.Errorf("ratelimit: take: %w", rerr)
			}
			return nil, oe
		}
		if onceErr == nil && (len(onceReply) != 2 || onceReply[0] != int64(0)) {
			onceErr = fmt.Errorf("unexpected reply %v to the idempotency entry", onceReply)
		}
	}
	// undoOnce gives the entry up again when the request is not admitted:
	// it forgets one this request created (its HSET added the fields), as
	// a refusal on one node writes nothing, and releases one it took over.
	undoOnce := func() error {
		if req.Once == nil || onceErr != nil {
			return nil //nolint:nilerr // an entry that failed to reserve holds nothing to undo; onceErr is reported on its own
		}
		how := "release"
		if replies, _ := onceReply[1].([]any); len(replies) > 0 && replies[0] != int64(0) {
			how = "forget"
		}
		return l.release(context.WithoutCancel(ctx), res.OnceKey, req.Once.IDs, how)
	}
	// The second run after NOSCRIPT runs every group again, also those
	// whose script had run and reserved: the script finds its own
	// reservation there and admits again without recording more, so such
	// a group counts once and is not refused by its own cooldown.
	var refused []int64
	var failed []error
	var suppressed *SuppressedError
	for i, g := range groups {
		if errs[i] != nil {
			failed = append(failed, errs[i])
			continue
		}
		if len(replies[i]) == 2 && replies[i][0] == int64(0) {
			continue
		}
		if se := suppressedReply(replies[i]); se != nil {
			suppressed = se
			continue
		}
		out, err := refusal(replies[i])
		if err != nil {
			failed = append(failed, err)
			continue
		}
		if out[1] > 0 { // the group's own rule position, back to the request's
			out[1] = int64(g.rules[out[1]-1])
		}
		if refused == nil || out[3] > refused[3] {
			refused = out
		}
	}
	if onceErr != nil {
		failed = append(failed, onceErr)
	}
	if refused != nil || suppressed != nil || len(failed) > 0 {
		// Undo whatever the admitting groups reserved; a refusing group
		// reserved nothing, and rollback of an absent member is a no-op.
		rerr := l.undoRefused(context.WithoutCancel(ctx), cc, res, undoOnce)
		if len(failed) > 0 {
			return nil, fmt.Errorf("ratelimit: take: %w", errors.Join(append(failed, rerr)...))
		}
		if suppressed != nil {
			// The recipient's suppression says more than any limit: it
			// lasts until it is removed.
			return nil, withLeftBehind(suppressed, req, res, rerr)
		}
		return nil, withLeftBehind(limitError(req, refused, ruleIdx, winIdx), req, res, rerr)
	}
	if len(req.Then) == 0 {
		return res, nil
	}
	// The request's own writes (a code, a status record): each slot's
	// commands in one MULTI, in order, the slots in parallel.
	res.Replies, err = thenBySlot(ctx, cc, req.Then)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("ratelimit: take: writes of the admitted request: %w", err),
			l.rollbackSpread(context.WithoutCancel(ctx), cc, res), undoOnce())
	}
	return res, nil
}

// undoRefused undoes what the admitting slots of a refused request
// reserved, and tries once more when that fails for a reason other than a
// timeout (a connection a failover closed, a slot that moved): a cooldown
// left behind refuses the recipient's next requests until it expires
// (issue 38). After a timeout the node is not answering, and the caller
// should not wait for it twice. Both steps are idempotent.
func (l *Limiter) undoRefused(ctx context.Context, cc *redis.ClusterClient, res *Reservation, undoOnce func() error) error {
	err := errors.Join(l.rollbackSpread(ctx, cc, res), undoOnce())
	if err != nil && !timedOut(err) {
		err = errors.Join(l.rollbackSpread(ctx, cc, res), undoOnce())
	}
	return err
}

// timedOut says whether err is a network wait that ran out.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// withLeftBehind attaches to the refusal err (a LimitError, or the fraud
// guard's GuardError) what the failed undo of its request (undoErr) may
// have left: the answer is still the refusal, which is true, and the
// caller logs the rest.
func withLeftBehind(err error, req Request, res *Reservation, undoErr error) error {
	if undoErr == nil {
		return err
	}
	var le *LimitError
	var ge *GuardError
	var se *SuppressedError
	switch {
	case errors.As(err, &le):
		le.LeftBehind = leftBehind(req, res, undoErr)
	case errors.As(err, &ge):
		ge.LeftBehind = leftBehind(req, res, undoErr)
	case errors.As(err, &se):
		se.LeftBehind = leftBehind(req, res, undoErr)
	}
	return err
}

// leftBehind is what the failed undo of req's reservation may have left.
func leftBehind(req Request, res *Reservation, undoErr error) *LeftBehind {
	lb := &LeftBehind{Reservation: res.ID, Err: undoErr}
	for _, r := range req.Rules {
		longest := time.Duration(0)
		for _, w := range r.Windows {
			if w.Limit > 0 {
				longest = max(longest, w.Length)
			}
		}
		if longest > 0 {
			lb.Rules = append(lb.Rules, r.Name)
			lb.For = max(lb.For, longest)
		}
	}
	if cd := req.Cooldown; cd != nil {
		lb.Rules = append(lb.Rules, cd.Name)
		lb.For = max(lb.For, cd.For)
	}
	if req.Once != nil {
		lb.Rules = append(lb.Rules, "idempotency entry")
	}
	return lb
}

// thenBySlot runs cmds (each "NAME key ...") grouped by their key's hash
// tag, each group in one MULTI, and returns their replies in order.
func thenBySlot(ctx context.Context, cc *redis.ClusterClient, cmds []rdb.Command) ([]any, error) {
	byTag := map[string][]int{}
	var order []string
	for i, c := range cmds {
		if len(c) < 2 {
			return nil, fmt.Errorf("command %v has no key", c)
		}
		key, _ := c[1].(string)
		t := hashTag(key)
		if byTag[t] == nil {
			order = append(order, t)
		}
		byTag[t] = append(byTag[t], i)
	}
	out := make([]*redis.Cmd, len(cmds))
	errs := make([]error, len(order))
	var wg sync.WaitGroup
	for gi, t := range order {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[gi] = cc.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for _, i := range byTag[t] {
					out[i] = cmds[i].Do(ctx, p)
				}
				return nil
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	replies := make([]any, len(cmds))
	for i, c := range out {
		replies[i] = c.Val()
	}
	return replies, nil
}

// rollbackSpread is Rollback on a cluster: one rollback script per slot,
// in one pipeline.
func (l *Limiter) rollbackSpread(ctx context.Context, cc *redis.ClusterClient, res *Reservation) error {
	calls := rollbackCallsBySlot(res)
	err := rdb.Pipelined(ctx, cc, func(p redis.Pipeliner) (func() error, error) {
		cmds := make([]*redis.Cmd, len(calls))
		for i, c := range calls {
			cmds[i] = rollbackScript.EvalSha(ctx, p, c.keys, c.args...)
		}
		return func() error {
			var errs []error
			for _, c := range cmds {
				errs = append(errs, c.Err())
			}
			return errors.Join(errs...)
		}, nil
	}, func(ctx context.Context) error { return rollbackScript.Load(ctx, cc).Err() })
	if err != nil {
		return fmt.Errorf("ratelimit: rollback: %w", err)
	}
	return nil
}

// rollbackCallsBySlot are the rollback script's calls that undo res on a
// Redis Cluster: one per slot its keys are in.
func rollbackCallsBySlot(res *Reservation) []scriptCall {
	type slot struct {
		logs, counters []string
		cd, mark       string
	}
	groups := map[string]*slot{}
	var order []string
	get := func(k string) *slot {
		t := hashTag(k)
		if groups[t] == nil {
			order = append(order, t)
			groups[t] = &slot{}
		}
		return groups[t]
	}
	for _, k := range res.Keys {
		g := get(k)
		g.logs = append(g.logs, k)
	}
	if res.CooldownKey != "" {
		get(res.CooldownKey).cd = res.CooldownKey
	}
	for _, k := range res.Marks {
		get(k).mark = k
	}
	for _, k := range res.Counters {
		if g := groups[hashTag(k)]; g != nil && g.mark != "" {
			g.counters = append(g.counters, k)
		}
	}
	calls := make([]scriptCall, len(order))
	for i, t := range order {
		g := groups[t]
		keys := append([]string(nil), g.logs...)
		hasCD := "0"
		if g.cd != "" {
			keys = append(keys, g.cd) // after the logs, as the script wants
			hasCD = "1"
		}
		nc := 0
		if g.mark != "" && len(g.counters) > 0 {
			keys = append(append(keys, g.counters...), g.mark)
			nc = len(g.counters)
		}
		calls[i] = scriptCall{keys: keys, args: []any{res.ID, hasCD, nc}}
	}
	return calls
}

// hashTag returns what Redis Cluster hashes for key: the part between the
// first '{' and the next '}' when it is not empty, else the whole key. Keys
// with the same hash tag are in the same slot.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}
