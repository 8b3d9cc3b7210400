package fault

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// The partition scenarios (`make test-partitions`) cut a RabbitMQ node off
// from its peers, not kill it: the cluster of scripts/cluster/rabbitmq.sh
// with MSGPULSE_NETNS=1 runs each node in a network namespace of its own
// (scripts/cluster/netns.sh), and `rabbitmq.sh partition N` drops the
// traffic between node N and the others with iptables while this process,
// in the root namespace, still reaches all three. That is the hard case:
// a client on the minority side, whose connection and heartbeats stay up.
const partitionVar = "MSGPULSE_PARTITIONS"

// The layout every RabbitMQ partition scenario uses. The topology is
// declared through node 1, so node 1 leads every quorum queue (see
// startSystemDeclaring); the node cut off leads none. While a leader's
// node is cut off silently, the other two did not elect a new leader
// within a 20-30 s cut on either version (their failure detection waits on
// a link that drops packets without a reset: net_ticktime), so a queue led
// there takes no publish from any node until the heal: that is the
// broker's bound, measured and documented in docs/cluster.md, and not what
// these scenarios are about. What they are about is msgpulse on the
// minority side, and that is the same wherever the leaders are.
const (
	leadNode   = 1 // leads every queue
	clientNode = 2 // the API's and a consumer's node, cut off in minority and flapping
	quietNode  = 3 // no client: cut off in quiet
)

func newPartitionSystem(t *testing.T, name string) *system {
	t.Helper()
	if os.Getenv(partitionVar) == "" || testing.Short() {
		t.Skip("set MSGPULSE_PARTITIONS=1 with the namespaced cluster running (make test-partitions)")
	}
	waitWhole(t)
	s := startSystemDeclaring(t, name, true, "QUEUE_TYPE=quorum")
	for _, q := range loadQueues(t) {
		require.Equal(t, leadNode, leaderNode(t, s, q), "queue %s is led by the node it was declared through", q)
	}
	return s
}

// waitWhole waits until every node of the cluster, asked through its own
// management API, runs and sees every other running with no partition:
// after a scenario's heal, a node that paused itself (pause_minority)
// takes a while to rejoin, and a vhost created meanwhile may not be
// started on every node.
func waitWhole(t *testing.T) {
	t.Helper()
	bases := strings.Split(testenv.ManagementURL, ",")
	var last string
	t.Cleanup(func() {
		if last != "" {
			t.Logf("the cluster was not whole: %s", last)
		}
	})
	testenv.WaitFor(t, 2*time.Minute, "the cluster whole again", func() bool {
		for _, b := range bases {
			var nodes []struct {
				Name       string   `json:"name"`
				Running    bool     `json:"running"`
				Partitions []string `json:"partitions"`
			}
			if err := getJSON(b+"/api/nodes?columns=name,running,partitions", &nodes); err != nil {
				last = err.Error()
				return false
			}
			for _, n := range nodes {
				if !n.Running || len(n.Partitions) > 0 || len(nodes) != len(bases) {
					last = fmt.Sprintf("%s sees %+v", b, nodes)
					return false
				}
			}
		}
		return true
	})
	last = ""
}

// getJSON GETs url (credentials in it) into out.
func getJSON(raw string, out any) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	req, err := http.NewRequest(http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		req.SetBasicAuth(u.User.Username(), pw)
		u.User = nil
		req.URL = u
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", u.Redacted(), resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// loadQueues are the queues the scenarios' load goes through.
func loadQueues(t *testing.T) []string {
	t.Helper()
	ct, err := model().Channel(topology.Mail)
	require.NoError(t, err)
	return []string{ct.Queue, mailLevelQueue(t, topology.High), mailLevelQueue(t, topology.Normal)}
}

// nodeURLs is the scenario's vhost on nodes ns only (1-based, in
// TEST_AMQP_URL's order), as an AMQP_URL setting.
func (s *system) nodeURLs(ns ...int) string {
	all := envconf.SplitURLs(s.broker.URLs)
	var urls []string
	for _, n := range ns {
		urls = append(urls, all[n-1])
	}
	return "AMQP_URL=" + strings.Join(urls, ",")
}

// startOn starts processes with start until one is connected to node n
// (each starts at a random node of AMQP_URL), stopping the others.
func startOn(t *testing.T, s *system, n int, start func(i int) *proc) *proc {
	t.Helper()
	for i := range 12 {
		p := start(i)
		if nodeOf(t, p) == n {
			return p
		}
		s.term(p)
		s.forget(p)
	}
	t.Fatalf("nothing connected to node %d in 12 starts", n)
	return nil
}

// partition-rabbit-minority: under the usual load, the node the API and a
// consumer are connected to is cut off from the other two for 40 s, and
// healed. 40 s, not the 60 s issue 46 named: a cut that long reaches
// net_ticktime's detection (45 to 75 s), and on 4.0.5 pause_minority then
// left the cluster split after the heal (node 1 listing node 2 as
// partitioned, node 3 not running, for more than 2 minutes: docs/cluster.md),
// which is the broker's recovery, not msgpulse's; under it, RabbitMQ never
// notices, the hard case for a client. The API answers 503 within
// PUBLISH_TIMEOUT while no confirm comes, leaves the node after
// AMQP_LEAVE_AFTER and publishes through the majority; the consumer on the
// cut node, idle, probes it and leaves too; the backlog drains through the
// majority; every 202 is sent once.
func TestPartitionRabbitMinority(t *testing.T) {
	s := newPartitionSystem(t, "partition-rabbit-minority")
	var c *client.Client
	startOn(t, s, clientNode, func(int) *proc {
		p, cl := s.api()
		c = cl
		return p
	})
	startOn(t, s, clientNode, func(i int) *proc { return s.consumer("c" + strconv.Itoa(i)) })
	s.consumer("majority", s.nodeURLs(leadNode, quietNode)) // the backlog must not wait for the cut-off one
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })

	cut(t, clientNode)
	cutAt := time.Now() // once the rules are in: a request before may still be confirmed
	// The bound: AMQP_LEAVE_AFTER (5 s) + PUBLISH_TIMEOUT (2 s here) + a
	// reconnect, with room for a slow machine.
	recovered := recovery(t, l, cutAt, 17*time.Second)
	time.Sleep(max(0, 40*time.Second-time.Since(cutAt))) // the cut lasts 40 s
	heal(t)
	healAt := time.Now()
	time.Sleep(5 * time.Second) // load after the heal

	refused := withStatus(l.startedIn(cutAt, cutAt.Add(recovered)), 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", clientNode), kv("recoveredIn", recovered.Round(time.Millisecond)), kv("cut503s", len(refused)),
		kv("slowest503", slowest(refused).Round(time.Millisecond)), kv("slowestAfterHeal", slowest(l.startedIn(healAt, time.Now())).Round(time.Millisecond)),
		kv("apiLeaves", s.countLogs("api", "leaving the broker node")), kv("consumerLeaves", s.countLogs("consumer", "leaving the broker node")))
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Zero(t, cnt.Other, "answers other than 202 and 503")
	require.Positive(t, s.countLogs("consumer", "leaving the broker node"), "the consumer on the cut node left it (its idle probe's subscription found no leader)")
}

// cut cuts node n off from its peers until heal, which the test's cleanup
// calls in any case.
func cut(t *testing.T, n int) {
	t.Helper()
	rabbitmqNode(t, "partition", n)
	t.Cleanup(func() { heal(t) })
}

// heal removes every cut; healing what is whole does nothing.
func heal(t *testing.T) {
	t.Helper()
	runScript(t, "../../scripts/cluster/rabbitmq.sh", "heal")
}

// cutFor cuts node n off for d and heals it.
func cutFor(t *testing.T, n int, d time.Duration) {
	t.Helper()
	cut(t, n)
	time.Sleep(d) // the cut lasts d
	heal(t)
}

// partition-rabbit-quiet: a node no msgpulse process is connected to, and
// that leads no queue, is cut off for 20 s and healed. Every queue keeps a
// majority: not one 503, nothing lost.
func TestPartitionRabbitQuiet(t *testing.T) {
	s := newPartitionSystem(t, "partition-rabbit-quiet")
	elsewhere := s.nodeURLs(leadNode, clientNode)
	_, c := s.api(elsewhere)
	s.consumer("c1", elsewhere)
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	cutAt := time.Now()
	cutFor(t, quietNode, 20*time.Second)
	time.Sleep(5 * time.Second) // load after the heal
	outs := l.startedIn(cutAt, time.Now())
	refused := withStatus(outs, 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", quietNode), kv("requests", len(outs)), kv("cut503s", len(refused)),
		kv("slowest", slowest(outs).Round(time.Millisecond)), kv("leaves", s.countLogs("", "leaving the broker node")))
	require.Empty(t, refused, "no 503 while a follower is cut off")
	require.Zero(t, cnt.Other)
}

// partition-flapping: the API's node is cut off and healed 5 times, 5 s
// apart, under load. Nothing is lost or sent twice, every 503 comes within
// PUBLISH_TIMEOUT, and 202s keep coming.
func TestPartitionFlapping(t *testing.T) {
	s := newPartitionSystem(t, "partition-flapping")
	var c *client.Client
	startOn(t, s, clientNode, func(int) *proc {
		p, cl := s.api()
		c = cl
		return p
	})
	s.consumer("c1")
	s.consumer("c2")
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	start := time.Now()
	for range 5 {
		cutFor(t, clientNode, 5*time.Second)
		time.Sleep(5 * time.Second) // healed for 5 s
	}
	testenv.WaitFor(t, 30*time.Second, "202s after the last heal", func() bool { return l.acceptedAfter(time.Now().Add(-time.Second)) })
	outs := l.startedIn(start, time.Now())
	refused := withStatus(outs, 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", clientNode), kv("cuts", 5), kv("requests", len(outs)), kv("accepted", len(withStatus(outs, 202))), kv("cut503s", len(refused)),
		kv("slowest503", slowest(refused).Round(time.Millisecond)), kv("apiLeaves", s.countLogs("api", "leaving the broker node")))
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Zero(t, cnt.Other)
}

// partition-redis-master: the Redis master and its Sentinel (the set of
// scripts/cluster/sentinel-netns.sh) are cut off from the replicas and the
// other Sentinels for 20 s, while the API and the consumer, which list
// that Sentinel first, still reach them; the other two fail over, and at
// the heal the old master rejoins as a replica, discarding what it took
// meanwhile. What must hold, with every request carrying an
// Idempotency-Key: nothing answered 202 is lost or sent twice; every
// accepted task's status is still there after the heal; every code
// answered 202 during the cut verifies after it; and every request
// answered 202 during the cut, sent again with its key after the heal,
// gets its first taskId back (its idempotency entry survived).
func TestPartitionRedisMaster(t *testing.T) {
	url := partitionEnv(t, "MSGPULSE_PARTITION_SENTINEL_URL")
	s := newPartitionSystem(t, "partition-redis-master")
	script := "../../scripts/cluster/sentinel-netns.sh"
	redisPartition(t, s, "d1", func() string { return runScript(t, script, "master") }, "REDIS_MODE=sentinel", "REDIS_URL="+url)
}

// partition-redis-master on a Redis Cluster (scripts/cluster/
// rediscluster-netns.sh): the master of slot 0 is cut off from the other
// eight nodes; a replica of it takes over after cluster-node-timeout.
func TestPartitionRedisClusterMaster(t *testing.T) {
	url := partitionEnv(t, "MSGPULSE_PARTITION_REDIS_CLUSTER_URL")
	s := newPartitionSystem(t, "partition-redis-cluster-master")
	script := "../../scripts/cluster/rediscluster-netns.sh"
	cutNode := runScript(t, script, "master")
	other := "rc1" // whose view says who masters slot 0: any node but the cut one
	if cutNode == other {
		other = "rc2"
	}
	redisPartition(t, s, cutNode, func() string { return runScript(t, script, "owner", other) }, "REDIS_MODE=cluster", "REDIS_URL="+url)
}

// partitionEnv is variable name's value, skipping the test when it is
// unset.
func partitionEnv(t *testing.T, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		t.Skip(name + " not set (make test-partitions sets it)")
	}
	return v
}

// redisPartition runs partition-redis-master: under an idempotent load,
// Redis node cutNode (a namespace of scripts/cluster/netns.sh) is cut off
// for 20 s, while the programs (started with env) still reach it; master
// names the master as the majority sees it, to wait for the failover.
func redisPartition(t *testing.T, s *system, cutNode string, master func() string, env ...string) {
	t.Helper()
	_, c := s.api(env...)
	s.consumer("c1", env...)
	l := startLoad(t, c, s.name, 30, func(l *load) { l.idempotent = true })
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	before := master()

	cutAt := time.Now()
	runScript(t, "../../scripts/cluster/netns.sh", "partition", cutNode)
	t.Cleanup(func() { runScript(t, "../../scripts/cluster/netns.sh", "heal") })
	testenv.WaitFor(t, 30*time.Second, "a failover on the majority side", func() bool {
		m := master()
		return m != "" && m != before // "": no master known for a moment
	})
	failover := time.Since(cutAt)
	time.Sleep(20*time.Second - time.Since(cutAt)) // the cut lasts 20 s
	runScript(t, "../../scripts/cluster/netns.sh", "heal")
	healAt := time.Now()
	recovered := recovery(t, l, healAt, 60*time.Second)
	time.Sleep(5 * time.Second) // load after the recovery

	during := l.startedIn(cutAt, healAt)
	cnt := s.settle(l)
	missing := missingAfterHeal(t, c, s.sink, l, during)
	s.report(cnt, 0, kv("cutNode", cutNode), kv("failoverIn", failover.Round(time.Millisecond)), kv("cutRequests", len(during)),
		kv("cut202s", len(withStatus(during, 202))), kv("cut503s", len(withStatus(during, 503))),
		kv("slowest503", slowest(withStatus(during, 503)).Round(time.Millisecond)),
		kv("recoveredAfterHeal", recovered.Round(time.Millisecond)), kv("statusesMissing", len(missing.statuses)),
		kv("codesChecked", missing.codesChecked), kv("codesNotVerifying", len(missing.codes)),
		kv("keysChecked", missing.keysChecked), kv("keysForgotten", len(missing.keys)))
	require.Empty(t, missing.statuses, "statuses of accepted messages gone after the heal")
	require.Empty(t, missing.codes, "codes answered 202 during the cut that do not verify after the heal")
	require.Empty(t, missing.keys, "requests answered 202 during the cut whose Idempotency-Key was forgotten")
	require.Zero(t, cnt.Other)
}

// lostAfterHeal is what a Redis partition's heal took away.
type lostAfterHeal struct {
	statuses, codes, keys     []string
	codesChecked, keysChecked int
}

// missingAfterHeal checks, after a Redis partition healed: the status of
// every request l got a 202 for; that every code answered 202 during the
// cut verifies (its mail's code, once: verifying spends it); and that
// every request answered 202 during the cut, sent again with its
// Idempotency-Key, is answered with its first taskId.
func missingAfterHeal(t *testing.T, c *client.Client, k *sink, l *load, during []outcome) lostAfterHeal {
	t.Helper()
	var m lostAfterHeal
	ctx := testenv.Context(t, 2*time.Minute)
	for _, o := range withStatus(l.outcomes(), 202) {
		if _, err := c.GetMessage(ctx, o.taskID); err != nil {
			m.statuses = append(m.statuses, o.taskID+": "+err.Error())
		}
	}
	for _, o := range withStatus(during, 202) {
		if isCode(o.seq) {
			m.codesChecked++
			code := codeIn.FindString(k.textTo(o.recipient))
			res, err := c.VerifyCode(ctx, client.VerifyRequest{Channel: client.ChannelEmail, Recipient: o.recipient, Purpose: "login", Code: code})
			if err != nil || !res.Valid {
				m.codes = append(m.codes, fmt.Sprintf("%s (code %q): %v %+v", o.recipient, code, err, res))
			}
			continue
		}
		m.keysChecked++
		if again := l.again(o); again.taskID != o.taskID {
			m.keys = append(m.keys, fmt.Sprintf("%s: first %s, again %s (%d %v)", o.recipient, o.taskID, again.taskID, again.status, again.err))
		}
	}
	return m
}

// codeIn finds the code in a verification mail's text.
var codeIn = regexp.MustCompile(`\b\d{4,10}\b`)
