package ratelimit_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// resend is a Redis hook that runs every script a second time after its
// first run succeeded, and hands the caller the second reply: what a client
// sees when a reply is lost and the command is sent again. go-redis does
// that to a cluster node's whole pipeline after a read timeout, and
// rdb.Pipelined to a whole pipeline after one of its scripts got NOSCRIPT.
type resend struct{ n atomic.Int64 }

func hasScript(cmds ...redis.Cmder) bool {
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" {
			return true
		}
	}
	return false
}

func (h *resend) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *resend) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !hasScript(cmd) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err // NOSCRIPT: it did not run, go-redis falls back to EVAL
		}
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *resend) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !hasScript(cmds...) {
			return next(ctx, cmds)
		}
		_ = next(ctx, cmds)
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// addHook hooks the client the limiter sends its scripts on: on a cluster,
// the cluster client under any auto-pipeliner.
func addHook(c redis.UniversalClient, h redis.Hook) {
	if cc, ok := rdb.AsCluster(c); ok {
		cc.AddHook(h)
		return
	}
	c.AddHook(h)
}

// The same Take run twice (its first reply lost) charges once: its own
// reservation is neither a cooldown it must wait for nor an entry that
// counts against its windows. Issue 20 point 4: first requests for a
// recipient were refused with "resend cooldown: wait 1m0s", their own.
func TestTakeRunTwiceChargesOnce(t *testing.T) {
	t.Parallel()
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "email:a@x", Tag: "email:a@x", For: time.Minute}
	recipient := ratelimit.Rule{Name: "per recipient", Key: "verify:email:a@x", Tag: "email:a@x", Windows: []ratelimit.Window{win(time.Hour, 5)}}
	tests := []struct {
		name string
		req  ratelimit.Request
	}{
		{"a cooldown", ratelimit.Request{Cooldown: cd}},
		{"a cooldown and its recipient's window", ratelimit.Request{Rules: []ratelimit.Rule{recipient}, Cooldown: cd}},
		{"a cooldown and limits in other slots", ratelimit.Request{Cooldown: cd, Rules: []ratelimit.Rule{recipient,
			rule("per API key", "apikey:k", win(time.Minute, 100)), rule("global email", "global:email", win(time.Second, 1000))}}},
		{"a window with room for one", ratelimit.Request{Rules: []ratelimit.Rule{rule("per IP", "ip:10.0.0.9", win(time.Minute, 1))}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			h := &resend{}
			addHook(e.r.Client, h)

			res, err := e.lim.Take(e.ctx, tc.req)
			require.NoError(t, err, "a first request refused by its own reservation")
			require.Positive(t, h.n.Load(), "the hook ran the script twice")
			for _, k := range res.Keys {
				members, err := e.r.Client.ZRange(e.ctx, k, 0, -1).Result()
				require.NoError(t, err)
				require.Equal(t, []string{res.ID}, members, "%s holds the request once", k)
			}
			if tc.req.Cooldown != nil {
				v, err := e.r.Client.Get(e.ctx, res.CooldownKey).Result()
				require.NoError(t, err)
				require.Equal(t, res.ID, v)
			}
			// It was charged: the next request is refused.
			e.deny(t, tc.req)
		})
	}
}

// On a Redis Cluster the limits are checked by one script per slot in one
// pipeline. A master that has not loaded the script (a fresh cluster, a
// promoted replica) answers NOSCRIPT, and rdb.Pipelined sends the whole
// pipeline again, so the slots whose script ran run it twice. The
// recipient's slot must not then find its own cooldown.
//
// Not parallel: it flushes one master's scripts, and the package's
// parallel tests could load them back before its Take.
func TestNoScriptOnOneSlotDoesNotRefuse(t *testing.T) {
	e := setup(t)
	cc, ok := rdb.AsCluster(e.r.Client)
	if !ok {
		t.Skip("needs a Redis Cluster (TEST_REDIS_MODE=cluster, make test-cluster)")
	}
	master := func(tag string) string {
		c, err := cc.MasterForKey(e.ctx, "{"+tag+"}")
		require.NoError(t, err)
		return c.Options().Addr
	}
	recipient := "email:first@x"
	other := ""
	for i := 0; other == ""; i++ {
		require.Less(t, i, 1000, "no tag on another master than %s", master(recipient))
		if tag := fmt.Sprintf("apikey:%d", i); master(tag) != master(recipient) {
			other = tag
		}
	}
	req := func(who string) ratelimit.Request {
		return ratelimit.Request{
			Rules: []ratelimit.Rule{
				{Name: "per recipient", Key: "verify:" + who, Tag: who, Windows: []ratelimit.Window{win(time.Hour, 5)}},
				rule("per API key", other, win(time.Minute, 100)),
			},
			Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: who, Tag: who, For: time.Minute},
		}
	}
	// Loaded on every master, then forgotten by the API key's.
	_, err := e.lim.Take(e.ctx, req("email:warm@x"))
	require.NoError(t, err)
	node, err := cc.MasterForKey(e.ctx, "{"+other+"}")
	require.NoError(t, err)
	require.NoError(t, node.ScriptFlush(e.ctx).Err())

	res, err := e.lim.Take(e.ctx, req(recipient))
	require.NoError(t, err, "the first request for %s", recipient)
	v, err := e.r.Client.Get(e.ctx, res.CooldownKey).Result()
	require.NoError(t, err)
	require.Equal(t, res.ID, v)
	le := e.deny(t, req(recipient))
	require.True(t, le.Cooldown, "the second request meets the first's cooldown")
}

// A Take with an idempotency entry run twice is still admitted: the second
// run finds the entry pending under its own reservation, not another
// request's, so it must not answer "in progress" to itself (a 409 for the
// first request with a key, on a cluster after NOSCRIPT).
func TestTakeWithOnceRunTwiceIsAdmitted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		req  ratelimit.Request
	}{
		{"only the entry", ratelimit.Request{}},
		{"the entry and a cooldown", ratelimit.Request{Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: "email:o@x", Tag: "email:o@x", For: time.Minute}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			h := &resend{}
			addHook(e.r.Client, h)
			req := tc.req
			req.Once = &ratelimit.Once{Key: "tenant:key-" + tc.name, Digest: "d1", IDs: "task-1", Lease: time.Minute, TTL: time.Hour}
			res, err := e.lim.Take(e.ctx, req)
			require.NoError(t, err, "the first request with a key refused by its own entry")
			require.Positive(t, h.n.Load(), "the hook ran the script twice")
			// Another request with the same key now meets the entry.
			again := req
			again.Cooldown = nil
			_, err = e.lim.Take(e.ctx, again)
			var oe *ratelimit.OnceError
			require.ErrorAs(t, err, &oe)
			require.Equal(t, ratelimit.OncePending, oe.State)
			require.NotEmpty(t, res.OnceKey)
		})
	}
}
