package claim_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

type env struct {
	r   *testenv.Redis
	ctx context.Context
}

func setup(t *testing.T) env {
	t.Helper()
	return env{r: testenv.NewRedis(t), ctx: testenv.Context(t, 60*time.Second)}
}

func (e env) claimer(t *testing.T, lease time.Duration) *claim.Claimer {
	t.Helper()
	c, err := claim.New(e.r.Client, claim.Config{Prefix: e.r.Prefix, Lease: lease})
	require.NoError(t, err)
	return c
}

func (e env) acquire(t *testing.T, c *claim.Claimer, key, owner string) claim.Result {
	t.Helper()
	res, err := c.Acquire(e.ctx, key, owner)
	require.NoError(t, err)
	return res
}

func (e env) claimed(t *testing.T, c *claim.Claimer, key, owner string) *claim.Claim {
	t.Helper()
	res := e.acquire(t, c, key, owner)
	require.Equal(t, claim.Claimed, res.Outcome)
	require.NotNil(t, res.Claim)
	return res.Claim
}

func (e env) value(t *testing.T, key string) string {
	t.Helper()
	v, err := e.r.Client.Get(e.ctx, key).Result()
	require.NoError(t, err)
	return v
}

func (e env) pttl(t *testing.T, key string) time.Duration {
	t.Helper()
	d, err := e.r.Client.PTTL(e.ctx, key).Result()
	require.NoError(t, err)
	return d
}

func TestKeys(t *testing.T) {
	t.Parallel()
	c, err := claim.New(nil, claim.Config{Prefix: "msgpulse:"})
	require.NoError(t, err)
	require.Equal(t, "msgpulse:email:sent:mq:{t-1}:a@b.c:9f86d0:login", c.VerificationKey("email", "a@b.c", "9f86d0", "login", "t-1"))
	require.Equal(t, "msgpulse:sms:sent:task:{t-1}", c.TaskKey("sms", "t-1"))
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      claim.Config
		want    claim.Config
		wantErr string
	}{
		{"defaults", claim.Config{Prefix: "p:"}, claim.Config{Prefix: "p:", Lease: 15 * time.Second, SentTTL: 7 * 24 * time.Hour}, ""},
		{"kept", claim.Config{Prefix: "p:", Lease: time.Second, SentTTL: time.Hour}, claim.Config{Prefix: "p:", Lease: time.Second, SentTTL: time.Hour}, ""},
		{"no prefix", claim.Config{}, claim.Config{}, "Prefix"},
		{"tiny lease", claim.Config{Prefix: "p:", Lease: time.Millisecond}, claim.Config{}, "Lease"},
		{"negative lease", claim.Config{Prefix: "p:", Lease: -time.Second}, claim.Config{}, "Lease"},
		{"sent shorter than lease", claim.Config{Prefix: "p:", Lease: time.Minute, SentTTL: time.Second}, claim.Config{}, "SentTTL"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := tc.in
			err := c.Validate()
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, c)
		})
	}
}

// Each case puts the key in some state (with owner "a"), then owner "b"
// acquires it.
func TestAcquire(t *testing.T) {
	t.Parallel()
	const lease = time.Minute
	tests := []struct {
		name    string
		prepare func(t *testing.T, e env, c *claim.Claimer, key string)
		want    claim.Outcome
	}{
		{"free key", func(*testing.T, env, *claim.Claimer, string) {}, claim.Claimed},
		{"held", func(t *testing.T, e env, c *claim.Claimer, key string) { e.claimed(t, c, key, "a") }, claim.Held},
		{"released", func(t *testing.T, e env, c *claim.Claimer, key string) {
			require.NoError(t, e.claimed(t, c, key, "a").Release(e.ctx))
		}, claim.Claimed},
		{"sent", func(t *testing.T, e env, c *claim.Claimer, key string) {
			require.NoError(t, e.claimed(t, c, key, "a").MarkSent(e.ctx))
		}, claim.AlreadySent},
		{"legacy SETNX marker", func(t *testing.T, e env, _ *claim.Claimer, key string) {
			require.NoError(t, e.r.Client.Set(e.ctx, key, "1", time.Hour).Err())
		}, claim.AlreadySent},
		{"lease left without a TTL", func(t *testing.T, e env, _ *claim.Claimer, key string) {
			require.NoError(t, e.r.Client.Set(e.ctx, key, "lease:x:a", 0).Err())
		}, claim.Claimed},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			c := e.claimer(t, lease)
			key := c.TaskKey("email", "t1")
			tc.prepare(t, e, c, key)
			before, _ := e.r.Client.Get(e.ctx, key).Result()

			res := e.acquire(t, c, key, "b")
			require.Equal(t, tc.want, res.Outcome, res.Outcome.String())
			switch tc.want {
			case claim.Claimed:
				require.NotNil(t, res.Claim)
				require.Equal(t, key, res.Claim.Key())
				require.Equal(t, "b", res.Claim.Owner())
				v := e.value(t, key)
				require.True(t, strings.HasPrefix(v, "lease:") && strings.HasSuffix(v, ":b"), v)
				require.NotEqual(t, before, v)
				ttl := e.pttl(t, key)
				require.Positive(t, ttl)
				require.LessOrEqual(t, ttl, lease)
			case claim.Held:
				require.Nil(t, res.Claim)
				require.Equal(t, "a", res.HeldBy)
				require.Positive(t, res.HeldFor)
				require.LessOrEqual(t, res.HeldFor, lease)
				require.Equal(t, before, e.value(t, key))
			case claim.AlreadySent:
				require.Nil(t, res.Claim)
				require.Equal(t, before, e.value(t, key))
			}
		})
	}
}

// The same acquisition sent twice (a client or pipeline retry after it
// ran) finds its own lease: still claimed, not held by ourselves, which
// would hold the message back for a whole lease.
func TestAcquireRunTwiceIsStillOurs(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.claimer(t, time.Minute)
	key := c.TaskKey("email", "t1")
	comp := rdb.NewComposer()
	rec := comp.Recorder()
	a, err := c.QueueAcquire(e.ctx, rec, key, "b")
	require.NoError(t, err)
	for run := range 2 {
		require.NoError(t, comp.Exec(e.ctx, e.r.Client, rec), "run %d", run)
		res, err := a.Result()
		require.NoError(t, err)
		require.Equal(t, claim.Claimed, res.Outcome, "run %d: %s held by %q", run, res.Outcome, res.HeldBy)
		require.Equal(t, a.Lease, e.value(t, key))
	}
	// Anyone else still finds it held.
	require.Equal(t, claim.Held, e.acquire(t, c, key, "b").Outcome)
}

func TestMarkSent(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.claimer(t, time.Minute)
	key := c.VerificationKey("email", "a@b.c", "d1g3st", "login", "t-1")
	cl := e.claimed(t, c, key, "consumer-1")

	before, err := e.r.Client.Time(e.ctx).Result()
	require.NoError(t, err)
	require.NoError(t, cl.MarkSent(e.ctx))
	after, err := e.r.Client.Time(e.ctx).Result()
	require.NoError(t, err)

	v := e.value(t, key)
	require.True(t, strings.HasPrefix(v, "sent:consumer-1:"), v)
	ms, err := strconv.ParseInt(strings.TrimPrefix(v, "sent:consumer-1:"), 10, 64)
	require.NoError(t, err)
	require.GreaterOrEqual(t, ms, before.UnixMilli())
	require.LessOrEqual(t, ms, after.UnixMilli())
	ttl := e.pttl(t, key)
	require.Greater(t, ttl, 6*24*time.Hour)
	require.LessOrEqual(t, ttl, 7*24*time.Hour)
	select {
	case <-cl.Lost():
		t.Fatal("lost after a clean MarkSent")
	default:
	}

	// Sent is not a lease: releasing or renewing must leave it alone.
	require.ErrorIs(t, cl.Release(e.ctx), claim.ErrLost)
	require.ErrorIs(t, cl.Renew(e.ctx), claim.ErrLost)
	require.Equal(t, v, e.value(t, key))
	require.Equal(t, claim.AlreadySent, e.acquire(t, c, key, "consumer-2").Outcome)
}

// a's lease expires, b claims the key; a's Renew and Release must fail and
// leave b's lease as it is, but a's MarkSent must still record the send.
func TestLostLease(t *testing.T) {
	t.Parallel()
	e := setup(t)
	short, long := e.claimer(t, 50*time.Millisecond), e.claimer(t, time.Minute)
	key := short.TaskKey("sms", "t1")
	a := e.claimed(t, short, key, "a")

	var b *claim.Claim
	testenv.WaitFor(t, 5*time.Second, "a's lease expires and b claims", func() bool {
		res := e.acquire(t, long, key, "b")
		b = res.Claim
		return res.Outcome == claim.Claimed
	})
	bValue := e.value(t, key)

	require.ErrorIs(t, a.Renew(e.ctx), claim.ErrLost)
	require.ErrorIs(t, a.Release(e.ctx), claim.ErrLost)
	require.Equal(t, bValue, e.value(t, key))
	require.Greater(t, e.pttl(t, key), time.Second, "a's renew shortened b's lease")
	select {
	case <-a.Lost():
	default:
		t.Fatal("a.Lost not closed")
	}

	require.ErrorIs(t, a.MarkSent(e.ctx), claim.ErrLost)
	v := e.value(t, key)
	require.True(t, strings.HasPrefix(v, "sent:a:"), v)
	require.ErrorIs(t, b.Renew(e.ctx), claim.ErrLost, "b must learn that the message went out")
	require.ErrorIs(t, b.MarkSent(e.ctx), claim.ErrLost)
	require.Equal(t, v, e.value(t, key), "the first sent record is kept")
}

func TestRenewExtends(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.claimer(t, time.Minute)
	key := c.TaskKey("email", "t1")
	cl := e.claimed(t, c, key, "a")
	// Stand in for time passing: leave the lease almost run out.
	require.NoError(t, e.r.Client.PExpire(e.ctx, key, 100*time.Millisecond).Err())
	require.NoError(t, cl.Renew(e.ctx))
	ttl := e.pttl(t, key)
	require.Greater(t, ttl, 50*time.Second)
	require.LessOrEqual(t, ttl, time.Minute)
}

func TestKeepAlive(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	e := setup(t)
	c := e.claimer(t, lease)
	key := c.TaskKey("email", "t1")
	cl := e.claimed(t, c, key, "a")
	mine := e.value(t, key)

	stop := cl.KeepAlive(e.ctx)
	start, err := e.r.Client.Time(e.ctx).Result()
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "four lease lengths pass with the lease held", func() bool {
		v, err := e.r.Client.Get(e.ctx, key).Result()
		require.NoError(t, err, "lease expired while kept alive")
		require.Equal(t, mine, v)
		now, err := e.r.Client.Time(e.ctx).Result()
		require.NoError(t, err)
		return now.Sub(start) > 4*lease
	})
	stop()
	stop() // idempotent
	testenv.WaitFor(t, 5*time.Second, "lease expires once renewal stopped", func() bool {
		return e.acquire(t, c, key, "b").Outcome == claim.Claimed
	})
}

func TestKeepAliveStopsWhenLost(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.claimer(t, 300*time.Millisecond)
	key := c.TaskKey("email", "t1")
	cl := e.claimed(t, c, key, "a")
	stop := cl.KeepAlive(e.ctx)
	defer stop()
	require.NoError(t, e.r.Client.Set(e.ctx, key, "lease:other:b", time.Minute).Err())
	select {
	case <-cl.Lost():
	case <-time.After(10 * time.Second):
		t.Fatal("KeepAlive did not notice the lost lease")
	}
	require.Equal(t, "lease:other:b", e.value(t, key))
	require.Greater(t, e.pttl(t, key), 10*time.Second)
}

func TestConcurrentAcquire(t *testing.T) {
	t.Parallel()
	const n = 20
	e := setup(t)
	c := e.claimer(t, time.Minute)
	key := c.TaskKey("email", "t1")
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		res   = make([]claim.Result, n)
		errs  = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			res[i], errs[i] = c.Acquire(e.ctx, key, fmt.Sprintf("owner-%d", i))
		})
	}
	close(start)
	wg.Wait()
	winner := ""
	for i := range n {
		require.NoError(t, errs[i])
		if res[i].Outcome == claim.Claimed {
			require.Empty(t, winner, "two owners claimed the key")
			winner = res[i].Claim.Owner()
		}
	}
	require.NotEmpty(t, winner)
	for i := range n {
		if res[i].Outcome != claim.Claimed {
			require.Equal(t, claim.Held, res[i].Outcome)
			require.Equal(t, winner, res[i].HeldBy)
		}
	}
}

func TestAcquireRejectsEmpty(t *testing.T) {
	t.Parallel()
	e := setup(t)
	c := e.claimer(t, time.Minute)
	_, err := c.Acquire(e.ctx, "", "a")
	require.Error(t, err)
	_, err = c.Acquire(e.ctx, c.TaskKey("email", "t"), "")
	require.Error(t, err)
}

// Unwithdraw takes back only Withdraw's marks: a withdrawn task can be
// claimed again, one a consumer sent stays sent.
func TestUnwithdrawTakesBackOnlyWithdrawals(t *testing.T) {
	e := setup(t)
	c := e.claimer(t, time.Second)
	withdrawn, sent := c.TaskKey("mail", "t-withdrawn"), c.TaskKey("mail", "t-sent")
	cl := e.claimed(t, c, sent, "c1")
	require.NoError(t, cl.MarkSent(e.ctx))
	require.NoError(t, c.Withdraw(e.ctx, []string{withdrawn, sent}))
	require.Equal(t, claim.AlreadySent, e.acquire(t, c, withdrawn, "c1").Outcome)
	require.NoError(t, c.Unwithdraw(e.ctx, []string{withdrawn, sent}))
	require.Equal(t, claim.Claimed, e.acquire(t, c, withdrawn, "c1").Outcome)
	require.Equal(t, claim.AlreadySent, e.acquire(t, c, sent, "c2").Outcome)
}
