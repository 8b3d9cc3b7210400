package ratelimit_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// failRollbacks makes the first n rollback scripts e's client sends fail,
// as a connection a failover reset would, and counts every one sent.
func failRollbacks(e env, n int64) *atomic.Int64 {
	var failures, rollbacks atomic.Int64
	failures.Store(n)
	addHook(e.r.Client, testenv.CommandHook(func(cmd redis.Cmder) error {
		if cmd.Name() != "evalsha" || cmd.Args()[1] != ratelimit.RollbackScriptHash {
			return nil
		}
		rollbacks.Add(1)
		if failures.Add(-1) >= 0 {
			return errors.New("injected: connection reset by peer")
		}
		return nil
	}))
	return &rollbacks
}

// On a Redis Cluster a request's slots are checked by separate scripts:
// the recipient's admits it and sets its cooldown, the API key's refuses,
// and the refusal undoes the cooldown. An undo that fails (a connection a
// failover reset) is tried again; when that fails too, the LimitError
// says what is left and until when. Issue 38: the error was dropped and
// the cooldown stayed, refusing the recipient's next request for a
// minute with nothing in any log.
func TestRefusedTakeWhoseUndoFailsIsRetriedOrReported(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		failures int64 // rollback calls that fail
		left     bool  // the cooldown is left behind, and said
	}{
		{"fails once: retried", 1, false},
		{"fails twice: reported", 2, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			if _, ok := rdb.AsCluster(e.r.Client); !ok {
				t.Skip("needs a Redis Cluster (TEST_REDIS_MODE=cluster, make test-cluster): on one Redis a request is one script")
			}
			apiKey := rule("per API key", "apikey:full", win(time.Minute, 1))
			_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{apiKey}})
			require.NoError(t, err, "the API key's one request")

			rollbacks := failRollbacks(e, tc.failures)
			cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "email:u@x", Tag: "email:u@x", For: time.Minute}
			_, err = e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{apiKey}, Cooldown: cd})
			le := limitErr(t, err)
			require.Equal(t, "per API key", le.Rule, "refused by the API key's slot")
			require.Positive(t, rollbacks.Load(), "the recipient's slot was undone")

			cooldowns, err := rdb.Keys(e.ctx, e.r.Client, e.r.Prefix+"ratelimit:{email:u@x}:cooldown:*")
			require.NoError(t, err)
			if !tc.left {
				require.Nil(t, le.LeftBehind)
				require.Empty(t, cooldowns, "the retried undo removed the cooldown")
				return
			}
			require.Len(t, cooldowns, 1, "the cooldown the undo could not remove")
			lb := le.LeftBehind
			require.NotNil(t, lb, "the refusal says what its undo left")
			require.Equal(t, []string{"per API key", "resend cooldown"}, lb.Rules)
			require.Equal(t, time.Minute, lb.For)
			require.NotEmpty(t, lb.Reservation)
			require.ErrorContains(t, lb.Err, "connection reset by peer")
		})
	}
}

// The fraud guard's refusal says what its failed undo left behind, as a
// limit's does: a blocked prefix's slot refuses, the recipient's slot had
// admitted and set its cooldown, and the undo of that cooldown fails
// twice. The GuardError then names the cooldown and how long it stays
// (the API logs it); before, the undo's error was dropped.
func TestGuardRefusalWhoseUndoFailsSaysWhatItLeft(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, ok := rdb.AsCluster(e.r.Client); !ok {
		t.Skip("needs a Redis Cluster (TEST_REDIS_MODE=cluster, make test-cluster): on one Redis a request is one script")
	}
	g := guardOf(e, "t:+44740099", func(g *ratelimit.Guard) { g.MinSends = 1 })
	n, err := takeN(t, e, g, 5)
	require.Equal(t, 1, n, "MinSends admitted, then the prefix is blocked")
	_ = guardErr(t, err) // blocked

	rollbacks := failRollbacks(e, 2)
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "sms:+447400990001", Tag: "sms:+447400990001", For: time.Minute}
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Cooldown: cd, Guard: g})
	ge := guardErr(t, err)
	require.Equal(t, int64(2), rollbacks.Load(), "the undo was tried twice")
	cooldowns, err := rdb.Keys(e.ctx, e.r.Client, e.r.Prefix+"ratelimit:{sms:+447400990001}:cooldown:*")
	require.NoError(t, err)
	require.Len(t, cooldowns, 1, "the cooldown the undo could not remove")
	lb := ge.LeftBehind
	require.NotNil(t, lb, "the guard's refusal says what its undo left")
	require.Equal(t, []string{"resend cooldown"}, lb.Rules)
	require.Equal(t, time.Minute, lb.For)
	require.NotEmpty(t, lb.Reservation)
	require.ErrorContains(t, lb.Err, "connection reset by peer")
}
