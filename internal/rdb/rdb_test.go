package rdb_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

func TestNewOptions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		url        string
		opts       []rdb.Option
		addr       string
		db         int
		dial       time.Duration
		read       time.Duration
		write      time.Duration
		pool       int
		clientName string
	}{
		{
			name: "defaults", url: "redis://127.0.0.1:6379/2",
			addr: "127.0.0.1:6379", db: 2,
			dial: rdb.DefaultDialTimeout, read: rdb.DefaultReadTimeout, write: rdb.DefaultWriteTimeout,
			pool: rdb.DefaultPoolSize(),
		},
		{
			name: "url query wins over defaults", url: "redis://h:1/0?dial_timeout=7s&read_timeout=8s&write_timeout=9s&pool_size=3",
			addr: "h:1", dial: 7 * time.Second, read: 8 * time.Second, write: 9 * time.Second, pool: 3,
		},
		{
			name: "options win over url", url: "redis://h:1/0?pool_size=3",
			opts: []rdb.Option{rdb.WithPoolSize(4), rdb.WithTimeouts(time.Second, 0, 5*time.Second), rdb.WithClientName("api")},
			addr: "h:1", dial: time.Second, read: rdb.DefaultReadTimeout, write: 5 * time.Second, pool: 4, clientName: "api",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := rdb.New(tc.url, tc.opts...)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			o := c.Options()
			require.Equal(t, tc.addr, o.Addr)
			require.Equal(t, tc.db, o.DB)
			require.Equal(t, tc.dial, o.DialTimeout)
			require.Equal(t, tc.read, o.ReadTimeout)
			require.Equal(t, tc.write, o.WriteTimeout)
			require.Equal(t, tc.pool, o.PoolSize)
			require.Equal(t, tc.clientName, o.ClientName)
			require.False(t, o.ContextTimeoutEnabled, "it would keep pipelines off the auto-pipeliner")
		})
	}
}

// A fail-fast client runs its pipelines on the main pool unless the
// full-duplex pipeliner holds a connection of the pipeline pool: through
// that pool, a dead Redis held a pipeline for twice the timeout.
func TestFailFastPipelinesSkipThePipelinePoolWithoutFullDuplex(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts []rdb.Option
		pool int
	}{
		{"fail fast", []rdb.Option{rdb.FailFast(time.Second)}, -1},
		{"fail fast, auto-pipelined", []rdb.Option{rdb.FailFast(time.Second), rdb.WithAutoPipeline(rdb.AutoPipelineOn)}, -1},
		{"fail fast, full duplex", []rdb.Option{rdb.WithAutoPipeline(rdb.AutoPipelineFullDuplex), rdb.FailFast(time.Second)}, 0},
		{"go-redis retries", nil, 0},
	} {
		c, err := rdb.New("redis://127.0.0.1:6379/0", tc.opts...)
		require.NoError(t, err)
		require.Equal(t, tc.pool, c.Options().PipelinePoolSize, tc.name)
		_ = c.Close()
	}
}

func TestNewErrorsHidePassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"redis://user:s3cret@host:6379/%zz",
		"http://user:s3cret@host:6379/0",
		"redis://user:s3cret@host:6379/notanumber",
		"redis://user:s3cret@host:6379/0?bogus=1",
	} {
		_, err := rdb.New(u)
		require.Error(t, err, u)
		require.NotContains(t, err.Error(), "s3cret", u)
	}
}

func TestNewDoesNotConnect(t *testing.T) {
	t.Parallel()
	// Port 1 refuses connections: construction must still succeed, and the
	// failure must show up on first use.
	c, err := rdb.New("redis://127.0.0.1:1/0", rdb.WithTimeouts(200*time.Millisecond, 0, 0))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.Error(t, c.Ping(ctx).Err())
}

func TestNewTalksToRealRedis(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	if r.Mode != "" && r.Mode != "single" {
		t.Skipf("New is the one-node client; TEST_REDIS_MODE=%s is Open's (TestOpen*)", r.Mode)
	}
	c, err := rdb.New(r.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	ctx := testenv.Context(t, 5*time.Second)
	require.NoError(t, c.Set(ctx, r.Prefix+"k", "v", time.Minute).Err())
	v, err := r.Client.Get(ctx, r.Prefix+"k").Result()
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

// A script on a pipeline does not fall back to EVAL when Redis has
// forgotten it (restart, SCRIPT FLUSH). Pipelined loads the scripts and runs
// the pipeline again; the NOSCRIPT attempt did not run, so the script's
// effect happens exactly once.
func TestPipelinedReloadsForgottenScripts(t *testing.T) {
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	key := r.Prefix + "counter"
	require.NoError(t, r.Client.ScriptFlush(ctx).Err())
	loads := 0
	var got int64
	err := rdb.Pipelined(ctx, r.Client, func(p redis.Pipeliner) (func() error, error) {
		cmd := incr.Run(ctx, p, []string{key})
		return func() (err error) { got, err = cmd.Int64(); return err }, nil
	}, func(ctx context.Context) error {
		loads++
		return incr.Load(ctx, r.Client).Err()
	})
	require.NoError(t, err)
	require.Equal(t, 1, loads, "NOSCRIPT made it load the script once")
	require.EqualValues(t, 1, got)
	n, err := r.Client.Get(ctx, key).Int()
	require.NoError(t, err)
	require.Equal(t, 1, n, "the script ran once")
}

// REDIS_AUTOPIPELINE: Open returns a client in the asked mode, scripts and
// pipelines from concurrent callers get their own replies through it, and
// Close closes the client under the auto-pipeliner too.
func TestOpenAutoPipeline(t *testing.T) {
	incr := redis.NewScript(`return redis.call('INCRBY', KEYS[1], ARGV[1])`)
	for _, mode := range rdb.AutoPipelineModes {
		t.Run(mode, func(t *testing.T) {
			r := testenv.NewRedis(t)
			ctx := testenv.Context(t, 10*time.Second)
			c, err := rdb.Open(testenv.RedisMode, testenv.RedisURL, rdb.WithAutoPipeline(mode))
			require.NoError(t, err)
			require.Equal(t, mode, rdb.AutoPipelineMode(c))
			_, isCluster := rdb.AsCluster(c)
			require.Equal(t, testenv.RedisMode == rdb.Cluster, isCluster, "AsCluster sees through the auto-pipeliner")

			const callers = 32
			errs := make(chan error, callers)
			for i := range callers {
				go func() {
					key := fmt.Sprintf("%s{c%d}", r.Prefix, i)
					got, err := incr.Run(ctx, c, []string{key}, i).Int()
					if err == nil && got != i {
						err = fmt.Errorf("caller %d: script replied %d", i, got)
					}
					if err == nil {
						err = rdb.Pipelined(ctx, c, func(p redis.Pipeliner) (func() error, error) {
							cmd := incr.Run(ctx, p, []string{key}, 1)
							get := p.Get(ctx, key)
							return func() error {
								if n, err := cmd.Int(); err != nil || n != i+1 {
									return fmt.Errorf("caller %d: pipelined script: %d, %w", i, n, err)
								}
								if v := get.Val(); v != fmt.Sprint(i+1) {
									return fmt.Errorf("caller %d: pipelined GET %q", i, v)
								}
								return get.Err()
							}, nil
						}, func(ctx context.Context) error { return incr.Load(ctx, c).Err() })
					}
					errs <- err
				}()
			}
			for range callers {
				require.NoError(t, <-errs)
			}
			// A forgotten script on a pipeline still comes back as NOSCRIPT
			// through the auto-pipeliner, so Pipelined reloads it.
			require.NoError(t, r.Client.ScriptFlush(ctx).Err())
			loads, key := 0, r.Prefix+"{flushed}"
			require.NoError(t, rdb.Pipelined(ctx, c, func(p redis.Pipeliner) (func() error, error) {
				cmd := incr.Run(ctx, p, []string{key}, 5)
				return cmd.Err, nil
			}, func(ctx context.Context) error { loads++; return incr.Load(ctx, c).Err() }))
			require.Equal(t, 1, loads)
			n, err := r.Client.Get(ctx, key).Int()
			require.NoError(t, err)
			require.Equal(t, 5, n, "the script ran once")
			require.NoError(t, c.Close())
			require.ErrorIs(t, c.Ping(ctx).Err(), redis.ErrClosed, "Close closed the client")
		})
	}
}

// DeletePrefix removes every key under the prefix however many there are
// (it deletes as it scans, a thousand at a time) and nothing else; Keys
// finds them all first.
func TestDeletePrefixDeletesManyKeysAndOnlyThose(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 30*time.Second)
	under, beside := r.Prefix+"many:", r.Prefix+"manyx"
	_, err := r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 2500 {
			p.Set(ctx, fmt.Sprintf("%s{k%d}", under, i), "v", time.Minute)
		}
		p.Set(ctx, beside, "kept", time.Minute)
		return nil
	})
	require.NoError(t, err)
	keys, err := rdb.Keys(ctx, r.Client, under+"*")
	require.NoError(t, err)
	require.Len(t, keys, 2500)
	require.NoError(t, rdb.DeletePrefix(ctx, r.Client, under))
	keys, err = rdb.Keys(ctx, r.Client, under+"*")
	require.NoError(t, err)
	require.Empty(t, keys)
	v, err := r.Client.Get(ctx, beside).Result()
	require.NoError(t, err)
	require.Equal(t, "kept", v)
}

// A pipeline where one script is known and another forgotten: the known
// one runs, the other answers NOSCRIPT. Only that one is sent again after
// the load; the first must not run twice (on a Redis Cluster the same
// happens when some nodes know a script and others do not).
func TestPipelinedSendsAgainOnlyWhatGotNoScript(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := testenv.Context(t, 10*time.Second)
	known := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	forgotten := redis.NewScript(`return redis.call('INCRBY', KEYS[1], 10)`)
	key := r.Prefix + "{p}:n"
	if cc, ok := rdb.AsCluster(r.Client); ok { // forgotten on every node
		require.NoError(t, cc.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		}))
	} else {
		require.NoError(t, r.Client.ScriptFlush(ctx).Err())
	}
	require.NoError(t, known.Load(ctx, r.Client).Err())
	loads := 0
	var a, b *redis.Cmd
	err := rdb.Pipelined(ctx, r.Client, func(p redis.Pipeliner) (func() error, error) {
		a = known.EvalSha(ctx, p, []string{key})
		b = forgotten.EvalSha(ctx, p, []string{key})
		return func() error { return b.Err() }, nil
	}, func(ctx context.Context) error {
		loads++
		return forgotten.Load(ctx, r.Client).Err()
	})
	require.NoError(t, err)
	require.Equal(t, 1, loads)
	require.EqualValues(t, 1, a.Val(), "the known script ran once")
	require.EqualValues(t, 11, b.Val())
	n, err := r.Client.Get(ctx, key).Int64()
	require.NoError(t, err)
	require.EqualValues(t, 11, n, "INCR once, INCRBY 10 once")
}
