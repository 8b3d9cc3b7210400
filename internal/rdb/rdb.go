package rdb

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Defaults applied when neither the URL's query (dial_timeout, read_timeout,
// write_timeout, pool_size) nor an Option sets them.
const (
	DefaultDialTimeout  = 3 * time.Second
	DefaultReadTimeout  = 2 * time.Second
	DefaultWriteTimeout = 2 * time.Second
)

// DefaultPoolSize is per client; API handlers and consumer workers each hold
// a connection only for one round trip, so a few per CPU is plenty.
func DefaultPoolSize() int { return 10 * runtime.GOMAXPROCS(0) }

// Option adjusts the parsed options before the client is built.
type Option func(*redis.Options)

// WithClientName names the connections (CLIENT LIST shows it), so an operator
// can tell which program holds which connection.
func WithClientName(name string) Option {
	return func(o *redis.Options) { o.ClientName = name }
}

// WithPoolSize sets the connection pool size.
func WithPoolSize(n int) Option {
	return func(o *redis.Options) { o.PoolSize = n }
}

// WithTimeouts sets the dial, read and write timeouts; a zero leaves that one
// as it is.
func WithTimeouts(dial, read, write time.Duration) Option {
	return func(o *redis.Options) {
		if dial != 0 {
			o.DialTimeout = dial
		}
		if read != 0 {
			o.ReadTimeout = read
		}
		if write != 0 {
			o.WriteTimeout = write
		}
	}
}

// Modes of REDIS_AUTOPIPELINE.
const (
	// AutoPipelineOff sends each caller's command on a pooled connection of
	// its own: one write and one read per command.
	AutoPipelineOff = "off"
	// AutoPipelineOn coalesces concurrent callers' single commands (a
	// script, a GET) into one write on one connection (go-redis's blocking
	// AutoPipeline). A Pipeline still takes a pooled connection of its own.
	AutoPipelineOn = "on"
	// AutoPipelineFullDuplex is AutoPipelineOn on one held connection that
	// writes and reads at once, and that pipelines ride too.
	AutoPipelineFullDuplex = "full-duplex"
)

// AutoPipelineModes lists the modes REDIS_AUTOPIPELINE accepts.
var AutoPipelineModes = []string{AutoPipelineOff, AutoPipelineOn, AutoPipelineFullDuplex}

// WithAutoPipeline makes Open return a client whose commands go through
// go-redis's auto-pipeliner (see the modes above); AutoPipelineOff, or a
// mode it does not know, leaves the plain client. docs/performance.md has
// what each mode measured on the API's and the consumer's hot paths.
func WithAutoPipeline(mode string) Option {
	return func(o *redis.Options) {
		switch mode {
		case AutoPipelineOn, AutoPipelineFullDuplex:
			ao := redis.DefaultBlockingAutoPipelineOptions()
			ao.FullDuplex = mode == AutoPipelineFullDuplex
			o.AutoPipelineOptions = ao
		default:
			o.AutoPipelineOptions = nil
		}
	}
}

// autoPipelined is a client whose commands go through its auto-pipeliner.
// Closing it stops the pipeliner, then closes the client under it.
type autoPipelined struct {
	*redis.AutoPipeliner
	base redis.UniversalClient
}

func (a *autoPipelined) Close() error {
	return errors.Join(a.AutoPipeliner.Close(), a.base.Close())
}

// autoPipeline wraps c when o asks for auto-pipelining.
func autoPipeline(c redis.UniversalClient, o *redis.Options) (redis.UniversalClient, error) {
	if o.AutoPipelineOptions == nil {
		return c, nil
	}
	ap, err := c.AutoPipeline()
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("rdb: auto-pipelining: %w", err)
	}
	return &autoPipelined{AutoPipeliner: ap, base: c}, nil
}

// AutoPipelineMode reports how c batches its commands: one of
// AutoPipelineModes, read from the auto-pipeliner itself.
func AutoPipelineMode(c redis.UniversalClient) string {
	a, ok := c.(*autoPipelined)
	switch {
	case !ok:
		return AutoPipelineOff
	case a.Config().FullDuplex:
		return AutoPipelineFullDuplex
	}
	return AutoPipelineOn
}

// AsCluster returns the Redis Cluster client under c, auto-pipelined or
// not, for the callers that spread their keys per slot themselves.
func AsCluster(c redis.UniversalClient) (*redis.ClusterClient, bool) {
	if a, ok := c.(*autoPipelined); ok {
		c = a.base
	}
	cc, ok := c.(*redis.ClusterClient)
	return cc, ok
}

// Command is one Redis command as data: its name, then its arguments. It
// lets a package hand its writes to another package's script (see
// ratelimit.Request.Then) or to a pipeline (Do) without either knowing the
// other's keys.
type Command []any

// Do queues c on p.
func (c Command) Do(ctx context.Context, p redis.Pipeliner) *redis.Cmd { return p.Do(ctx, c...) }

// FailFast bounds every wait of a call by d (connect, read, write, a free
// pooled connection) and turns go-redis's retries off. By default a
// timed-out call is retried three times, so a Redis that stopped answering
// held each caller for 8 s (internal/fault measured it). Retries buy
// nothing here: the pool drops dead connections before reusing them, and
// callers decide what a failure means (the API answers 503, the consumer
// pauses).
func FailFast(d time.Duration) Option {
	return func(o *redis.Options) {
		o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout = d, d, d, d
		o.MaxRetries = -1 // go-redis: -1 is none
	}
}

// Modes of REDIS_MODE.
const (
	Single   = "single"   // one Redis (REDIS_URL: redis://host:port/db)
	Cluster  = "cluster"  // Redis Cluster (redis://h1:p1?addr=h2:p2&addr=h3:p3)
	Sentinel = "sentinel" // a master found through Sentinel (redis://s1:p1?addr=s2:p2&master_name=NAME)
)

// Modes lists the modes REDIS_MODE accepts.
var Modes = []string{Single, Cluster, Sentinel}

// Open returns a client for mode: one Redis, a Redis Cluster, or the master
// that Sentinel names (and follows across a failover). opts apply to every
// connection pool the client keeps.
func Open(mode, rawURL string, opts ...Option) (redis.UniversalClient, error) {
	switch mode {
	case "", Single:
		c, err := New(rawURL, opts...)
		if err != nil {
			return nil, err
		}
		return autoPipeline(c, c.Options())
	case Cluster:
		co, err := redis.ParseClusterURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("rdb: parse Redis Cluster URL: %w", unwrapURLError(err))
		}
		o := options(rawURL, opts)
		co.ClientName, co.Protocol, co.ContextTimeoutEnabled = o.ClientName, o.Protocol, o.ContextTimeoutEnabled
		co.DialTimeout, co.ReadTimeout, co.WriteTimeout, co.PoolTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout
		co.PoolSize, co.MaxRetries, co.PipelinePoolSize = o.PoolSize, o.MaxRetries, o.PipelinePoolSize
		// go-redis reloads the slot map on MOVED and ASK only; a master
		// that died answers neither, so without a periodic reload its
		// slots stay routed to it long after its replica took over (60 s
		// by default; internal/fault's cluster scenarios measured it). One
		// CLUSTER SLOTS a second per client is cheap.
		co.ClusterStateReloadInterval = time.Second
		co.AutoPipelineOptions = o.AutoPipelineOptions
		return autoPipeline(redis.NewClusterClient(co), o)
	case Sentinel:
		fo, err := redis.ParseFailoverURL(rawURL)
		if err != nil {
			return nil, fmt.Errorf("rdb: parse Redis Sentinel URL: %w", unwrapURLError(err))
		}
		if fo.MasterName == "" {
			return nil, errors.New("rdb: Redis Sentinel URL: master_name is required")
		}
		o := options(rawURL, opts)
		fo.ClientName, fo.Protocol, fo.ContextTimeoutEnabled = o.ClientName, o.Protocol, o.ContextTimeoutEnabled
		fo.DialTimeout, fo.ReadTimeout, fo.WriteTimeout, fo.PoolTimeout = o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout
		fo.PoolSize, fo.MaxRetries, fo.PipelinePoolSize = o.PoolSize, o.MaxRetries, o.PipelinePoolSize
		fo.AutoPipelineOptions = o.AutoPipelineOptions
		return autoPipeline(redis.NewFailoverClient(fo), o)
	}
	return nil, fmt.Errorf("rdb: REDIS_MODE %q: must be one of %s", mode, strings.Join(Modes, ", "))
}

// unwrapURLError drops url.Error's copy of the whole URL, password included.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// New parses rawURL and returns a client for one Redis that connects
// lazily.
func New(rawURL string, opts ...Option) (*redis.Client, error) {
	o, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("rdb: parse Redis URL: %w", unwrapURLError(err))
	}
	setDefaults(rawURL, o, opts)
	return redis.NewClient(o), nil
}

// options returns the defaults and opts as one Options, for the cluster
// and failover clients, whose URLs carry no timeouts of their own here.
func options(rawURL string, opts []Option) *redis.Options {
	o := &redis.Options{}
	setDefaults(rawURL, o, opts)
	return o
}

func setDefaults(rawURL string, o *redis.Options, opts []Option) {
	o.DialTimeout = cmp.Or(o.DialTimeout, DefaultDialTimeout)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	o.PoolSize = cmp.Or(o.PoolSize, DefaultPoolSize())
	// ContextTimeoutEnabled stays off: with it, go-redis sends every
	// Pipeline() of a full-duplex auto-pipelined client on a pooled
	// connection of its own (the FD path cannot abandon a batch shared with
	// other callers when one caller's context ends), so the consumer's
	// pipelines from concurrent workers were never merged into one write
	// (issue 22; TestPipelinesFromConcurrentCallersShareOneConnection).
	// Every call is bounded by ReadTimeout and WriteTimeout instead, which
	// FailFast sets to REDIS_TIMEOUT on api and consumer; a context's
	// deadline only matters when shorter than those, and a cancelled
	// context still stops a call before it is sent.
	o.ContextTimeoutEnabled = false
	// RESP3 makes go-redis peek the socket for push notifications before
	// every command: one extra read syscall each, for a feature msgpulse
	// does not use (its pub/sub has a connection of its own). A URL that
	// asks for ?protocol=3 keeps it.
	if !strings.Contains(rawURL, "protocol=") {
		o.Protocol = 2
	}
	for _, opt := range opts {
		opt(o)
	}
	// A fail-fast client (FailFast) without the full-duplex connection
	// runs its pipelines on the main pool, not go-redis's pipeline pool: a
	// pipeline that finds no connection there dials one, and when the
	// handshake times out it spills to the main pool and dials again, so
	// a Redis that stopped answering held it for twice REDIS_TIMEOUT (a
	// failed batch's records: 1.0 s at 500 ms; issue 38). The full-duplex
	// pipeliner keeps the pool: its held connection comes from there.
	if o.MaxRetries < 0 && (o.AutoPipelineOptions == nil || !o.AutoPipelineOptions.FullDuplex) {
		o.PipelinePoolSize = -1
	}
}

// Keys returns every key matching pattern. On a Redis Cluster it scans
// every master: SCAN and KEYS only see the node they run on. Tests and the
// load generator use it; msgpulse itself never scans.
func Keys(ctx context.Context, c redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var keys []string
	err := scanEach(ctx, c, pattern, func(_ context.Context, batch []string) error {
		mu.Lock()
		keys = append(keys, batch...)
		mu.Unlock()
		return nil
	})
	return keys, err
}

// DeletePrefix deletes every key under prefix as the scan finds them: a
// pipeline of UNLINKs per thousand keys, key by key (on a cluster one
// command may not span slots). A load generator's run can leave millions
// of keys (status records live for days): one pipeline of them all
// outlived the client's read timeout and left them there, and every
// test's cleanup after that scanned them all.
func DeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) error {
	return scanEach(ctx, c, prefix+"*", func(ctx context.Context, batch []string) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		return err
	})
}

// scanEach calls fn with the keys matching pattern, a thousand at a time,
// scanning every master of a Redis Cluster (at once) or the one Redis.
func scanEach(ctx context.Context, c redis.UniversalClient, pattern string, fn func(context.Context, []string) error) error {
	const batchSize = 1000
	scan := func(ctx context.Context, node redis.UniversalClient) error {
		iter := node.Scan(ctx, 0, pattern, batchSize).Iterator()
		batch := make([]string, 0, batchSize)
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == batchSize {
				if err := fn(ctx, batch); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		if err := iter.Err(); err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		return fn(ctx, batch)
	}
	if cc, ok := AsCluster(c); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	}
	return scan(ctx, c)
}
