package fault

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// 9. The node the API and the consumer are connected to stops answering
// while they stay connected to it: what a client sees of a node cut off
// from its peers (no confirm, no delivery, no channel opened), here a
// proxy that holds every byte, with a second proxy to the same broker as
// the other node of AMQP_URL. Every setting at its default but the
// harness's PUBLISH_TIMEOUT (2s): the API answers 503 within it, leaves
// the node after AMQP_LEAVE_AFTER (5s) of silence and accepts through the
// other node; the idle consumer's probe leaves too, and the deliveries the
// silent connection held come back (the broker requeues them when it gives
// up on that connection) and are sent once.
func TestAMQPNodeSilent(t *testing.T) {
	s := newSystem(t, "amqp-node-silent")
	silent := testenv.NewFaultProxy(t, targetOf(t, s.broker.URL))
	other := testenv.NewFaultProxy(t, targetOf(t, s.broker.URL))
	urls := s.amqpVia(silent) + "," + s.amqpVia(other)
	other.Cut() // both processes start on the node that will fall silent
	api, c := s.api("AMQP_URL=" + urls)
	s.consumer("c1", "AMQP_URL="+urls)
	other.Restore()
	l := startLoad(t, c, s.name, 30)
	testenv.WaitFor(t, 20*time.Second, "steady load accepted", func() bool { return l.accepted() >= 30 })

	silent.Blackhole()
	cutAt := time.Now()
	testenv.WaitFor(t, 30*time.Second, "202s through the other node", func() bool { return l.acceptedAfter(cutAt) })
	recovered := firstAcceptedAfter(l, cutAt)
	testenv.WaitFor(t, 30*time.Second, "the consumer on the other node", func() bool { return s.countLogs("consumer", "leaving the broker node") > 0 })
	time.Sleep(3 * time.Second) // load through the other node

	during := l.startedIn(cutAt, cutAt.Add(recovered))
	refused := withStatus(during, 503)
	cnt := s.settle(l)
	s.report(cnt, 0, kv("recoveredIn", recovered.Round(time.Millisecond)), kv("cut503s", len(refused)),
		kv("slowest503", slowest(refused).Round(time.Millisecond)), kv("apiLeaves", s.countLogs("api", "leaving the broker node")),
		kv("consumerLeaves", s.countLogs("consumer", "leaving the broker node")))
	// The bound: AMQP_LEAVE_AFTER + PUBLISH_TIMEOUT + a reconnect, with
	// room for a loaded 2-core machine.
	require.Less(t, recovered, 5*time.Second+2*time.Second+5*time.Second, "202s again through the other node")
	require.Less(t, slowest(refused), 2*time.Second+1500*time.Millisecond, "a 503 within PUBLISH_TIMEOUT")
	require.Positive(t, s.countLogs("api", "leaving the broker node"))
	require.False(t, api.Exited(), "the API moved without a restart")
}
