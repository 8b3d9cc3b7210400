package fault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// retrier is one client of TestClusterNodeKilledIdempotentRetries: it sends
// each notice with an Idempotency-Key of its own and retries every answer
// but 202 (503, 409, no answer) with the same key and body until it is
// accepted.
type retrier struct {
	c                         *client.Client
	name                      string
	n503, n409, nerr, retried atomic.Int64
}

// retryWait paces one retry: the server's Retry-After, kept between 100 ms
// and 1 s so that a client neither hammers nor idles through the outage.
func retryWait(err error) time.Duration {
	var ae *client.APIError
	if errors.As(err, &ae) && ae.RetryAfter > 0 {
		return min(max(ae.RetryAfter, 100*time.Millisecond), time.Second)
	}
	return 100 * time.Millisecond
}

func (r *retrier) send(ctx context.Context, seq int) outcome {
	o := outcome{seq: seq, recipient: fmt.Sprintf("%s-%d@example.com", r.name, seq), start: time.Now()}
	req := client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: o.recipient,
		Variables: map[string]string{"title": r.name, "content": fmt.Sprint("notice ", seq)}}
	key := client.WithIdempotencyKey(fmt.Sprintf("%s-%d", r.name, seq))
	for attempt := 1; ; attempt++ {
		res, err := r.c.SendMessage(ctx, req, key)
		if err == nil {
			o.status, o.taskID, o.took = 202, res.TaskID, time.Since(o.start)
			if attempt > 1 {
				r.retried.Add(1)
			}
			return o
		}
		var ae *client.APIError
		switch {
		case errors.As(err, &ae) && ae.StatusCode == 503:
			r.n503.Add(1)
		case errors.As(err, &ae) && ae.StatusCode == 409:
			r.n409.Add(1)
		case errors.As(err, &ae):
			o.status, o.err, o.took = ae.StatusCode, err, time.Since(o.start) // not retryable: the scenario fails on it
			return o
		default:
			r.nerr.Add(1) // no answer: as ambiguous as a 503
		}
		select {
		case <-ctx.Done():
			o.err, o.took = err, time.Since(o.start)
			return o
		case <-time.After(retryWait(err)): // the retry's pacing, not a wait for an outcome
		}
	}
}

// 5. The node leading queue.mail.normal, which the API and the consumer
// are connected to, is SIGKILLed 3 s into 1,500 notices from 24 clients at
// 120/s. Every client retries every 503 with its Idempotency-Key until it
// is accepted: a publish whose confirm was lost may have reached the
// queue, and its retry publishes the same taskId, so each notice is mailed
// once (same-Message-ID resends of the consumer's crash window aside,
// counted apart) and none is lost.
func TestClusterNodeKilledIdempotentRetries(t *testing.T) {
	s := newClusterSystem(t, "cluster-node-killed-idempotent-retries")
	for n := 1; n <= 3; n++ { // an earlier scenario may have left a node down
		rabbitmqNode(t, "revive", n)
	}
	bulk := mailLevelQueue(t, topology.Normal)
	node := leaderNode(t, s, bulk)
	t.Cleanup(func() { rabbitmqNode(t, "revive", node) })
	var api *proc
	for i := 0; api == nil || nodeOf(t, api) != node; i++ {
		require.Less(t, i, 20, "the API never started on the leader's node")
		if api != nil {
			s.term(api)
		}
		api, _ = s.api()
	}
	cons := s.consumer("c1")
	for i := 0; nodeOf(t, cons) != node; i++ {
		require.Less(t, i, 20, "the consumer never started on the leader's node")
		s.term(cons)
		cons = s.consumer("c1")
	}

	const total, clients, perSecond = 1500, 24, 120
	ctx := testenv.Context(t, 4*time.Minute)
	r := &retrier{c: s.client, name: s.name}
	tickets := make(chan int)
	var dispatched atomic.Int64
	go func() { // paces the notices; the clients take them as they are free
		defer close(tickets)
		tick := time.NewTicker(time.Second / perSecond)
		defer tick.Stop()
		for seq := range total {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			select {
			case tickets <- seq:
				dispatched.Add(1)
			case <-ctx.Done():
				return
			}
		}
	}()
	outs := make([]outcome, total)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seq := range tickets {
				outs[seq] = r.send(ctx, seq)
			}
		}()
	}
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, "3 s of load", func() bool { return dispatched.Load() >= 3*perSecond })
	rabbitmqNode(t, "kill", node)
	killedAt := time.Since(start)
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-ctx.Done():
		t.Fatalf("the clients did not finish: %d of %d dispatched", dispatched.Load(), total)
	}
	testenv.WaitFor(t, 30*time.Second, "consumer on another node", func() bool { return cons.Count(`"broker connected"`) >= 2 })

	l := &load{t: t, name: s.name, stopc: make(chan struct{}), done: make(chan struct{}), outs: outs}
	close(l.done) // nothing left to stop: settle only counts
	cnt := s.settle(l)
	line := cnt.line(s.name, kv("notices", total), kv("clients", clients), kv("killedNode", node), kv("killedAt", killedAt.Round(100*time.Millisecond)),
		kv("newLeader", leaderNode(t, s, bulk)), kv("retriedNotices", r.retried.Load()), kv("retried503s", r.n503.Load()),
		kv("retried409s", r.n409.Load()), kv("retriedNoAnswer", r.nerr.Load()), kv("crashWindowResends", cnt.Duplicates),
		kv("retriesUnderSameTaskId", s.countLogs("api", "publishing under the failed attempt's ids")),
		kv("claimSkippedCopies", s.countLogs("consumer", "already sent; acking the duplicate delivery")))
	t.Log(line)
	fmt.Println(line)
	if cnt.Lost > 0 {
		s.explain("lost", cnt.lostIDs)
	}
	require.Equal(t, total, cnt.Accepted, "every notice is accepted in the end")
	require.Zero(t, cnt.Other, "no answer but 202 ends a client's retries")
	require.Zero(t, cnt.Lost, "accepted notices neither mailed nor dead-lettered: %v", cnt.lostIDs)
	require.Equal(t, total, cnt.Received, "every notice mailed")
	// A notice mailed under a taskId other than the one its client was
	// finally given is a second message (another Message-ID): what the
	// key must prevent. Copies of one taskId are the claim's crash window.
	require.Zero(t, cnt.Stray, "notices mailed twice under two taskIds")
	require.Zero(t, cnt.Delivered503)
	require.False(t, api.Exited(), "the API recovered without a restart")
}
