package fault

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// The partition scenarios (`make test-partitions`) cut a RabbitMQ node off
// from its peers, not kill it: the cluster of scripts/cluster/rabbitmq.sh
// with MSGPULSE_NETNS=1 runs each node in a network namespace of its own
// (scripts/cluster/netns.sh), and `rabbitmq.sh partition N` drops the
// traffic between node N and the others with iptables while this process,
// in the root namespace, still reaches all three. That is the hard case:
// a client on the minority side, whose connection and heartbeats stay up.
const partitionVar = "MSGPULSE_PARTITIONS"

func newPartitionSystem(t *testing.T, name string) *system {
	t.Helper()
	if os.Getenv(partitionVar) == "" || testing.Short() {
		t.Skip("set MSGPULSE_PARTITIONS=1 with the namespaced cluster running (make test-partitions)")
	}
	return startSystem(t, name, "QUEUE_TYPE=quorum")
}

// consumerOn starts consumers until one is connected to node n (each
// starts at a random node of AMQP_URL), stopping the others.
func consumerOn(t *testing.T, s *system, n int) *proc {
	t.Helper()
	for i := range 12 {
		c := s.consumer("c" + string(rune('a'+i)))
		if nodeOf(t, c) == n {
			return c
		}
		s.term(c)
		s.forget(c)
	}
	t.Fatalf("no consumer connected to node %d in 12 starts", n)
	return nil
}

// partition-rabbit-minority: under the usual load, the node the API and a
// consumer are connected to is cut off from the other two for 30 s (less
// than net_ticktime: RabbitMQ never notices, so pause_minority never acts)
// and healed. The API answers 503 within PUBLISH_TIMEOUT while no confirm
// comes, leaves the node after AMQP_LEAVE_AFTER and publishes through the
// majority; the consumer leaves too and the backlog drains through the
// majority; every 202 is sent once.
func TestPartitionRabbitMinority(t *testing.T) {
	s := newPartitionSystem(t, "partition-rabbit-minority")
	api, c := s.api()
	n := nodeOf(t, api)
	consumerOn(t, s, n)
	s.consumer("majority") // wherever it lands: the backlog must not wait for the cut-off one
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })

	// Where the queues the load publishes to are led decides what the
	// majority can do: a queue whose leader is on the cut-off node takes
	// no publish until the other two elect a leader, which they may not
	// do within the cut (Ra's failure detection under a silent, dropped
	// link; seen on both versions: no 202 for a whole 30 s cut).
	led := 0
	ct, err := model().Channel(topology.Mail)
	require.NoError(t, err)
	for _, q := range []string{ct.Queue, mailLevelQueue(t, topology.High), mailLevelQueue(t, topology.Normal)} {
		if leaderNode(t, s, q) == n {
			led++
		}
	}
	rabbitmqNode(t, "partition", n)
	cutAt := time.Now()
	healed := false
	heal := func() {
		if !healed {
			healed = true
			runScript(t, "../../scripts/cluster/rabbitmq.sh", "heal")
		}
	}
	t.Cleanup(heal)
	if led > 0 {
		time.Sleep(30 * time.Second) // the cut lasts 30 s
		heal()
	}
	recovered := recovery(t, l, cutAt, 60*time.Second)
	time.Sleep(max(0, 30*time.Second-time.Since(cutAt))) // the cut lasts 30 s
	heal()
	healAt := time.Now()
	time.Sleep(5 * time.Second) // load after the heal

	during := l.startedIn(cutAt, cutAt.Add(recovered))
	refused := withStatus(during, 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", n), kv("ledQueuesOnCutNode", led), kv("recoveredIn", recovered.Round(time.Millisecond)), kv("cut503s", len(refused)),
		kv("slowest503", slowest(refused).Round(time.Millisecond)), kv("slowestAfterHeal", slowest(l.startedIn(healAt, time.Now())).Round(time.Millisecond)),
		kv("apiLeaves", s.countLogs("api", "leaving the broker node")), kv("consumerLeaves", s.countLogs("consumer", "leaving the broker node")))
	if led == 0 {
		require.Less(t, recovered, 5*time.Second+2*time.Second+10*time.Second, "202s through the majority within AMQP_LEAVE_AFTER + PUBLISH_TIMEOUT + a reconnect")
	}
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Zero(t, cnt.Other, "answers other than 202 and 503")
}

// cutFor cuts node n off for d, healing it afterwards in any case.
func cutFor(t *testing.T, n int, d time.Duration) {
	t.Helper()
	rabbitmqNode(t, "partition", n)
	healed := false
	defer func() {
		if !healed {
			runScript(t, "../../scripts/cluster/rabbitmq.sh", "heal")
		}
	}()
	time.Sleep(d) // the cut lasts d
	runScript(t, "../../scripts/cluster/rabbitmq.sh", "heal")
	healed = true
}

// partition-rabbit-quiet: a node no msgpulse process is connected to is
// cut off for 20 s and healed. Queues it led elect leaders among the
// other two; nothing is lost, and the only 503s are those elections'.
func TestPartitionRabbitQuiet(t *testing.T) {
	s := newPartitionSystem(t, "partition-rabbit-quiet")
	api, c := s.api()
	cons := s.consumer("c1")
	used := map[int]bool{nodeOf(t, api): true, nodeOf(t, cons): true}
	quiet := 1
	for used[quiet] {
		quiet++
	}
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	cutAt := time.Now()
	cutFor(t, quiet, 20*time.Second)
	time.Sleep(5 * time.Second) // load after the heal
	refused := withStatus(l.startedIn(cutAt, time.Now()), 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", quiet), kv("cut503s", len(refused)), kv("slowest503", slowest(refused).Round(time.Millisecond)),
		kv("leaves", s.countLogs("", "leaving the broker node")))
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Zero(t, cnt.Other)
}

// partition-flapping: the API's node is cut off and healed 5 times, 5 s
// apart, under load. Nothing is lost or sent twice, and 202s keep
// coming.
func TestPartitionFlapping(t *testing.T) {
	s := newPartitionSystem(t, "partition-flapping")
	api, c := s.api()
	n := nodeOf(t, api)
	s.consumer("c1")
	s.consumer("c2")
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	start := time.Now()
	for range 5 {
		cutFor(t, n, 5*time.Second)
		time.Sleep(5 * time.Second) // healed for 5 s
	}
	testenv.WaitFor(t, 30*time.Second, "202s after the last heal", func() bool { return l.acceptedAfter(time.Now().Add(-time.Second)) })
	outs := l.startedIn(start, time.Now())
	refused := withStatus(outs, 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("node", n), kv("cuts", 5), kv("requests", len(outs)), kv("accepted", len(withStatus(outs, 202))), kv("cut503s", len(refused)),
		kv("slowest503", slowest(refused).Round(time.Millisecond)), kv("apiLeaves", s.countLogs("api", "leaving the broker node")))
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Zero(t, cnt.Other)
}

// partition-redis-master: the Redis master and its Sentinel (the set of
// scripts/cluster/sentinel-netns.sh) are cut off from the replicas and the
// other Sentinels for 20 s, while the API and the consumer, which list
// that Sentinel first, still reach them; the other two fail over, and at
// the heal the old master rejoins as a replica, discarding what it took
// meanwhile. What must hold: nothing answered 202 is lost or sent twice,
// and every accepted task's status is still there after the heal. It
// fails on this main (docs/cluster.md, "A node cut off, not killed"), so
// make test-partitions runs it only with MSGPULSE_PARTITIONS_REDIS=1.
func TestPartitionRedisMaster(t *testing.T) {
	url := os.Getenv("MSGPULSE_PARTITION_SENTINEL_URL")
	if url == "" {
		t.Skip("MSGPULSE_PARTITION_SENTINEL_URL not set (make test-partitions sets it)")
	}
	s := newPartitionSystem(t, "partition-redis-master")
	env := []string{"REDIS_MODE=sentinel", "REDIS_URL=" + url}
	_, c := s.api(env...)
	s.consumer("c1", env...)
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 30*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })
	before := runScript(t, "../../scripts/cluster/sentinel-netns.sh", "master")

	cutAt := time.Now()
	runScript(t, "../../scripts/cluster/netns.sh", "partition", "d1")
	healed := false
	t.Cleanup(func() {
		if !healed {
			runScript(t, "../../scripts/cluster/netns.sh", "heal")
		}
	})
	testenv.WaitFor(t, 30*time.Second, "the other Sentinels fail over", func() bool {
		return runScript(t, "../../scripts/cluster/sentinel-netns.sh", "master") != before
	})
	failover := time.Since(cutAt)
	time.Sleep(20*time.Second - time.Since(cutAt)) // the cut lasts 20 s
	runScript(t, "../../scripts/cluster/netns.sh", "heal")
	healed = true
	healAt := time.Now()
	recovered := recovery(t, l, healAt, 60*time.Second)
	time.Sleep(5 * time.Second) // load after the recovery

	during := l.startedIn(cutAt, healAt)
	cnt := s.settle(l)
	// Every status a 202 promised is still there after the heal.
	var missing []string
	for _, o := range withStatus(l.outcomes(), 202) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.GetMessage(ctx, o.taskID); err != nil {
			missing = append(missing, o.taskID+": "+err.Error())
		}
		cancel()
	}
	s.report(cnt, 0, kv("failoverIn", failover.Round(time.Millisecond)), kv("cutRequests", len(during)),
		kv("cut202s", len(withStatus(during, 202))), kv("cut503s", len(withStatus(during, 503))),
		kv("recoveredAfterHeal", recovered.Round(time.Millisecond)), kv("statusesMissing", len(missing)))
	require.Empty(t, missing, "statuses of accepted messages gone after the heal")
	require.Zero(t, cnt.Other)
}
