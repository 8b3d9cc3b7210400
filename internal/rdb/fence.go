package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotDurable means a fence round did not see its write acknowledged by
// as many replicas as it asked for within FenceConfig.Timeout: the writes
// it covers are on the master only, and a failover may discard them.
var ErrNotDurable = errors.New("rdb: Redis writes not acknowledged by the replicas")

// ErrFenceClosed is a Wait on a fence that was closed.
var ErrFenceClosed = errors.New("rdb: fence closed")

// DefaultWaitTimeout is REDIS_WAIT_TIMEOUT's default: half the API's
// REDIS_TIMEOUT, so that a round that times out still leaves the reply
// time to come back before the client's read timeout.
const DefaultWaitTimeout = 250 * time.Millisecond

// fenceKeyTTL is how long a fence key outlives its last round. The value
// means nothing; the key exists only so that the round has a write of its
// own to wait for.
const fenceKeyTTL = 10 * time.Second

// FenceConfig configures a Fence.
type FenceConfig struct {
	// Replicas is how many replicas must acknowledge (REDIS_WAIT_REPLICAS);
	// 0 turns the fence off: Wait returns at once and sends nothing.
	Replicas int
	// Timeout is WAIT's timeout (REDIS_WAIT_TIMEOUT). It must stay below
	// the client's read timeout (REDIS_TIMEOUT): WAIT blocks for all of it
	// when the replicas do not answer.
	Timeout time.Duration
	// Prefix starts the fence's own keys (REDIS_PREFIX).
	Prefix string
}

// Validate fills defaults and reports the first invalid setting.
func (c *FenceConfig) Validate() error {
	c.Timeout = cmp.Or(c.Timeout, DefaultWaitTimeout)
	if c.Replicas < 0 {
		return fmt.Errorf("rdb: fence: Replicas %d: must not be negative", c.Replicas)
	}
	if c.Timeout < time.Millisecond {
		return fmt.Errorf("rdb: fence: Timeout %s: must be at least 1ms (WAIT counts milliseconds; 0 would block forever)", c.Timeout)
	}
	return nil
}

// Fence makes Redis writes durable before anyone is told they happened: see
// the package documentation for why and how. It is safe for
// concurrent use; a nil *Fence, or one with Replicas 0, waits for nothing.
type Fence struct {
	cfg     FenceConfig
	client  redis.UniversalClient // the plain client, never auto-pipelined
	cluster *redis.ClusterClient  // non-nil on a Redis Cluster

	ctx    context.Context // ends on Close: stops the rounds in flight
	cancel context.CancelFunc
	wg     sync.WaitGroup // the round runners

	mu     sync.Mutex
	closed bool
	groups map[string]*fenceGroup // by master address; "" off a cluster
}

// fenceGroup is the callers of one master: they share its rounds.
type fenceGroup struct {
	node fenceNode // the master (cluster) or the client itself
	// next is the round that has not started yet, which new callers join;
	// nil when none is waiting.
	next    *fenceRound
	running bool // a runner goroutine serves the group
	// connected is how many replicas the master had online at the last
	// ROLE; -1 before the first.
	connected int
}

// fenceNode is what a round needs of a master's client.
type fenceNode interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
	Pipeline() redis.Pipeliner
}

// fenceRound is one INCR-and-WAIT, for every caller that joined it.
type fenceRound struct {
	key     string // a caller's key, whose hash tag the fence key takes
	callers []*fenceCaller
	done    chan struct{}
	err     error
}

// fenceCaller is one WaitWritten call's part of a round: the keys it wrote
// on the round's master, which the round checks are there (EXISTS, on the
// round's own connection). WAIT covers the writes of the server it runs
// on: a write that went to another one (the old master, on a connection
// the client had not yet moved when it followed a failover) is not
// covered, and its key is missing here.
type fenceCaller struct {
	keys    []string
	missing int // keys not on the round's master; set before done closes
}

// NewFence returns a fence for c, which may be auto-pipelined (the fence
// uses the client under it: WAIT on the pipeliner's shared connection
// would hold every other caller's command behind it).
func NewFence(c redis.UniversalClient, cfg FenceConfig) (*Fence, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if a, ok := c.(*autoPipelined); ok {
		c = a.base
	}
	ctx, cancel := context.WithCancel(context.Background())
	f := &Fence{cfg: cfg, client: c, ctx: ctx, cancel: cancel, groups: map[string]*fenceGroup{}}
	f.cluster, _ = c.(*redis.ClusterClient)
	return f, nil
}

// Replicas is how many replicas a round asks for at most (0: off).
func (f *Fence) Replicas() int {
	if f == nil {
		return 0
	}
	return f.cfg.Replicas
}

// Close fails the rounds not yet started, ends those in flight and waits
// for the runners. It does not close the client.
func (f *Fence) Close() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel()
	f.wg.Wait()
}

// Wait returns once every write this process had answered on the masters
// of keys before the call is acknowledged by the replicas (see the package
// doc), or an error wrapping ErrNotDurable (too few acknowledged within the
// timeout) or Redis's own (NOREPLICAS, READONLY, a dead connection). keys
// name the keys written, or any key of the same hash tag: on a Redis
// Cluster each of their masters is fenced, at once.
//
// It joins the next round of each master that starts after the call, never
// one in flight: a round in flight may have sent its write before the
// caller's writes were answered. So a call takes up to two rounds, each
// bounded by the timeout plus a round trip. ctx ending returns ctx's error
// at once; the round goes on for the others.
func (f *Fence) Wait(ctx context.Context, keys ...string) error {
	return f.wait(ctx, keys, false)
}

// WaitWritten is Wait for keys the caller has just written (created or
// set, not deleted): the round also checks that each of them is on the
// master it ran on, and fails the caller (ErrNotDurable) when one is not,
// which is a write that went to another server than the one the fence
// reached, during a failover.
func (f *Fence) WaitWritten(ctx context.Context, keys ...string) error {
	return f.wait(ctx, keys, true)
}

func (f *Fence) wait(ctx context.Context, keys []string, check bool) error {
	if f == nil || f.cfg.Replicas == 0 || len(keys) == 0 {
		return nil
	}
	rounds, callers, err := f.join(ctx, keys, check)
	if err != nil {
		return err
	}
	var errs []error
	for i, r := range rounds {
		select {
		case <-r.done:
			switch {
			case r.err != nil:
				errs = append(errs, r.err)
			case callers[i] != nil && callers[i].missing > 0:
				errs = append(errs, fmt.Errorf("%w: %d of %d keys written are not on the master the fence reached (a failover under way?)", ErrNotDurable, callers[i].missing, len(callers[i].keys)))
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return errors.Join(errs...)
}

// join puts the caller in the next round of each master of keys.
func (f *Fence) join(ctx context.Context, keys []string, check bool) ([]*fenceRound, []*fenceCaller, error) {
	type target struct {
		addr string
		node fenceNode
		key  string
		keys []string // the caller's keys on this master
	}
	var targets []*target
	if f.cluster == nil {
		targets = []*target{{node: f.client, key: keys[0], keys: keys}}
	} else {
		byAddr := map[string]*target{}
		for _, k := range keys {
			node, err := f.cluster.MasterForKey(ctx, k)
			if err != nil {
				return nil, nil, fmt.Errorf("rdb: fence: master of a key: %w", err)
			}
			addr := node.Options().Addr
			if t := byAddr[addr]; t != nil {
				t.keys = append(t.keys, k)
				continue
			}
			t := &target{addr: addr, node: node, key: k, keys: []string{k}}
			byAddr[addr] = t
			targets = append(targets, t)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil, nil, ErrFenceClosed
	}
	rounds := make([]*fenceRound, len(targets))
	callers := make([]*fenceCaller, len(targets))
	for i, t := range targets {
		g := f.groups[t.addr]
		if g == nil {
			g = &fenceGroup{connected: -1}
			f.groups[t.addr] = g
		}
		g.node = t.node // the cluster client's node for addr: the same one, or its replacement
		if g.next == nil {
			g.next = &fenceRound{key: t.key, done: make(chan struct{})}
		}
		rounds[i] = g.next
		if check {
			callers[i] = &fenceCaller{keys: t.keys}
			g.next.callers = append(g.next.callers, callers[i])
		}
		if !g.running {
			g.running = true
			f.wg.Add(1)
			go f.run(g)
		}
	}
	return rounds, callers, nil
}

// run serves g's rounds one after the other while callers wait, then
// exits: a runner lives only while there is work, and Close waits for it.
func (f *Fence) run(g *fenceGroup) {
	defer f.wg.Done()
	for {
		f.mu.Lock()
		r, node := g.next, g.node
		if r == nil || f.closed {
			g.running, g.next = false, nil
			f.mu.Unlock()
			if r != nil {
				r.err = ErrFenceClosed
				close(r.done)
			}
			return
		}
		// Taken off next before its write is sent: whoever calls from
		// now on waits for the round after this one.
		g.next = nil
		connected := g.connected
		f.mu.Unlock()
		var err error
		connected, err = f.round(node, r, connected)
		r.err = err
		f.mu.Lock()
		g.connected = connected
		f.mu.Unlock()
		close(r.done)
	}
}

// round writes the fence key and waits for its acknowledgement, in one
// pipeline (one connection, one round trip), asking for as many replicas
// as the master had online at the previous round, up to Replicas. It
// returns how many it has online now (ROLE), for the next round.
func (f *Fence) round(node fenceNode, r *fenceRound, connected int) (int, error) {
	ctx := f.ctx
	if connected < 0 {
		n, err := onlineReplicas(node.Do(ctx, "ROLE"))
		if err != nil {
			return -1, err
		}
		connected = n
	}
	want := min(f.cfg.Replicas, connected)
	p := node.Pipeline()
	set := p.Set(ctx, f.fenceKey(r.key), "1", fenceKeyTTL)
	role := p.Do(ctx, "ROLE")
	var exists [][]*redis.IntCmd
	for _, c := range r.callers {
		cmds := make([]*redis.IntCmd, len(c.keys))
		for i, k := range c.keys {
			cmds[i] = p.Exists(ctx, k) // one key each: a Cluster's keys of a master may be in several slots
		}
		exists = append(exists, cmds)
	}
	wait := p.Do(ctx, "WAIT", want, f.cfg.Timeout.Milliseconds())
	_, _ = p.Exec(ctx) // each command's error is read below
	if err := set.Err(); err != nil {
		return -1, fmt.Errorf("rdb: fence write: %w", err)
	}
	for i, c := range r.callers {
		for _, cmd := range exists[i] {
			if n, err := cmd.Result(); err != nil || n == 0 {
				c.missing++
			}
		}
	}
	now, rerr := onlineReplicas(role)
	if rerr != nil {
		now = -1
	}
	acked, err := wait.Int64()
	if err != nil {
		return now, fmt.Errorf("rdb: fence WAIT: %w", err)
	}
	if acked < int64(want) {
		return now, fmt.Errorf("%w: %d of %d replicas acknowledged within %s (REDIS_WAIT_TIMEOUT)", ErrNotDurable, acked, want, f.cfg.Timeout)
	}
	return now, rerr
}

// fenceKey is the fence's key for a caller's key: the same hash tag, so
// the same slot and master on a Redis Cluster; one key elsewhere.
func (f *Fence) fenceKey(key string) string {
	if f.cluster == nil {
		return f.cfg.Prefix + "fence"
	}
	return f.cfg.Prefix + "fence:{" + hashTag(key) + "}"
}

// onlineReplicas reads ROLE's reply: a master lists its online replicas
// (those past their initial sync). Anything but a master is an error: the
// writes to fence cannot have landed on a replica.
func onlineReplicas(cmd *redis.Cmd) (int, error) {
	v, err := cmd.Slice()
	if err != nil {
		return -1, fmt.Errorf("rdb: fence ROLE: %w", err)
	}
	if len(v) < 3 || v[0] != "master" {
		return -1, fmt.Errorf("rdb: fence ROLE: not a master (%v)", v[0])
	}
	replicas, _ := v[2].([]any)
	return len(replicas), nil
}
