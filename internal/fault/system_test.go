package fault

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// faultsVar is the variable that turns the scenarios on (make test-faults).
const faultsVar = "MSGPULSE_FAULTS"

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if (os.Getenv(faultsVar) == "" && os.Getenv(clusterVar) == "" && os.Getenv(partitionVar) == "") || testing.Short() {
		os.Exit(m.Run()) // every scenario skips itself
	}
	if os.Getenv(faultsVar) != "" {
		if err := repairWatermark(); err != nil {
			fmt.Fprintln(os.Stderr, "fault:", err)
			os.Exit(1)
		}
	}
	dir, err := testenv.BuildCommands("msgpulse-fault-", "../../cmd/api", "../../cmd/consumer", "../../cmd/topology", "../../cmd/dlq")
	if err != nil {
		fmt.Fprintln(os.Stderr, "fault:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// requireFaults skips t unless the fault suite was asked for.
func requireFaults(t *testing.T) {
	t.Helper()
	if os.Getenv(faultsVar) == "" {
		t.Skip("set MSGPULSE_FAULTS=1 (make test-faults)")
	}
	if testing.Short() {
		t.Skip("fault scenarios need RabbitMQ, Redis and the binaries (run without -short)")
	}
}

const apiKey = "fault-key-0123456789abcdefgh"

// system is one scenario's msgpulse: its own vhost and Redis prefix, an SMTP
// sink, and the processes the scenario starts.
type system struct {
	t      *testing.T
	name   string
	broker *testenv.Broker
	redis  *testenv.Redis
	sink   *sink
	env    []string
	conn   *amqp.Connection // direct to the broker, for inspecting queues
	queues []string         // every queue of the topology, DLQs included
	client *client.Client   // the API's, once started

	mu        sync.Mutex
	consumers map[string]*proc // live consumers by id
	all       []*proc
}

func newSystem(t *testing.T, name string) *system {
	t.Helper()
	requireFaults(t)
	return startSystem(t, name)
}

// startSystem declares the topology (with env added to the programs'
// settings) and returns the system; newSystem and newClusterSystem call it.
func startSystem(t *testing.T, name string, env ...string) *system {
	t.Helper()
	return startSystemDeclaring(t, name, false, env...)
}

// startSystemDeclaring is startSystem that, with firstNode, declares the
// topology through the first node of TEST_AMQP_URL only: a quorum queue's
// leader is placed on the node its declaration came through (client-local,
// the default leader locator on 3.10 and 4.0), so every queue is led
// there. The partition scenarios choose which node leads what that way.
func startSystemDeclaring(t *testing.T, name string, firstNode bool, env ...string) *system {
	t.Helper()
	s := &system{t: t, name: name, broker: testenv.NewBroker(t), redis: testenv.NewRedis(t), sink: newSink(t), consumers: map[string]*proc{}}
	host, port, err := net.SplitHostPort(s.sink.addr())
	require.NoError(t, err)
	s.env = []string{
		"PATH=" + os.Getenv("PATH"),
		"AMQP_URL=" + s.broker.URLs, "REDIS_URL=" + testenv.RedisURL, "REDIS_MODE=" + testenv.RedisMode, "REDIS_PREFIX=" + s.redis.Prefix,
		"RABBITMQ_MANAGEMENT_URL=" + testenv.ManagementURL, "LOG_FORMAT=json", "LOG_LEVEL=info",
		"SMTP_HOST=" + host, "SMTP_PORT=" + port, "SMTP_TLS=none", "SMTP_POOL_SIZE=8", "SMS_PROVIDER=log",
		"API_KEYS=fault:" + apiKey, "METRICS_ADDR=off",
		// The load is one caller hitting one channel hard; the scenarios are
		// about faults, not about frequency control.
		"LIMIT_PER_API_KEY_PER_MINUTE=0", "LIMIT_EMAIL_PER_SECOND=0", "VERIFY_MAX_PER_IP_PER_MINUTE=0",
		"CHANNELS=mail", "RETRY_BACKOFF=200ms,400ms,800ms", "CLAIM_LEASE=2s", "SHUTDOWN_TIMEOUT=10s",
		testenv.QueueEnv(), // the cluster scenarios add QUEUE_TYPE=quorum after it
	}
	s.env = append(s.env, env...)
	declare := append([]string{}, s.env...)
	if firstNode {
		declare = append(declare, "AMQP_URL="+s.broker.URL) // the last setting of a name wins
	}
	code, out := testenv.RunCommand(t, filepath.Join(binDir, "topology"), declare, "declare")
	if code != 0 && firstNode {
		// A partition scenario's cluster just healed from the last one:
		// a quorum queue's members may still be starting on the node that
		// was cut off. Declaring is idempotent; try again for a while.
		t.Logf("topology declare: %s", strings.ReplaceAll(strings.TrimSpace(out), "\n", " | "))
		testenv.WaitFor(t, time.Minute, "the topology declared", func() bool {
			code, out = testenv.RunCommand(t, filepath.Join(binDir, "topology"), declare, "declare")
			return code == 0
		})
	}
	require.Equal(t, 0, code, out)
	s.conn, err = broker.Dial(testenv.Context(t, 15*time.Second), broker.Config{URL: s.broker.URLs})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.conn.Close() })
	ctx := testenv.Context(t, 15*time.Second)
	qs, err := s.broker.Mgmt.Queues(ctx, s.broker.VHost)
	require.NoError(t, err)
	for _, q := range qs {
		// A DLQ's log and status queue hold copies of its dead letters, for
		// the DLQ tool to read and the consumers to record: neither work
		// nor dead letters of their own.
		if mq, ok := model().Queue(q.Name); ok && (mq.Role == topology.RoleDeadLetterLog || mq.Role == topology.RoleDeadLetterStatus) {
			continue
		}
		s.queues = append(s.queues, q.Name)
	}
	mail, err := model().Channel(topology.Mail)
	require.NoError(t, err)
	require.Contains(t, s.queues, mail.DeadLetterQueue, "topology declared")
	return s
}

// amqpVia is the scenario's AMQP URL with the host replaced by the proxy's.
func (s *system) amqpVia(p *testenv.FaultProxy) string {
	return via(s.t, s.broker.URL, p)
}

// redisVia is the Redis URL through the proxy.
func (s *system) redisVia(p *testenv.FaultProxy) string {
	return via(s.t, testenv.RedisURL, p)
}

func via(t *testing.T, raw string, p *testenv.FaultProxy) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	u.Host = p.Addr()
	return u.String()
}

// targetOf is host:port of a service URL, for a proxy to forward to.
func targetOf(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host
}

func (s *system) run(name string, args ...string) (int, string) {
	s.t.Helper()
	return testenv.RunCommand(s.t, filepath.Join(binDir, name), s.env, args...)
}

// proc is a running msgpulse process.
type proc = testenv.Proc

// start runs binary bin as a process called name (in logs and countLogs).
func (s *system) start(bin, name string, env ...string) *proc {
	s.t.Helper()
	p := testenv.StartProc(s.t, name, filepath.Join(binDir, bin), append(append([]string{}, s.env...), env...))
	s.mu.Lock()
	s.all = append(s.all, p)
	s.mu.Unlock()
	return p
}

// api starts the API and returns a client whose calls give up after 30 s,
// far beyond any bound a scenario asserts, so a hanging request shows as a
// slow one instead of blocking the load.
func (s *system) api(env ...string) (*proc, *client.Client) {
	s.t.Helper()
	addr := testenv.FreeAddr(s.t)
	p := s.start("api", "api", append([]string{"HTTP_ADDR=" + addr, "PUBLISH_TIMEOUT=2s"}, env...)...)
	c, err := client.New("http://"+addr, apiKey, client.WithTimeout(30*time.Second))
	require.NoError(s.t, err)
	s.client = c
	testenv.WaitFor(s.t, 20*time.Second, "api ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ready(ctx) == nil
	})
	return p, c
}

// consumer starts a consumer process named id and waits until it consumes.
func (s *system) consumer(id string, env ...string) *proc {
	s.t.Helper()
	p := s.start("consumer", "consumer "+id, append([]string{"CONSUMER_ID=" + id}, env...)...)
	testenv.WaitFor(s.t, 20*time.Second, id+" consuming", func() bool {
		return strings.Contains(p.Output(), `"consumer started"`) || p.Exited()
	})
	require.False(s.t, p.Exited(), "%s exited at start:\n%s", id, p.Output())
	s.mu.Lock()
	s.consumers[id] = p
	s.mu.Unlock()
	return p
}

// term sends SIGTERM and requires a clean exit: a graceful stop that hands
// back what it holds.
func (s *system) term(p *proc) {
	s.t.Helper()
	p.Term(s.t)
	s.forget(p)
}

// kill is a crash: SIGKILL, no ack, no release, no sent mark.
func (s *system) kill(p *proc) {
	s.t.Helper()
	p.Kill(s.t)
	s.forget(p)
}

func (s *system) forget(p *proc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, c := range s.consumers {
		if c == p {
			delete(s.consumers, id)
		}
	}
}

func (s *system) liveConsumers() []*proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*proc, 0, len(s.consumers))
	for _, p := range s.consumers {
		out = append(out, p)
	}
	return out
}

// countLogs sums log lines containing substr over every process started
// whose name has the prefix.
func (s *system) countLogs(prefix, substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, p := range s.all {
		if strings.HasPrefix(p.Name, prefix) {
			n += p.Count(substr)
		}
	}
	return n
}
