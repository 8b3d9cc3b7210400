package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

type env struct {
	r   *testenv.Redis
	lim *ratelimit.Limiter
	ctx context.Context
}

func setup(t *testing.T) env {
	t.Helper()
	r := testenv.NewRedis(t)
	return env{r: r, lim: ratelimit.New(r.Client, r.Prefix), ctx: testenv.Context(t, 60*time.Second)}
}

func rule(name, key string, ws ...ratelimit.Window) ratelimit.Rule {
	return ratelimit.Rule{Name: name, Key: key, Windows: ws}
}

func win(d time.Duration, limit int) ratelimit.Window {
	return ratelimit.Window{Length: d, Limit: limit}
}

// deny asserts that req is denied and returns why.
func (e env) deny(t *testing.T, req ratelimit.Request) ratelimit.LimitError {
	t.Helper()
	_, err := e.lim.Take(e.ctx, req)
	return *limitErr(t, err)
}

// limitErr asserts err is a denial and returns it.
func limitErr(t *testing.T, err error) *ratelimit.LimitError {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	var le *ratelimit.LimitError
	require.ErrorAs(t, err, &le)
	return le
}

// redisMS is the Redis server clock, the one the limiter uses.
func redisMS(t *testing.T, e env) int64 {
	t.Helper()
	tm, err := e.r.Client.Time(e.ctx).Result()
	require.NoError(t, err)
	return tm.UnixMilli()
}

func TestTakeAdmitsExactlyLimitThenDenies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		rules  []ratelimit.Rule
		admit  int
		rule   string
		window time.Duration
		limit  int
	}{
		{
			name:  "one window",
			rules: []ratelimit.Rule{rule("per recipient", "r", win(time.Hour, 3))},
			admit: 3, rule: "per recipient", window: time.Hour, limit: 3,
		},
		{
			name:  "shorter window binds first",
			rules: []ratelimit.Rule{rule("per recipient", "r", win(time.Minute, 2), win(time.Hour, 5))},
			admit: 2, rule: "per recipient", window: time.Minute, limit: 2,
		},
		{
			name:  "unlimited window is skipped",
			rules: []ratelimit.Rule{rule("per IP", "ip", win(time.Second, 0), win(24*time.Hour, 2))},
			admit: 2, rule: "per IP", window: 24 * time.Hour, limit: 2,
		},
		{
			name: "tightest rule names itself",
			rules: []ratelimit.Rule{
				rule("per recipient", "r", win(time.Hour, 5)),
				rule("per IP", "ip", win(time.Hour, 2)),
				rule("global email", "g", win(time.Second, 1000)),
			},
			admit: 2, rule: "per IP", window: time.Hour, limit: 2,
		},
		{
			name: "longest retry wins when several are violated (long rule last)",
			rules: []ratelimit.Rule{
				rule("per API key", "k", win(time.Minute, 1)),
				rule("per recipient", "r", win(time.Hour, 1)),
			},
			admit: 1, rule: "per recipient", window: time.Hour, limit: 1,
		},
		{
			name: "longest retry wins when several are violated (long rule first)",
			rules: []ratelimit.Rule{
				rule("per recipient", "r", win(time.Hour, 1)),
				rule("per API key", "k", win(time.Minute, 1), win(10*time.Second, 1)),
			},
			admit: 1, rule: "per recipient", window: time.Hour, limit: 1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			req := ratelimit.Request{Rules: tc.rules}
			for i := range tc.admit {
				res, err := e.lim.Take(e.ctx, req)
				require.NoError(t, err, "take %d", i+1)
				require.NotEmpty(t, res.ID)
			}
			le := e.deny(t, req)
			require.Equal(t, tc.rule, le.Rule)
			require.Equal(t, tc.window, le.Window)
			require.Equal(t, tc.limit, le.Limit)
			require.False(t, le.Cooldown)
			require.Positive(t, le.RetryAfter)
			require.LessOrEqual(t, le.RetryAfter, tc.window)
			require.Equal(t, fmt.Sprintf("%s: over the %s limit (%d)", tc.rule, ratelimit.WindowName(tc.window), tc.limit), le.Error())
		})
	}
}

func TestTakeWithoutLimitsNeverDenies(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, req := range []ratelimit.Request{
		{},
		{Rules: []ratelimit.Rule{rule("unlimited", "u", win(time.Hour, 0))}},
	} {
		for range 5 {
			res, err := e.lim.Take(e.ctx, req)
			require.NoError(t, err)
			require.Empty(t, res.Keys)
			require.NoError(t, e.lim.Rollback(e.ctx, res))
		}
	}
}

func TestTakeRejectsMalformedRequests(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tests := []struct {
		name string
		req  ratelimit.Request
	}{
		{"empty key", ratelimit.Request{Rules: []ratelimit.Rule{rule("x", "", win(time.Hour, 1))}}},
		{"key twice", ratelimit.Request{Rules: []ratelimit.Rule{rule("a", "k", win(time.Hour, 1)), rule("b", "k", win(time.Hour, 2))}}},
		{"negative limit", ratelimit.Request{Rules: []ratelimit.Rule{rule("x", "k", win(time.Hour, -1))}}},
		{"zero length", ratelimit.Request{Rules: []ratelimit.Rule{rule("x", "k", win(0, 1))}}},
		{"cooldown without key", ratelimit.Request{Cooldown: &ratelimit.Cooldown{Name: "c", For: time.Minute}}},
		{"cooldown without duration", ratelimit.Request{Cooldown: &ratelimit.Cooldown{Name: "c", Key: "c"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.lim.Take(e.ctx, tc.req)
			require.Error(t, err)
			require.NotErrorIs(t, err, ratelimit.ErrLimited)
		})
	}
}

func TestDenialRecordsNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	roomy := rule("per recipient", "roomy", win(time.Hour, 2))
	full := rule("per IP", "full", win(time.Hour, 1))
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "cd", For: time.Hour}

	_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{full}})
	require.NoError(t, err)

	// Denied by "per IP": neither the roomy rule nor the cooldown may count it.
	le := e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{roomy, full}, Cooldown: cd})
	require.Equal(t, "per IP", le.Rule)

	res, err := e.lim.Take(e.ctx, ratelimit.Request{Cooldown: cd})
	require.NoError(t, err, "the denied request set the cooldown")
	require.NotEmpty(t, res.CooldownKey)

	// Denied by the cooldown: the roomy rule still has both its slots.
	le = e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{roomy}, Cooldown: cd})
	require.True(t, le.Cooldown)
	for i := range 2 {
		_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{roomy}})
		require.NoError(t, err, "roomy take %d: a denied request was recorded", i+1)
	}
	e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{roomy}})
}

func TestConcurrentTakesAdmitExactlyLimit(t *testing.T) {
	t.Parallel()
	const n, limit = 60, 7
	e := setup(t)
	req := ratelimit.Request{Rules: []ratelimit.Rule{
		rule("per recipient", "r", win(time.Hour, limit)),
		rule("global email", "g", win(time.Second, 1_000_000)),
	}}
	var (
		wg               sync.WaitGroup
		mu               sync.Mutex
		admitted, denied int
		other            []error
		start            = make(chan struct{})
	)
	for range n {
		wg.Go(func() {
			<-start
			_, err := e.lim.Take(e.ctx, req)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				admitted++
			case errors.Is(err, ratelimit.ErrLimited):
				denied++
			default:
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()
	require.Empty(t, other)
	require.Equal(t, limit, admitted)
	require.Equal(t, n-limit, denied)
}

func TestSimultaneousCooldownAdmitsOne(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		n    int
	}{{"two", 2}, {"twenty", 20}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			req := ratelimit.Request{
				Rules:    []ratelimit.Rule{rule("per recipient", "r", win(time.Hour, 100))},
				Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: "r", For: time.Minute},
			}
			var (
				wg    sync.WaitGroup
				start = make(chan struct{})
				errs  = make([]error, tc.n)
			)
			for i := range tc.n {
				wg.Go(func() {
					<-start
					_, errs[i] = e.lim.Take(e.ctx, req)
				})
			}
			close(start)
			wg.Wait()
			admitted := 0
			for _, err := range errs {
				if err == nil {
					admitted++
					continue
				}
				le := limitErr(t, err)
				require.True(t, le.Cooldown)
				require.Equal(t, "resend cooldown", le.Rule)
				require.Positive(t, le.RetryAfter)
				require.LessOrEqual(t, le.RetryAfter, time.Minute)
				require.Regexp(t, `^resend cooldown: wait (1m0s|[1-5]?[0-9]s)$`, le.Error())
			}
			require.Equal(t, 1, admitted)
		})
	}
}

func TestRollback(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := rule("per recipient", "r", win(time.Hour, 2))
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "c", For: time.Hour}

	first, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}, Cooldown: cd})
	require.NoError(t, err)
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}})
	require.NoError(t, err)
	e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{r}})

	require.NoError(t, e.lim.Rollback(e.ctx, first))

	// Exactly one slot and the cooldown come back.
	_, err = e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}})
	require.NoError(t, err)
	e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{r}})
	second, err := e.lim.Take(e.ctx, ratelimit.Request{Cooldown: cd})
	require.NoError(t, err)

	// Rolling back again must neither free a slot nor drop the cooldown that
	// now belongs to the second reservation.
	require.NoError(t, e.lim.Rollback(e.ctx, first))
	e.deny(t, ratelimit.Request{Rules: []ratelimit.Rule{r}})
	le := e.deny(t, ratelimit.Request{Cooldown: cd})
	require.True(t, le.Cooldown)
	v, err := e.r.Client.Get(e.ctx, second.CooldownKey).Result()
	require.NoError(t, err)
	require.Equal(t, second.ID, v)
}

func TestRollbackSparesCooldownTakenAfterExpiry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "c", For: 50 * time.Millisecond}
	first, err := e.lim.Take(e.ctx, ratelimit.Request{Cooldown: cd})
	require.NoError(t, err)
	var second *ratelimit.Reservation
	testenv.WaitFor(t, 5*time.Second, "cooldown expires", func() bool {
		res, err := e.lim.Take(e.ctx, ratelimit.Request{Cooldown: &ratelimit.Cooldown{Name: cd.Name, Key: cd.Key, For: time.Hour}})
		second = res
		return err == nil
	})
	require.NoError(t, e.lim.Rollback(e.ctx, first))
	v, err := e.r.Client.Get(e.ctx, second.CooldownKey).Result()
	require.NoError(t, err)
	require.Equal(t, second.ID, v)
}

// RetryAfter must be the time until the entry whose departure makes room
// leaves the window: the oldest one normally, a newer one when the log holds
// more than the limit (the limit was lowered). The expected value is bounded
// by the Redis clock read just before and after the denied Take.
func TestRetryAfterIsExact(t *testing.T) {
	t.Parallel()
	e := setup(t)
	const window = 10 * time.Second
	roomy := rule("per recipient", "r", win(window, 100))
	var scores []int64
	for i := range 3 {
		if i > 0 {
			// Space the entries so a wrong pick is far outside the bounds.
			last := scores[len(scores)-1]
			testenv.WaitFor(t, 5*time.Second, "redis clock advances", func() bool { return redisMS(t, e) >= last+150 })
		}
		res, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{roomy}})
		require.NoError(t, err)
		s, err := e.r.Client.ZScore(e.ctx, res.Keys[0], res.ID).Result()
		require.NoError(t, err)
		scores = append(scores, int64(s))
	}
	tests := []struct {
		limit int
		entry int // index into scores of the entry that must leave
	}{
		{limit: 3, entry: 0},
		{limit: 2, entry: 1},
		{limit: 1, entry: 2},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("limit %d", tc.limit), func(t *testing.T) {
			before := redisMS(t, e)
			_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{rule("per recipient", "r", win(window, tc.limit))}})
			after := redisMS(t, e)
			le := limitErr(t, err)
			leaves := scores[tc.entry] + window.Milliseconds()
			require.GreaterOrEqual(t, le.RetryAfter, time.Duration(leaves-after)*time.Millisecond)
			require.LessOrEqual(t, le.RetryAfter, time.Duration(leaves-before)*time.Millisecond)
			require.Positive(t, le.RetryAfter)
			require.LessOrEqual(t, le.RetryAfter, window)
		})
	}
}

func TestRetryAfterIsReachable(t *testing.T) {
	t.Parallel()
	e := setup(t)
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("per recipient", "r", win(time.Second, 1))}}
	_, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	le := e.deny(t, req)
	require.Positive(t, le.RetryAfter)
	require.LessOrEqual(t, le.RetryAfter, time.Second)
	testenv.WaitFor(t, le.RetryAfter+5*time.Second, "admitted again once the entry left the window", func() bool {
		_, err := e.lim.Take(e.ctx, req)
		return err == nil
	})
}

func TestKeysArePrefixedTrimmedAndExpire(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := rule("per recipient", "r", win(500*time.Millisecond, 1000), win(time.Second, 1000), win(time.Hour, 0))
	cd := &ratelimit.Cooldown{Name: "resend cooldown", Key: "r", For: time.Minute}
	first, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}})
	require.NoError(t, err)
	require.Len(t, first.Keys, 1)
	log := first.Keys[0]

	// Keep taking (which keeps the log from expiring) until the first entry
	// is older than the longest limited window: only trimming removes it.
	testenv.WaitFor(t, 10*time.Second, "first entry trimmed from a live log", func() bool {
		_, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}})
		require.NoError(t, err)
		_, err = e.r.Client.ZScore(e.ctx, log, first.ID).Result()
		return errors.Is(err, redis.Nil)
	})
	n, err := e.r.Client.ZCard(e.ctx, log).Result()
	require.NoError(t, err)
	require.Positive(t, n)

	res, err := e.lim.Take(e.ctx, ratelimit.Request{Rules: []ratelimit.Rule{r}, Cooldown: cd})
	require.NoError(t, err)
	for _, k := range append(res.Keys, res.CooldownKey) {
		require.True(t, strings.HasPrefix(k, e.r.Prefix), k)
	}
	ttl, err := e.r.Client.PTTL(e.ctx, log).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, time.Second, "log expires with its longest limited window, not the unlimited hour")
	ttl, err = e.r.Client.PTTL(e.ctx, res.CooldownKey).Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, time.Minute)
}

func TestLimitErrorMessages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err     ratelimit.LimitError
		want    string
		seconds int
	}{
		{ratelimit.LimitError{Rule: "per recipient", Window: time.Hour, Limit: 5, RetryAfter: 90 * time.Second}, "per recipient: over the per-hour limit (5)", 90},
		{ratelimit.LimitError{Rule: "per IP", Window: time.Second, Limit: 1, RetryAfter: 10 * time.Millisecond}, "per IP: over the per-second limit (1)", 1},
		{ratelimit.LimitError{Rule: "per API key", Window: time.Minute, Limit: 60}, "per API key: over the per-minute limit (60)", 1},
		{ratelimit.LimitError{Rule: "global email", Window: 24 * time.Hour, Limit: 1000}, "global email: over the per-day limit (1000)", 1},
		{ratelimit.LimitError{Rule: "rate limit cfg-1 (provider aliyun)", Window: 10 * time.Minute, Limit: 7}, "rate limit cfg-1 (provider aliyun): over the per 10m0s limit (7)", 1},
		{ratelimit.LimitError{Key: "k", Window: time.Hour, Limit: 2}, "k: over the per-hour limit (2)", 1},
		{ratelimit.LimitError{Rule: "resend cooldown", Cooldown: true, RetryAfter: 41*time.Second + 200*time.Millisecond}, "resend cooldown: wait 42s", 42},
		{ratelimit.LimitError{Rule: "resend cooldown", Cooldown: true, RetryAfter: 42 * time.Second}, "resend cooldown: wait 42s", 42},
	}
	for _, tc := range tests {
		t.Run(tc.want, func(t *testing.T) {
			require.Equal(t, tc.want, tc.err.Error())
			require.Equal(t, tc.seconds, tc.err.RetryAfterSeconds())
			require.ErrorIs(t, fmt.Errorf("wrapped: %w", &tc.err), ratelimit.ErrLimited)
		})
	}
}

func BenchmarkTake(b *testing.B) {
	r := testenv.NewRedis(b)
	lim := ratelimit.New(r.Client, r.Prefix)
	ctx := context.Background()
	windows := func(base int) []ratelimit.Window {
		return []ratelimit.Window{win(time.Second, base), win(time.Minute, 10*base), win(time.Hour, 100*base), win(24*time.Hour, 1000*base)}
	}
	// Realistic shape: many recipients and IPs, one API key, a global and a
	// provider config; limits high enough that every Take is admitted.
	request := func(i int) ratelimit.Request {
		return ratelimit.Request{
			Rules: []ratelimit.Rule{
				{Name: "per recipient", Key: fmt.Sprintf("rcpt:%d", i%1000), Windows: windows(1_000_000)},
				{Name: "per IP", Key: fmt.Sprintf("ip:%d", i%100), Windows: windows(1_000_000)},
				{Name: "per API key", Key: "key:bench", Windows: windows(1_000_000)},
				{Name: "global email", Key: "global", Windows: windows(1_000_000)},
				{Name: "rate limit cfg-1 (provider aliyun)", Key: "config:cfg-1", Windows: windows(1_000_000)},
			},
			Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: fmt.Sprintf("rcpt:%d", i), For: time.Minute},
		}
	}
	// Shared across runs: each cooldown key must be new or the Take is denied.
	var next atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if _, err := lim.Take(ctx, request(int(next.Add(1)))); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same with an Idempotency-Key entry (ratelimit.Once): still one
	// script and one round trip; what it adds is the entry's lookup and
	// writes inside the script.
	b.Run("serial, once", func(b *testing.B) {
		for b.Loop() {
			i := int(next.Add(1))
			req := request(i)
			req.Once = &ratelimit.Once{Key: fmt.Sprintf("bench:%d", i), Digest: "d", IDs: "id", Lease: time.Minute, TTL: time.Minute}
			if _, err := lim.Take(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := lim.Take(ctx, request(int(next.Add(1)))); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// Then's writes belong to the admitted request: they run in the same
// script, in order, with their replies returned, and a refused request
// writes nothing. With no limit at all they still run.
func TestThenRunsOnlyWhenAdmitted(t *testing.T) {
	e := setup(t)
	key := e.r.Prefix + "then"
	then := []rdb.Command{{"HSET", key, "n", 1}, {"HGETALL", key}, {"PEXPIRE", key, 60000}}
	req := ratelimit.Request{Rules: []ratelimit.Rule{rule("r", "then-rule", win(time.Minute, 1))}, Then: then}

	res, err := e.lim.Take(e.ctx, req)
	require.NoError(t, err)
	require.Equal(t, []any{int64(1), []any{"n", "1"}, int64(1)}, res.Replies)

	require.NoError(t, e.r.Client.Del(e.ctx, key).Err())
	_, err = e.lim.Take(e.ctx, req)
	require.ErrorIs(t, err, ratelimit.ErrLimited)
	n, err := e.r.Client.Exists(e.ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "a refused request wrote nothing")

	res, err = e.lim.Take(e.ctx, ratelimit.Request{Then: then})
	require.NoError(t, err)
	require.Len(t, res.Replies, 3, "no limits, and the writes still ran")
}

// Keys are tagged by what they protect, so that a Redis Cluster spreads
// them; a rule and a cooldown on the same thing share a tag (and a slot).
func TestKeysAreTaggedByWhatTheyProtect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	res, err := e.lim.Take(e.ctx, ratelimit.Request{
		Rules:    []ratelimit.Rule{rule("per recipient", "email:a@x", win(time.Hour, 5)), rule("per IP", "ip:10.0.0.1", win(time.Hour, 5))},
		Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: "email:a@x", For: time.Minute},
	})
	require.NoError(t, err)
	require.Len(t, res.Keys, 2)
	require.Equal(t, e.r.Prefix+"ratelimit:{email:a@x}:log:email:a@x", res.Keys[0])
	require.Equal(t, e.r.Prefix+"ratelimit:{ip:10.0.0.1}:log:ip:10.0.0.1", res.Keys[1])
	require.Equal(t, e.r.Prefix+"ratelimit:{email:a@x}:cooldown:email:a@x", res.CooldownKey)
	require.NoError(t, e.lim.Rollback(e.ctx, res))
	for _, k := range append(res.Keys, res.CooldownKey) {
		n, err := e.r.Client.Exists(e.ctx, k).Result()
		require.NoError(t, err)
		if k == res.CooldownKey {
			require.Zero(t, n, "rollback removes the cooldown it set")
			continue
		}
		card, err := e.r.Client.ZCard(e.ctx, k).Result()
		require.NoError(t, err)
		require.Zero(t, card, "rollback removes the reservation from %s", k)
	}
}

// Then commands on keys of different slots (a code under the recipient, a
// status record under the task) all run, in order, with their replies; on
// a Redis Cluster one script could not hold them.
func TestThenSpansSlots(t *testing.T) {
	t.Parallel()
	e := setup(t)
	code, rec := e.r.Prefix+"verify:{email:a@x}", e.r.Prefix+"status:{task-1}"
	res, err := e.lim.Take(e.ctx, ratelimit.Request{
		Rules:    []ratelimit.Rule{rule("per recipient", "email:a@x", win(time.Hour, 5)), rule("per IP", "ip:10.0.0.2", win(time.Hour, 5))},
		Cooldown: &ratelimit.Cooldown{Name: "resend cooldown", Key: "email:a@x", For: time.Minute},
		Then: []rdb.Command{{"HGETALL", code}, {"DEL", code}, {"HSET", code, "digest", "d"}, {"HSET", rec, "status", "queued"},
			{"PEXPIRE", rec, 60_000}, {"PEXPIRE", code, 60_000}},
	})
	require.NoError(t, err)
	require.Len(t, res.Replies, 6)
	require.Equal(t, []any{int64(0), int64(1), int64(1), int64(1), int64(1)}, res.Replies[1:])
	for _, k := range []string{code, rec} {
		ttl, err := e.r.Client.PTTL(e.ctx, k).Result()
		require.NoError(t, err)
		require.Positive(t, ttl, k)
	}
}
