// Package testenv gives integration tests their own piece of the real
// RabbitMQ and Redis: a fresh vhost per test (deleted afterwards) and a
// unique Redis key prefix per test (its keys deleted afterwards), so tests
// run in parallel without seeing each other.
//
// It never fakes a broker or a Redis: when one is unreachable the test
// fails with a message saying how to start it (make test starts both).
// Only _test.go files may import it.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/rdb"
)

// Defaults, overridable for a broker or Redis elsewhere.
var (
	AMQPBase      = env("TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
	ManagementURL = env("TEST_RABBITMQ_MANAGEMENT_URL", "http://guest:guest@127.0.0.1:15672")
	RedisURL      = env("TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
	// RedisMode is how RedisURL is read (see rdb.Open): TEST_REDIS_MODE=cluster
	// with TEST_REDIS_URL=redis://h1:p1?addr=h2:p2 runs a package's Redis
	// tests on a Redis Cluster.
	RedisMode = env("TEST_REDIS_MODE", "single")
	// RedisAutoPipeline is REDIS_AUTOPIPELINE for the tests' clients:
	// TEST_REDIS_AUTOPIPELINE=full-duplex runs a package's Redis tests
	// through go-redis's auto-pipeliner.
	RedisAutoPipeline = env("TEST_REDIS_AUTOPIPELINE", "off")
	// Rabbitmqctl is the command line of rabbitmqctl for the broker of
	// TEST_AMQP_URL, for a test that needs what only the CLI does (a
	// memory alarm): TEST_RABBITMQCTL="scripts/rabbitmq4.sh ctl" (an
	// absolute path) for RabbitMQ 4's node.
	Rabbitmqctl = env("TEST_RABBITMQCTL", "rabbitmqctl")
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ID returns a short random hex string.
func ID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

var unsafe = regexp.MustCompile(`[^a-zA-Z0-9]+`)

func slug(t testing.TB) string {
	s := strings.Trim(unsafe.ReplaceAllString(t.Name(), "-"), "-")
	if len(s) > 40 {
		s = s[len(s)-40:]
	}
	return strings.ToLower(s)
}

// Broker is a test's own vhost on the real RabbitMQ.
type Broker struct {
	VHost string
	URL   string // AMQP URL of the vhost on the first node of TEST_AMQP_URL
	// URLs is the vhost on every node TEST_AMQP_URL lists, comma-separated
	// (the same as URL on one node): what programs under test are given.
	URLs string
	Mgmt *mgmt.Client
}

// NewBroker creates a unique vhost for t and deletes it when t ends.
func NewBroker(t testing.TB) *Broker {
	t.Helper()
	return newBroker(t, "")
}

// NewBrokerDefaultType is NewBroker with a vhost whose default queue type
// is queueType: what a declare without x-queue-type gets there (a deployment
// on Amazon MQ 4.2, or a vhost created with --default-queue-type quorum).
func NewBrokerDefaultType(t testing.TB, queueType string) *Broker {
	t.Helper()
	return newBroker(t, queueType)
}

func newBroker(t testing.TB, defaultQueueType string) *Broker {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs RabbitMQ (run without -short)")
	}
	if err := checkQueueType(); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	mc, err := mgmt.New(ManagementURL, 10*time.Second)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	// The creation time in the name lets a later run sweep vhosts that a
	// killed run (timeout, Ctrl-C) could not delete.
	vhost := fmt.Sprintf("test-%s-%d-%s", slug(t), time.Now().Unix(), ID())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sweepOnce.Do(func() { sweep(ctx, mc) })
	t.Cleanup(func() { // first: a vhost half made is deleted too
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := mc.DeleteVHost(ctx, vhost); err != nil {
			t.Logf("testenv: delete vhost %s: %v", vhost, err)
		}
	})
	if defaultQueueType == "" {
		defaultQueueType = runDefaultQueueType()
	}
	if err := mc.CreateVHostOfType(ctx, vhost, mc.User(), defaultQueueType); err != nil {
		t.Fatalf("testenv: create vhost on RabbitMQ (%s): %v\nstart it with `make services` (make test does this)", ManagementURL, err)
	}
	urls, err := envconf.WithVHost(AMQPBase, vhost)
	if err != nil {
		t.Fatalf("testenv: TEST_AMQP_URL: %v", err)
	}
	return &Broker{VHost: vhost, URL: envconf.SplitURLs(urls)[0], URLs: urls, Mgmt: mc}
}

var sweepOnce sync.Once

var staleVHost = regexp.MustCompile(`^(test|loadgen)-.*-(\d{10})-[0-9a-f]{8}$`)

// sweep deletes test vhosts older than an hour: no test runs that long, so
// they belong to runs that were killed before their cleanup.
func sweep(ctx context.Context, mc *mgmt.Client) {
	names, err := mc.VHosts(ctx)
	if err != nil {
		return
	}
	for _, n := range names {
		m := staleVHost.FindStringSubmatch(n)
		if m == nil {
			continue
		}
		if sec, err := strconv.ParseInt(m[2], 10, 64); err == nil && time.Since(time.Unix(sec, 0)) > time.Hour {
			_ = mc.DeleteVHost(ctx, n)
		}
	}
}

// Redis is a test's own key prefix on the real Redis.
type Redis struct {
	Client redis.UniversalClient
	Prefix string
	URL    string
	Mode   string // TEST_REDIS_MODE: single, or cluster/sentinel to run a package's tests on those
}

// NewRedis returns a client and a unique prefix; keys under the prefix are
// deleted when t ends.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs Redis (run without -short)")
	}
	c, err := rdb.Open(RedisMode, RedisURL, rdb.WithAutoPipeline(RedisAutoPipeline))
	if err != nil {
		t.Fatalf("testenv: TEST_REDIS_URL (TEST_REDIS_MODE=%s): %v", RedisMode, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("testenv: Redis at %s: %v\nstart it with `make services` (make test does this)", RedisURL, err)
	}
	prefix := "test:" + slug(t) + ":" + ID() + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rdb.DeletePrefix(ctx, c, prefix); err != nil {
			t.Logf("testenv: delete keys under %s: %v", prefix, err)
		}
		_ = c.Close()
	})
	return &Redis{Client: c, Prefix: prefix, URL: RedisURL, Mode: RedisMode}
}

// WaitFor polls cond every few milliseconds until it holds or timeout passes,
// then fails the test with msg. Use it instead of sleeping.
func WaitFor(t testing.TB, timeout time.Duration, msg string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := 2 * time.Millisecond
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waitFor (%s): %s", timeout, msg)
		}
		time.Sleep(wait) // polling interval, not an assumption about timing
		wait = min(wait*2, 50*time.Millisecond)
	}
}

// Context returns a context that ends with the test (or after timeout).
func Context(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// RefusePublishes makes queues (of the test's vhost) refuse every publish,
// as a full reject-publish queue does: a policy of max-length 0 with
// reject-publish (the lower of a policy's and a queue's own bound applies).
// The returned function removes the policy; it is also removed when t ends.
func (b *Broker) RefusePublishes(t testing.TB, queues ...string) (restore func()) {
	t.Helper()
	quoted := make([]string, len(queues))
	for i, q := range queues {
		quoted[i] = regexp.QuoteMeta(q)
	}
	name := "msgpulse-test-refuse-" + ID()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := b.Mgmt.SetPolicy(ctx, b.VHost, name, mgmt.Policy{Pattern: "^(" + strings.Join(quoted, "|") + ")$", ApplyTo: "queues", Priority: 100,
		Definition: map[string]any{"max-length": 0, "overflow": "reject-publish"}})
	if err != nil {
		t.Fatalf("testenv: set policy on %s: %v", b.VHost, err)
	}
	var once sync.Once
	restore = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := b.Mgmt.DeletePolicy(ctx, b.VHost, name); err != nil {
				t.Errorf("testenv: remove policy %s: %v", name, err)
			}
		})
	}
	t.Cleanup(restore)
	return restore
}
