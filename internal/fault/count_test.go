package fault

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// isDLQ: queues where messages end and stay (dead letters, and messages
// the delay exchange could not route).
func isDLQ(q string) bool { return strings.HasSuffix(q, ".dlq") || q == "queue.delay.unrouted" }

// counts is a scenario's result, by taskId.
type counts struct {
	Accepted     int // requests answered 202
	Received     int // accepted taskIds the sink got at least once
	Duplicates   int // extra copies of accepted taskIds
	Dead         int // accepted taskIds in a DLQ for a reason other than expiry
	Expired      int // accepted taskIds dead-lettered by a queue TTL
	Lost         int // accepted taskIds neither received nor dead-lettered
	Unavailable  int // requests answered 503
	Delivered503 int // 503-answered requests whose message was delivered anyway (confirm lost in the fault)
	Other        int // any other answer, or none
	Stray        int // mails the sink got that match no request
	Slowest      time.Duration
	lostIDs      []string
	dupIDs       []string
}

func (c counts) line(scenario string, extra ...string) string {
	s := fmt.Sprintf("FAULT scenario=%s accepted=%d received=%d duplicates=%d dead=%d expired=%d lost=%d 503s=%d delivered503=%d other=%d stray=%d slowest=%s",
		scenario, c.Accepted, c.Received, c.Duplicates, c.Dead, c.Expired, c.Lost, c.Unavailable, c.Delivered503, c.Other, c.Stray, c.Slowest.Round(time.Millisecond))
	if len(extra) > 0 {
		s += " " + strings.Join(extra, " ")
	}
	return s
}

// depths returns the messages waiting in work queues (main, delay, relay)
// and in the DLQs. Passive declares count ready messages only: deliveries a
// consumer holds are invisible, which is why settle stops the consumers
// before it believes a zero.
func (s *system) depths() (work, dead int) {
	s.t.Helper()
	if s.conn.IsClosed() {
		var err error
		s.conn, err = broker.Dial(testenv.Context(s.t, 15*time.Second), broker.Config{URL: s.broker.URLs})
		require.NoError(s.t, err)
	}
	states, err := broker.Inspect(s.conn, s.queues)
	require.NoError(s.t, err)
	for _, st := range states {
		if isDLQ(st.Name) {
			dead += st.Messages
		} else {
			work += st.Messages
		}
	}
	return work, dead
}

// settle stops the load, waits until every accepted message is either
// received or possibly dead-lettered and no work is left in the queues,
// then stops every consumer with SIGTERM (which hands back whatever it
// held) and looks again: only when the queues are empty with no consumer
// running can no further send happen, so only then are the counts final.
// If a stop handed work back, a drain consumer finishes it.
func (s *system) settle(l *load, drainEnv ...string) counts {
	s.t.Helper()
	l.stop()
	accepted := map[string]bool{}
	for _, o := range l.outcomes() {
		if o.status == 202 {
			accepted[o.taskID] = true
		}
	}
	for round := 1; ; round++ {
		settled := poll(90*time.Second, func() bool {
			work, dead := s.depths()
			if work > 0 {
				return false
			}
			byTask, _ := s.sink.snapshot()
			missing := 0
			for id := range accepted {
				if byTask[id] == 0 {
					missing++
				}
			}
			return missing <= dead
		})
		if !settled {
			s.t.Logf("settle: not every accepted message arrived within 90s (counting anyway)")
		}
		for _, p := range s.liveConsumers() {
			s.term(p)
		}
		work, _ := s.depths()
		if work == 0 {
			break
		}
		require.Less(s.t, round, 3, "work keeps coming back to the queues after stopping the consumers")
		s.t.Logf("settle: %d messages handed back by the stopped consumers; draining", work)
		s.consumer(fmt.Sprintf("drain-%d", round), drainEnv...)
	}
	return s.count(l)
}

// poll checks cond until it holds or timeout passes; unlike
// testenv.WaitFor it reports instead of failing, so the counts still print.
func poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

// deadLetters reads every DLQ without consuming it (basic.get without ack
// on one channel; closing the channel gives everything back) and returns
// the reason of each dead letter by taskId.
func (s *system) deadLetters() map[string]string {
	s.t.Helper()
	ch, err := s.conn.Channel()
	require.NoError(s.t, err)
	defer func() { _ = ch.Close() }()
	out := map[string]string{}
	for _, q := range s.queues {
		if !isDLQ(q) {
			continue
		}
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		require.NoError(s.t, err)
		for range st.Messages {
			d, ok, err := ch.Get(q, false)
			require.NoError(s.t, err)
			if !ok {
				break
			}
			out[d.MessageId] = deathReason(d.Headers)
		}
	}
	return out
}

// model is the default topology, which the fault systems declare.
var model = sync.OnceValue(func() *topology.Model {
	m, err := topology.Build(topology.DefaultConfig(), "")
	if err != nil {
		panic(err)
	}
	return m
})

// isMainQueue: a main queue of any channel and level, by the model.
func isMainQueue(q any) bool {
	name, _ := q.(string)
	mq, ok := model().Queue(name)
	return ok && mq.Role == topology.RoleMain
}

// deathReason is why the message died in a main queue (the delay queues
// also dead-letter, by design, on expiry), or the first death's reason.
func deathReason(h amqp.Table) string {
	if deaths, ok := h["x-death"].([]any); ok {
		for _, d := range deaths {
			if t, ok := d.(amqp.Table); ok && isMainQueue(t["queue"]) {
				if r, ok := t["reason"].(string); ok {
					return r
				}
			}
		}
	}
	r, _ := h["x-first-death-reason"].(string)
	return r
}

// count tallies the load's outcomes against what the sink got and what the
// DLQs hold.
func (s *system) count(l *load) counts {
	s.t.Helper()
	outs := l.outcomes()
	byTask, rcptOf := s.sink.snapshot()
	dead := s.deadLetters()
	var c counts
	accepted := map[string]bool{}
	answered := map[string]outcome{} // recipient → outcome
	for _, o := range outs {
		answered[o.recipient] = o
		c.Slowest = max(c.Slowest, o.took)
		switch o.status {
		case 202:
			c.Accepted++
			accepted[o.taskID] = true
			n := byTask[o.taskID]
			if n > 0 {
				c.Received++
			}
			if n > 1 {
				c.Duplicates += n - 1
				c.dupIDs = append(c.dupIDs, o.taskID)
			}
			switch reason, ok := dead[o.taskID]; {
			case n > 0:
			case ok && reason == "expired":
				c.Expired++
			case ok:
				c.Dead++
			default:
				c.Lost++
				c.lostIDs = append(c.lostIDs, o.taskID)
			}
		case 503:
			c.Unavailable++
		default:
			c.Other++
		}
	}
	for id, n := range byTask {
		if accepted[id] {
			continue
		}
		o, ok := answered[rcptOf[id]]
		switch {
		case ok && o.status != 202:
			// The broker took it but the confirm did not reach the API
			// (or the API gave up waiting): the caller was told 503 and
			// may retry, which is safe. Not lost, not a duplicate by taskId.
			c.Delivered503++
			if n > 1 {
				c.Duplicates += n - 1
				c.dupIDs = append(c.dupIDs, id)
			}
		default:
			c.Stray += n
		}
	}
	slices.Sort(c.lostIDs)
	slices.Sort(c.dupIDs)
	return c
}

// report prints the counts line (to the test log and to stdout, for grep)
// and asserts that nothing was lost or sent twice beyond wantDup, and that
// every mail belongs to a request.
func (s *system) report(c counts, wantDup int, extra ...string) {
	s.t.Helper()
	line := c.line(s.name, extra...)
	s.t.Log(line)
	fmt.Println(line)
	if c.Lost > 0 {
		s.explain("lost", c.lostIDs)
	}
	if c.Duplicates != wantDup {
		s.explain("duplicated", c.dupIDs)
	}
	require.Zero(s.t, c.Lost, "accepted messages neither received nor dead-lettered: %v", c.lostIDs)
	require.Equal(s.t, wantDup, c.Duplicates, "duplicates: %v", c.dupIDs)
	require.Zero(s.t, c.Stray, "mails that match no request")
	require.Positive(s.t, c.Accepted, "the load got nothing accepted")
}

// explain logs the status records of a few messages, to start the hunt.
func (s *system) explain(what string, ids []string) {
	if s.client == nil {
		return
	}
	for _, id := range ids[:min(len(ids), 10)] {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := s.client.GetMessage(ctx, id)
		cancel()
		if err != nil {
			s.t.Logf("%s %s: status: %v", what, id, err)
			continue
		}
		s.t.Logf("%s %s: status=%s attempts=%d lastError=%q reason=%q", what, id, m.Status, m.Attempts, m.LastError, m.Reason)
	}
}
