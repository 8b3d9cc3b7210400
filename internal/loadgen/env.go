package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Env is where a run happens: a throwaway vhost and Redis prefix.
type Env struct {
	AMQPURL       string // of the vhost
	ManagementURL string
	RedisURL      string
	RedisMode     string // REDIS_MODE: single (default), cluster or sentinel
	Prefix        string
	VHost         string
	Redis         redis.UniversalClient
	mc            *mgmt.Client
}

// Options locate the broker and Redis, and the binaries a run starts.
type Options struct {
	AMQPURL       string // base URL; the vhost is replaced
	ManagementURL string
	RedisURL      string
	RedisMode     string    // REDIS_MODE: single (default), cluster or sentinel
	BinDir        string    // prebuilt api and consumer; empty: build them once
	Self          string    // loadgen binary for the baseline server; empty: find it
	ExtraEnv      []string  // KEY=VALUE added to every api and consumer started
	Progress      io.Writer // one line per phase as it ends; nil: none
	ProfileDir    string    // when set, CPU profiles of api and consumer under load go here
	// QuietWait is how long a timed run whose CPU is read (the api's and
	// raw path's max phases, the consumer binary's, the peer's) waits for
	// the machine to go quiet before it starts; 0 only records how busy it
	// was.
	QuietWait time.Duration

	bins     *Binaries
	prof     *profiling
	services map[string][]int // role → local pids of Redis and RabbitMQ, found once
}

// Binaries builds (or finds) the api and consumer once per Options.
func (o *Options) Binaries(ctx context.Context) (*Binaries, error) {
	if o.bins == nil {
		b, err := Build(ctx, o.BinDir)
		if err != nil {
			return nil, err
		}
		o.bins = b
	}
	return o.bins, nil
}

// Close removes built binaries and logs.
func (o *Options) Close() { o.bins.Close() }

func (o *Options) progress(format string, args ...any) {
	if o.Progress != nil {
		_, _ = fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// NewEnv creates the vhost and returns the environment; Close removes it.
func NewEnv(ctx context.Context, o Options, name string) (*Env, error) {
	mc, err := mgmt.New(o.ManagementURL, 0)
	if err != nil {
		return nil, err
	}
	id := randomID()
	vhost := fmt.Sprintf("loadgen-%s-%d-%s", name, time.Now().Unix(), id)
	if err := mc.CreateVHost(ctx, vhost, mc.User()); err != nil {
		return nil, fmt.Errorf("create vhost (management API %s): %w", o.ManagementURL, err)
	}
	amqpURL, err := envconf.WithVHost(o.AMQPURL, vhost)
	if err != nil {
		return nil, err
	}
	rc, err := rdb.Open(o.RedisMode, o.RedisURL)
	if err != nil {
		return nil, err
	}
	return &Env{AMQPURL: amqpURL, ManagementURL: o.ManagementURL, RedisURL: o.RedisURL, RedisMode: o.RedisMode, Prefix: "loadgen:" + id + ":", VHost: vhost, Redis: rc, mc: mc}, nil
}

// Close deletes the vhost and the Redis keys.
func (e *Env) Close() {
	ctx := context.Background()
	_ = e.mc.DeleteVHost(ctx, e.VHost)
	if err := rdb.DeletePrefix(ctx, e.Redis, e.Prefix); err != nil {
		// What is left slows every later scan of this Redis (tests' own
		// cleanups): say so, with what to delete.
		fmt.Fprintf(os.Stderr, "loadgen: could not delete the run's Redis keys (%s*): %v\n", e.Prefix, err)
	}
	_ = e.Redis.Close()
}

// benchTopology is the default model with unbounded, TTL-free main queues:
// a throughput run fills them faster than it drains them, and the
// production drop-head bound would measure the DLQ instead.
func benchTopology() topology.Config {
	c := topology.DefaultConfig()
	for _, ch := range topology.Channels {
		c.Channels[ch] = topology.ChannelConfig{}
	}
	return c
}

func declare(ctx context.Context, env *Env, cfg topology.Config) error {
	m, err := topology.Build(cfg, "")
	if err != nil {
		return err
	}
	conn, err := broker.Dial(ctx, broker.Config{URL: env.AMQPURL})
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	return broker.Declare(conn, m)
}
