package rdb_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

const fenceTimeout = 250 * time.Millisecond

func newFence(t *testing.T, c redis.UniversalClient, replicas int) *rdb.Fence {
	t.Helper()
	f, err := rdb.NewFence(c, rdb.FenceConfig{Replicas: replicas, Timeout: fenceTimeout, Prefix: "test:fence:" + testenv.ID() + ":"})
	require.NoError(t, err)
	t.Cleanup(f.Close)
	return f
}

// A write answered before Wait is on the replica when Wait returns; with
// the replica frozen (a partition: its connection stays up, no acks come)
// Wait fails within REDIS_WAIT_TIMEOUT, and succeeds again once it thaws.
func TestFenceWaitsForTheReplica(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	replica := r.Replica(t)
	f := newFence(t, r.Master, 1)
	ctx := testenv.Context(t, 30*time.Second)

	var worst time.Duration
	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		require.NoError(t, r.Master.Set(ctx, key, i, 0).Err())
		start := time.Now()
		require.NoError(t, f.Wait(ctx, key))
		worst = max(worst, time.Since(start))
		// Read on the replica at once: the fence promised it is there.
		got, err := replica.Get(ctx, key).Int()
		require.NoError(t, err, "write %d fenced but not on the replica", i)
		require.Equal(t, i, got)
	}
	t.Logf("fence with a healthy replica: worst of 50 sequential waits %s", worst)

	r.StopReplica(t)
	require.NoError(t, r.Master.Set(ctx, "during", 1, 0).Err())
	start := time.Now()
	err := f.Wait(ctx, "during")
	took := time.Since(start)
	require.ErrorIs(t, err, rdb.ErrNotDurable)
	require.Less(t, took, fenceTimeout+200*time.Millisecond, "a frozen replica fails the fence within its timeout")
	require.GreaterOrEqual(t, took, fenceTimeout-10*time.Millisecond)
	t.Logf("fence with a frozen replica: failed after %s (%v)", took, err)

	r.ResumeReplica(t)
	testenv.WaitFor(t, 10*time.Second, "the fence passes once the replica thaws", func() bool { return f.Wait(ctx, "during") == nil })
	got, err := replica.Get(ctx, "during").Int()
	require.NoError(t, err)
	require.Equal(t, 1, got)
}

// roundLog records when each fence round's pipeline is sent.
type roundLog struct {
	mu     sync.Mutex
	starts []time.Time
	delay  time.Duration
}

func (l *roundLog) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (l *roundLog) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (l *roundLog) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if slices.ContainsFunc(cmds, func(c redis.Cmder) bool { return c.Name() == "wait" }) {
			time.Sleep(l.delay) // a slow round, so that callers pile up behind it
			l.mu.Lock()
			l.starts = append(l.starts, time.Now())
			l.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// Concurrent callers share rounds, and each one's round was sent after
// its call: a round in flight when a caller arrives is not its round.
func TestFenceGroupCommit(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	log := &roundLog{delay: 5 * time.Millisecond}
	r.Master.AddHook(log)
	f := newFence(t, r.Master, 1)
	ctx := testenv.Context(t, 30*time.Second)

	const callers = 200
	type call struct{ at, back time.Time }
	calls := make([]call, callers)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i%20) * time.Millisecond) // spread the arrivals over several rounds
			key := fmt.Sprintf("g%d", i)
			if err := r.Master.Set(ctx, key, i, 0).Err(); err != nil {
				errs <- err
				return
			}
			calls[i].at = time.Now()
			if err := f.Wait(ctx, key); err != nil {
				errs <- err
			}
			calls[i].back = time.Now()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	log.mu.Lock()
	starts := slices.Clone(log.starts)
	log.mu.Unlock()
	require.Less(t, len(starts), callers/4, "callers share rounds")
	for i, c := range calls {
		require.True(t, slices.ContainsFunc(starts, func(s time.Time) bool { return !s.Before(c.at) && !s.After(c.back) }),
			"caller %d: no round was sent between its call and its return", i)
	}
	t.Logf("%d callers, %d rounds", callers, len(starts))
}

// A master with no replica online does not hold callers for the timeout:
// the fence asks for the replicas it has (ROLE), and leaves a master
// that has none to min-replicas-to-write. The one round that still
// counted a replica that just died fails; the next ones pass at once.
func TestFenceWithoutReplicaDoesNotBlock(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	f := newFence(t, r.Master, 1)
	ctx := testenv.Context(t, 30*time.Second)
	require.NoError(t, f.Wait(ctx, "k"))

	r.KillReplica(t)
	testenv.WaitFor(t, 10*time.Second, "the master drops the dead replica", func() bool { return r.OnlineReplicas(t) == 0 })
	fresh := newFence(t, r.Master, 1)
	for _, tc := range []struct {
		name string
		f    *rdb.Fence
		fail int // rounds that may still count the dead replica
	}{{"fence in use when the replica died", f, 1}, {"fence started after", fresh, 0}} {
		t.Run(tc.name, func(t *testing.T) {
			failed := 0
			for range 5 {
				start := time.Now()
				err := tc.f.Wait(ctx, "k")
				if err != nil {
					require.ErrorIs(t, err, rdb.ErrNotDurable)
					failed++
					continue
				}
				require.Less(t, time.Since(start), fenceTimeout/2, "a master without replicas is not waited on")
			}
			require.LessOrEqual(t, failed, tc.fail)
		})
	}
}

// A master refusing writes for want of replicas (min-replicas-to-write)
// fails the fence with Redis's NOREPLICAS: the caller's own writes were
// refused the same way.
func TestFenceNoReplicas(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{MasterArgs: []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}})
	f := newFence(t, r.Master, 1)
	ctx := testenv.Context(t, 30*time.Second)
	require.NoError(t, f.Wait(ctx, "k"))
	r.StopReplica(t)
	testenv.WaitFor(t, 10*time.Second, "the master refuses writes", func() bool {
		return r.Master.Set(ctx, "k", 1, 0).Err() != nil
	})
	err := f.Wait(ctx, "k")
	require.Error(t, err)
	require.Contains(t, err.Error(), "NOREPLICAS")
	r.ResumeReplica(t)
	testenv.WaitFor(t, 10*time.Second, "writes and the fence pass again", func() bool { return f.Wait(ctx, "k") == nil })
}

// With Replicas 0 the fence sends nothing; a nil fence neither.
func TestFenceOff(t *testing.T) {
	rd := testenv.NewRedis(t)
	var sent atomic.Int64
	rd.AddHook(testenv.CommandHook(func(redis.Cmder) error { sent.Add(1); return nil }))
	f, err := rdb.NewFence(rd.Client, rdb.FenceConfig{Prefix: rd.Prefix})
	require.NoError(t, err)
	defer f.Close()
	ctx := testenv.Context(t, 10*time.Second)
	require.NoError(t, f.Wait(ctx, "k"))
	var nilFence *rdb.Fence
	require.NoError(t, nilFence.Wait(ctx, "k"))
	require.Equal(t, 0, f.Replicas())
	require.Zero(t, sent.Load(), "an off fence sends nothing")
}

// On the test's Redis, whatever its mode: keys of many slots are fenced
// on each of their masters (a Redis Cluster's replicas acknowledge; one
// Redis without replicas passes at once).
func TestFenceOnTheTestRedis(t *testing.T) {
	rd := testenv.NewRedis(t)
	f := newFence(t, rd.Client, 1)
	ctx := testenv.Context(t, 30*time.Second)
	keys := make([]string, 20)
	for i := range keys {
		keys[i] = rd.Prefix + fmt.Sprintf("{t%d}:x", i)
		require.NoError(t, rd.Client.Set(ctx, keys[i], i, time.Minute).Err())
	}
	start := time.Now()
	require.NoError(t, f.Wait(ctx, keys...))
	t.Logf("fenced %d keys (mode %s) in %s", len(keys), rd.Mode, time.Since(start))
	require.NoError(t, f.WaitWritten(ctx, keys...), "every key written is on its master")
}

// WaitWritten also finds each written key on the master its round ran on.
// A write that went to another server (the old master, on a connection
// the client had not yet moved when it followed a failover) is not
// covered by a WAIT on this one: that caller fails, and only that one,
// while the callers sharing its round pass.
func TestFenceWaitWrittenFindsTheKeys(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	other := testenv.NewRedis(t) // stands for the old master
	f := newFence(t, r.Master, 1)
	ctx := testenv.Context(t, 30*time.Second)

	lost := other.Prefix + "written-elsewhere"
	require.NoError(t, other.Client.Set(ctx, lost, 1, time.Minute).Err())
	errs := make([]error, 21)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			key := fmt.Sprintf("w%d", i)
			if errs[i] = r.Master.Set(ctx, key, i, 0).Err(); errs[i] == nil {
				errs[i] = f.WaitWritten(ctx, key)
			}
		})
	}
	require.NoError(t, r.Master.Set(ctx, "w-here", 1, 0).Err())
	wg.Go(func() { errs[20] = f.WaitWritten(ctx, "w-here", lost) })
	wg.Wait()
	for i := range 20 {
		require.NoError(t, errs[i], "caller %d wrote on the fenced master", i)
	}
	require.ErrorIs(t, errs[20], rdb.ErrNotDurable, "a key written on another server")
	require.ErrorContains(t, errs[20], "not on the master the fence reached")
	require.NoError(t, f.Wait(ctx, lost), "Wait (deleted keys, hash tags only) does not look for them")
}

func TestFenceConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  rdb.FenceConfig
		err  string
	}{
		{"defaults", rdb.FenceConfig{}, ""},
		{"negative replicas", rdb.FenceConfig{Replicas: -1}, "must not be negative"},
		{"timeout under a millisecond", rdb.FenceConfig{Replicas: 1, Timeout: time.Microsecond}, "at least 1ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				require.Equal(t, rdb.DefaultWaitTimeout, tc.cfg.Timeout)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// A round blocked in WAIT holds a connection of its own: the commands of
// an auto-pipelined client (full-duplex: one held connection for all)
// are not queued behind it.
func TestFenceDoesNotHoldTheAutoPipeline(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	for _, mode := range rdb.AutoPipelineModes {
		t.Run(mode, func(t *testing.T) {
			c, err := rdb.Open(rdb.Single, r.URL(), rdb.FailFast(time.Second), rdb.WithAutoPipeline(mode))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			f := newFence(t, c, 1)
			ctx := testenv.Context(t, 30*time.Second)
			require.NoError(t, f.Wait(ctx, "k"))
			r.StopReplica(t)
			defer r.ResumeReplica(t)
			done := make(chan error, 1)
			go func() { done <- f.Wait(ctx, "k") }()
			// Wait until the round is blocked in WAIT on the master.
			testenv.WaitFor(t, 5*time.Second, "a client blocked in WAIT", func() bool {
				info, err := r.Master.Info(ctx, "clients").Result()
				return err == nil && !strings.Contains(info, "blocked_clients:0\r\n")
			})
			start := time.Now()
			require.NoError(t, c.Set(ctx, "other", 1, 0).Err())
			require.Less(t, time.Since(start), fenceTimeout/2, "a command is not queued behind the round's WAIT")
			require.ErrorIs(t, <-done, rdb.ErrNotDurable)
		})
	}
}
