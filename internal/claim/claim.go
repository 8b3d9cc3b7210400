package claim

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrLost means the lease is no longer ours: it expired, and maybe another
// owner holds the key now or it was marked sent.
var ErrLost = errors.New("claim: lease lost")

// Config configures a Claimer.
type Config struct {
	Prefix string // start of every key
	// Lease is how long a claim lives without renewal: the longest a crashed
	// consumer can block a redelivery. Default 15s.
	Lease time.Duration
	// SentTTL is how long a sent key blocks duplicates. Default 7 days.
	SentTTL time.Duration
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	c.Lease = cmp.Or(c.Lease, 15*time.Second)
	c.SentTTL = cmp.Or(c.SentTTL, 7*24*time.Hour)
	if c.Prefix == "" {
		return errors.New("claim: Prefix is required")
	}
	if c.Lease < 10*time.Millisecond {
		return fmt.Errorf("claim: Lease %s: must be at least 10ms", c.Lease)
	}
	if c.SentTTL < c.Lease {
		return fmt.Errorf("claim: SentTTL %s: must not be shorter than Lease %s", c.SentTTL, c.Lease)
	}
	return nil
}

// Claimer acquires claims. It is safe for concurrent use.
type Claimer struct {
	rdb redis.UniversalClient
	cfg Config
}

// New validates cfg and returns a Claimer.
func New(rdb redis.UniversalClient, cfg Config) (*Claimer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Claimer{rdb: rdb, cfg: cfg}, nil
}

// Outcome is what Acquire found.
type Outcome int

const (
	// Claimed: the key is ours; send, then MarkSent (or Release on failure).
	Claimed Outcome = iota + 1
	// AlreadySent: the message was sent before; do not send it again.
	AlreadySent
	// Held: another owner holds a live lease; it is sending right now.
	Held
)

func (o Outcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case AlreadySent:
		return "already sent"
	case Held:
		return "held"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is the outcome of Acquire.
type Result struct {
	Outcome Outcome
	Claim   *Claim        // when Claimed
	HeldBy  string        // when Held: the other owner
	HeldFor time.Duration // when Held: the rest of its lease
}

var acquireScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v then
  if string.sub(v, 1, 6) ~= 'lease:' then return {2, v, 0} end
  -- Our own lease (the same call run again, after a client retry): still
  -- ours. Each acquisition draws a fresh token, so no one else has it.
  if v == ARGV[1] then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
    return {1, '', 0}
  end
  local pttl = redis.call('PTTL', KEYS[1])
  -- A lease always has a TTL; one without is a leftover that would block
  -- the message forever, so it is taken over.
  if pttl > 0 then return {3, v, pttl} end
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, '', 0}
`)

// Acquire tries to claim key for owner (a consumer id, for logs and HeldBy).
func (c *Claimer) Acquire(ctx context.Context, key, owner string) (Result, error) {
	a, err := c.QueueAcquire(ctx, c.rdb, key, owner)
	if err != nil {
		return Result{}, err
	}
	return a.Result()
}

// Acquisition is an Acquire queued on a pipeline (QueueAcquire): the lease
// value is known before it runs, so later commands in the same pipeline
// can be made conditional on it (status.Guard).
type Acquisition struct {
	c          *Claimer
	key, owner string
	Lease      string // the value the key holds if the claim is ours
	cmd        *redis.Cmd
}

// QueueAcquire queues an Acquire on sc, which may be a pipeline; read the
// outcome with Result once sc has run. On a pipeline, a script Redis has
// forgotten fails with NOSCRIPT (see LoadScripts).
func (c *Claimer) QueueAcquire(ctx context.Context, sc redis.Scripter, key, owner string) (*Acquisition, error) {
	if key == "" || owner == "" {
		return nil, errors.New("claim: key and owner are required")
	}
	lease := leasePrefix + rand.Text() + ":" + owner
	return &Acquisition{c: c, key: key, owner: owner, Lease: lease,
		cmd: acquireScript.Run(ctx, sc, []string{key}, lease, c.cfg.Lease.Milliseconds())}, nil
}

// Result is the queued Acquire's outcome.
func (a *Acquisition) Result() (Result, error) {
	key := a.key
	out, err := a.cmd.Slice()
	if err != nil {
		return Result{}, fmt.Errorf("claim: acquire %q: %w", key, err)
	}
	if len(out) != 3 {
		return Result{}, fmt.Errorf("claim: acquire %q: unexpected reply %v", key, out)
	}
	code, _ := out[0].(int64)
	value, _ := out[1].(string)
	ms, _ := out[2].(int64)
	switch code {
	case 1:
		return Result{Outcome: Claimed, Claim: &Claim{c: a.c, key: key, owner: a.owner, lease: a.Lease, lost: make(chan struct{})}}, nil
	case 2:
		return Result{Outcome: AlreadySent}, nil
	case 3:
		return Result{Outcome: Held, HeldBy: leaseOwner(value), HeldFor: time.Duration(ms) * time.Millisecond}, nil
	}
	return Result{}, fmt.Errorf("claim: acquire %q: unexpected reply %v", key, out)
}

// LoadScripts loads the scripts QueueAcquire and QueueMarkSent run, for
// pipelines.
func (c *Claimer) LoadScripts(ctx context.Context) error {
	for _, sc := range []*redis.Script{acquireScript, markSentScript} {
		if err := sc.Load(ctx, c.rdb).Err(); err != nil {
			return fmt.Errorf("claim: load scripts: %w", err)
		}
	}
	return nil
}

func leaseOwner(v string) string {
	_, owner, _ := strings.Cut(strings.TrimPrefix(v, leasePrefix), ":")
	return owner
}

// Claim is a held lease on one key. Its methods are safe for concurrent use
// (KeepAlive renews while the sender works).
type Claim struct {
	c     *Claimer
	key   string
	owner string
	lease string // the exact value we wrote; proves ownership

	lostOnce sync.Once
	lost     chan struct{}
}

// Key is the claimed key.
func (cl *Claim) Key() string { return cl.key }

// Owner is the owner given to Acquire.
func (cl *Claim) Owner() string { return cl.owner }

// Lost is closed once a renewal, MarkSent or Release finds the lease gone.
// A sender that has not started sending should give up when it closes.
func (cl *Claim) Lost() <-chan struct{} { return cl.lost }

func (cl *Claim) markLost() { cl.lostOnce.Do(func() { close(cl.lost) }) }

var (
	renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1`)
	releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1`)
	// An existing sent value is kept: it already blocks duplicates, and the
	// first sender is the one worth knowing.
	// Returns 1 when the lease was still ours, 0 otherwise.
	markSentScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] and string.sub(v, 1, 6) ~= 'lease:' then return 0 end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], 'sent:' .. ARGV[2] .. ':' .. string.format('%d', ms), 'PX', ARGV[3])
if v == ARGV[1] then return 1 end
return 0`)
)

// Renew extends the lease to a full Lease from now, if it is still ours;
// ErrLost otherwise.
func (cl *Claim) Renew(ctx context.Context) error {
	ok, err := renewScript.Run(ctx, cl.c.rdb, []string{cl.key}, cl.lease, cl.c.cfg.Lease.Milliseconds()).Bool()
	if err != nil {
		return fmt.Errorf("claim: renew %q: %w", cl.key, err)
	}
	if !ok {
		cl.markLost()
		return fmt.Errorf("claim: renew %q: %w", cl.key, ErrLost)
	}
	return nil
}

// KeepAlive renews the lease every Lease/3 until stop is called, ctx ends or
// the lease is lost (see Lost). A failed renewal is retried at the next tick:
// two may fail before the lease runs out. stop waits for the renewing
// goroutine to exit and may be called more than once.
func (cl *Claim) KeepAlive(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(cl.c.cfg.Lease / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if err := cl.Renew(ctx); errors.Is(err, ErrLost) {
					return
				}
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// MarkSent records that the message was sent, for SentTTL. It does so even
// when the lease was lost (the message did go out, and a redelivery must not
// send it again), and then also returns ErrLost so the caller can log that
// the lease ran out mid-send.
func (cl *Claim) MarkSent(ctx context.Context) error {
	return cl.QueueMarkSent(ctx, cl.c.rdb)()
}

// QueueMarkSent is MarkSent on sc, which may be a pipeline; the returned
// function reports the outcome once sc has run.
func (cl *Claim) QueueMarkSent(ctx context.Context, sc redis.Scripter) func() error {
	cmd := markSentScript.Run(ctx, sc, []string{cl.key}, cl.lease, cl.owner, cl.c.cfg.SentTTL.Milliseconds())
	return func() error {
		ok, err := cmd.Bool()
		if err != nil {
			return fmt.Errorf("claim: mark %q sent: %w", cl.key, err)
		}
		if !ok {
			cl.markLost()
			return fmt.Errorf("claim: mark %q sent: %w", cl.key, ErrLost)
		}
		return nil
	}
}

// Release gives the key up (the send failed before anything went out), so a
// redelivery can claim it at once; ErrLost if it was no longer ours, in which
// case nothing is touched.
func (cl *Claim) Release(ctx context.Context) error {
	ok, err := releaseScript.Run(ctx, cl.c.rdb, []string{cl.key}, cl.lease).Bool()
	if err != nil {
		return fmt.Errorf("claim: release %q: %w", cl.key, err)
	}
	if !ok {
		cl.markLost()
		return fmt.Errorf("claim: release %q: %w", cl.key, ErrLost)
	}
	return nil
}

// Withdraw marks keys as done before any consumer claimed them, so that a
// message published for a request that was then rolled back is acked
// without being sent (a consumer treats any value but a lease as sent).
// A key a consumer holds or marked already is left alone: that message
// is on its way.
func (c *Claimer) Withdraw(ctx context.Context, keys []string) error {
	var done func() error
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		done = c.QueueWithdraw(ctx, p, keys)
		return nil
	}); err != nil {
		return fmt.Errorf("claim: withdraw: %w", err)
	}
	return done()
}

// QueueWithdraw is Withdraw queued on p, for a caller that undoes several
// things in one round trip; the returned function reports the outcome
// once p has run.
func (c *Claimer) QueueWithdraw(ctx context.Context, p redis.Pipeliner, keys []string) func() error {
	cmds := make([]*redis.BoolCmd, len(keys))
	for i, k := range keys {
		cmds[i] = p.SetNX(ctx, k, "withdrawn", c.cfg.SentTTL)
	}
	return func() error {
		for _, cmd := range cmds {
			if err := cmd.Err(); err != nil {
				return fmt.Errorf("claim: withdraw: %w", err)
			}
		}
		return nil
	}
}

// unwithdrawLua deletes KEYS[1] only if Withdraw wrote it.
const unwithdrawLua = `
if redis.call('GET', KEYS[1]) == 'withdrawn' then return redis.call('DEL', KEYS[1]) end
return 0
`

// Unwithdraw undoes Withdraw for keys that no consumer has acted on since,
// before the same tasks are published again (a retry with the same
// Idempotency-Key): a withdrawn key would make a consumer ack the new copy
// unsent. A key a consumer holds or marked sent is left alone. Each copy
// then meets the claim, so the task is sent once.
func (c *Claimer) Unwithdraw(ctx context.Context, keys []string) error {
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.Eval(ctx, unwithdrawLua, []string{k})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("claim: unwithdraw: %w", err)
	}
	return nil
}
