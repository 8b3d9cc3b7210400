package fault

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// The cluster scenarios (`make test-cluster`) run the fault suite's system
// and counts on engines that scripts/cluster starts on this machine: a
// 3-node RabbitMQ cluster with quorum queues, a Redis Cluster of 3 masters
// with a replica each, and a Sentinel set. scripts/cluster/run.sh starts
// them, points TEST_AMQP_URL, TEST_RABBITMQ_MANAGEMENT_URL, TEST_REDIS_MODE
// and TEST_REDIS_URL at them, sets MSGPULSE_CLUSTER, and tears them down.
// They run in file order: the kills leave the engines degraded (two
// RabbitMQ nodes, a Redis master without replica) but serving.
const clusterVar = "MSGPULSE_CLUSTER"

func newClusterSystem(t *testing.T, name string, env ...string) *system {
	t.Helper()
	if os.Getenv(clusterVar) == "" || testing.Short() {
		t.Skip("set MSGPULSE_CLUSTER=1 with the cluster running (make test-cluster)")
	}
	// Quorum whatever TEST_QUEUE_TYPE says: replicated queues are what a
	// cluster is for (docs/cluster.md), and the scenarios kill nodes.
	return startSystem(t, name, append([]string{"QUEUE_TYPE=quorum"}, env...)...)
}

// clusterScript runs scripts/cluster/<script> with args and returns its
// output.
func clusterScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	return runScript(t, "../../scripts/cluster/"+script, args...)
}

func runScript(t *testing.T, script string, args ...string) string {
	t.Helper()
	out, err := exec.Command(script, args...).CombinedOutput() //nolint:gosec // the test's own scripts
	require.NoError(t, err, "%s %v: %s", script, args, out)
	return strings.TrimSpace(string(out))
}

// rabbitmqNode runs a command of the script that runs the RabbitMQ cluster
// (kill N, revive N) for node n: scripts/cluster/rabbitmq.sh, RabbitMQ
// 3.10, or the command MSGPULSE_CLUSTER_RABBITMQ names, which
// scripts/cluster/run.sh sets to `scripts/rabbitmq4.sh cluster` for the
// cluster of RabbitMQ 4.
func rabbitmqNode(t *testing.T, cmd string, n int) {
	t.Helper()
	script := strings.Fields(os.Getenv("MSGPULSE_CLUSTER_RABBITMQ"))
	if len(script) == 0 {
		script = []string{"../../scripts/cluster/rabbitmq.sh"}
	}
	runScript(t, script[0], append(script[1:], cmd, strconv.Itoa(n))...)
}

var nodeLog = regexp.MustCompile(`"broker connected".*?"node":"[0-9.]+:(\d+)"`)

// nodeNumber is the position (1..3) in TEST_AMQP_URL of the node at AMQP
// port port: the number the cluster scripts name the node by.
func nodeNumber(t *testing.T, port string) int {
	t.Helper()
	for i, raw := range envconf.SplitURLs(testenv.AMQPBase) {
		if u, err := url.Parse(raw); err == nil && u.Port() == port {
			return i + 1
		}
	}
	t.Fatalf("no node of TEST_AMQP_URL (%s) listens on port %s", testenv.AMQPBase, port)
	return 0
}

// nodeOf is the RabbitMQ node (1..3) process p connected to last. A
// consumer says it started before its session has connected (the
// session connects in the background, and a node revived a moment ago
// may refuse the first dial), so this waits for the first connection.
func nodeOf(t *testing.T, p *proc) int {
	t.Helper()
	var m [][]string
	testenv.WaitFor(t, 30*time.Second, p.Name+" logging a broker connection", func() bool {
		m = nodeLog.FindAllStringSubmatch(p.Output(), -1)
		return len(m) > 0 || p.Exited()
	})
	require.NotEmpty(t, m, "%s logged no broker connection:\n%s", p.Name, p.Output())
	return nodeNumber(t, m[len(m)-1][1])
}

// recovery waits, after a fault at t0, until a request started after t0
// is accepted, and returns how long that took.
func recovery(t *testing.T, l *load, t0 time.Time, within time.Duration) time.Duration {
	t.Helper()
	testenv.WaitFor(t, within, "202s resume after the fault", func() bool { return l.acceptedAfter(t0) })
	return firstAcceptedAfter(l, t0)
}

// failingFor is how long after t0 the last request that was not accepted
// ended: with one of several Redis masters down, most requests succeed
// at once, and the API serves again for everyone only when the failures
// stop.
func failingFor(l *load, t0 time.Time) time.Duration {
	var last time.Duration
	for _, o := range l.outcomes() {
		if o.status != 202 && o.start.After(t0) {
			last = max(last, o.end().Sub(t0))
		}
	}
	return last
}

// 1. Codes and notices end to end, with quorum queues on the RabbitMQ
// cluster and every key on the Redis Cluster: some emails delayed through
// the delay exchange and the relay, some refused once by the SMTP server
// and retried, one refused for good and read back with the DLQ tool.
func TestClusterEndToEnd(t *testing.T) {
	s := newClusterSystem(t, "cluster-e2e")
	code, out := s.run("topology", "plan")
	require.Equal(t, 0, code, "plan on the cluster: %s", out)
	require.Contains(t, out, "queue type quorum")
	var mu sync.Mutex
	refused := map[string]bool{}
	dead := s.name + "-13@example.com" // a notice (every fifth is a code)
	s.sink.setHook(func(e mailcatcher.Envelope) error {
		rcpt := e.To[0]
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		if rcpt == dead {
			return mailcatcher.Reject(550, "5.1.1 no such user")
		}
		mu.Lock()
		defer mu.Unlock()
		if strings.HasSuffix(rcpt, "3@example.com") && !refused[rcpt] {
			refused[rcpt] = true
			return mailcatcher.Reject(451, "4.3.0 try again later")
		}
		return nil
	})
	_, c := s.api()
	s.consumer("c1")
	l := startLoad(t, c, s.name, 50, func(l *load) { l.delayEvery, l.delay = 7, 1500*time.Millisecond })
	testenv.WaitFor(t, 30*time.Second, "load accepted and delivered", func() bool { return l.accepted() >= 200 && s.sink.count() >= 150 })
	cnt := s.settle(l)
	mu.Lock()
	retried := len(refused)
	mu.Unlock()
	code, out = s.run("dlq", "list", "--channel", "mail", "--json")
	require.Equal(t, 0, code, out)
	delayed := 0
	for _, o := range l.outcomes() {
		if o.status == 202 && o.seq >= 0 && o.seq%7 == 0 && o.seq%5 != 4 {
			delayed++
		}
	}
	s.report(cnt, 0, kv("delayed", delayed), kv("retried", retried), kv("dlqListed", strings.Count(out, `"reason":"permanent"`)))
	require.Equal(t, 1, cnt.Dead, "the refused address is dead-lettered")
	require.Equal(t, 1, strings.Count(out, `"reason":"permanent"`), "the DLQ tool lists it: %s", out)
	require.Positive(t, retried)
	require.Positive(t, delayed)
}

// mailLevelQueue names the mail channel's queue of level l, from the model.
func mailLevelQueue(t *testing.T, l topology.Level) string {
	t.Helper()
	ct, err := model().Channel(topology.Mail)
	require.NoError(t, err)
	return ct.Level(l).Queue
}

// leaderNode is the RabbitMQ node (1..3) that leads queue.
func leaderNode(t *testing.T, s *system, queue string) int {
	t.Helper()
	q, err := s.broker.Mgmt.Queue(testenv.Context(t, 10*time.Second), s.broker.VHost, queue)
	require.NoError(t, err)
	leader := q.Leader
	if leader == "" {
		leader = q.Node
	}
	// Nodes are named with their number: mpcN@localhost (3.10),
	// rmq4cN@localhost (4.0).
	m := nodeName.FindStringSubmatch(leader)
	require.NotNil(t, m, "leader %q", leader)
	n, err := strconv.Atoi(m[1])
	require.NoError(t, err, "leader %q", leader)
	return n
}

var nodeName = regexp.MustCompile(`(\d+)@`)

// 2. The RabbitMQ node that leads the mail queue carrying the notices (the
// normal level: most of the load), and that the API and the
// consumer are connected to, is SIGKILLed under 200 messages/s: the queue
// elects a new leader, both programs fail over to another node, the API
// answers 503 only meanwhile, and no accepted message is lost.
func TestClusterRabbitMQNodeKilled(t *testing.T) {
	s := newClusterSystem(t, "cluster-rabbitmq-node-killed")
	bulk := mailLevelQueue(t, topology.Normal)
	node := leaderNode(t, s, bulk)
	// Each connection starts at a random node: restart each program until
	// it is on the leader's node, so that one kill hits all three.
	var api *proc
	for i := 0; api == nil || nodeOf(t, api) != node; i++ {
		require.Less(t, i, 20, "the API never started on the leader's node")
		if api != nil {
			s.term(api)
		}
		api, _ = s.api()
	}
	c := s.client
	cons := s.consumer("c1")
	for i := 0; nodeOf(t, cons) != node; i++ {
		require.Less(t, i, 20, "the consumer never started on the leader's node")
		s.term(cons)
		cons = s.consumer("c1")
	}
	l := startLoad(t, c, s.name, 200)
	testenv.WaitFor(t, 30*time.Second, "steady load", func() bool { return l.accepted() >= 400 })
	rabbitmqNode(t, "kill", node)
	killedAt := time.Now()
	recovered := recovery(t, l, killedAt, 30*time.Second)
	testenv.WaitFor(t, 30*time.Second, "consumer on another node", func() bool { return cons.Count(`"broker connected"`) >= 2 })
	time.Sleep(3 * time.Second) // load after the recovery
	cnt := s.settle(l)
	s.report(cnt, 0, kv("killedNode", node), kv("recoveredIn", recovered.Round(time.Millisecond)),
		kv("apiNode", nodeOf(t, api)), kv("newLeader", leaderNode(t, s, bulk)), kv("codeQueueLeader", leaderNode(t, s, mailLevelQueue(t, topology.High))), kv("killed503s", len(withStatus(l.startedIn(killedAt, killedAt.Add(recovered)), 503))))
	require.NotEqual(t, node, nodeOf(t, api), "the API moved to a live node")
	require.False(t, api.Exited(), "the API recovered without a restart")
}

// redisMaster returns a port of the Redis Cluster whose role is master.
func redisMaster(t *testing.T) int {
	t.Helper()
	for port := 7101; port <= 7109; port++ { // scripts/cluster/redis.sh
		out, err := exec.Command("redis-cli", "-p", strconv.Itoa(port), "role").Output()
		if err == nil && strings.HasPrefix(string(out), "master") {
			return port
		}
	}
	t.Fatal("no Redis Cluster master answers")
	return 0
}

// killRedis SIGKILLs the Redis server on port.
func killRedis(t *testing.T, port int) {
	t.Helper()
	pid, err := strconv.Atoi(clusterScript(t, "redis.sh", "pid", strconv.Itoa(port)))
	require.NoError(t, err)
	p, err := os.FindProcess(pid)
	require.NoError(t, err)
	require.NoError(t, p.Kill())
}

// redisOutage runs the load, SIGKILLs the Redis master on port, and
// requires the API to serve again within 10 s and nothing to be lost.
func redisOutage(t *testing.T, s *system, port int, env ...string) {
	t.Helper()
	api, c := s.api(env...)
	s.consumer("c1", env...)
	l := startLoad(t, c, s.name, 100)
	testenv.WaitFor(t, 30*time.Second, "steady load", func() bool { return l.accepted() >= 200 })
	killRedis(t, port)
	killedAt := time.Now()
	recovery(t, l, killedAt, 10*time.Second)
	// Load until the failures have stopped for 3 s (or for long enough to
	// show they did not stop within the bound).
	testenv.WaitFor(t, 20*time.Second, "3 s without a failure", func() bool {
		return time.Since(killedAt)-failingFor(l, killedAt) >= 3*time.Second
	})
	failing := failingFor(l, killedAt)
	settleStart := time.Now()
	cnt := s.settle(l, env...)
	s.report(cnt, 0, kv("killedMaster", port), kv("servesAgainIn", failing.Round(time.Millisecond)),
		kv("failedAfterKill", len(l.startedIn(killedAt, killedAt.Add(failing)))-len(withStatus(l.startedIn(killedAt, killedAt.Add(failing)), 202))),
		kv("settledIn", time.Since(settleStart).Round(time.Second)))
	if failing >= 10*time.Second {
		logRedisNodes(t)
	}
	require.Less(t, failing, 10*time.Second, "the API serves every request again within 10 s")
	require.False(t, api.Exited(), "the API recovered without a restart")
}

// logRedisNodes logs the tail of every private Redis node's log
// (scripts/cluster/redis.sh), to find out why a failover took long; the
// scripts' output filter keeps lines with "redis log".
func logRedisNodes(t *testing.T) {
	t.Helper()
	dir := os.Getenv("MSGPULSE_CLUSTER_DIR")
	if dir == "" {
		dir = "/tmp/msgpulse-cluster"
	}
	logs, _ := filepath.Glob(filepath.Join(dir, "redis", "*", "log"))
	for _, f := range logs {
		b, err := os.ReadFile(f) //nolint:gosec // the test cluster's own logs
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, l := range lines[max(0, len(lines)-25):] {
			t.Logf("redis log %s: %s", filepath.Base(filepath.Dir(f)), l) // one line each: scripts/cluster/run.sh shows these
		}
	}
}

// 3. A Redis Cluster master is SIGKILLed under load; its replica takes
// over. Requests get quick 503s meanwhile, the consumer pauses, and both
// resume by themselves within 10 s.
func TestClusterRedisMasterKilled(t *testing.T) {
	s := newClusterSystem(t, "cluster-redis-master-killed")
	redisOutage(t, s, redisMaster(t))
}

// 4. The same with Sentinel: one master, one replica, three sentinels.
func TestClusterSentinelFailover(t *testing.T) {
	url := os.Getenv("MSGPULSE_SENTINEL_URL")
	if url == "" {
		t.Skip("MSGPULSE_SENTINEL_URL not set (make test-cluster sets it)")
	}
	s := newClusterSystem(t, "cluster-sentinel-failover")
	master := 7201
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "redis-cli", "-p", "27201", "sentinel", "get-master-addr-by-name", "msgpulse").Output()
	require.NoError(t, err)
	if f := strings.Fields(string(out)); len(f) == 2 {
		master, err = strconv.Atoi(f[1])
		require.NoError(t, err)
	}
	redisOutage(t, s, master, "REDIS_MODE=sentinel", "REDIS_URL="+url)
}
