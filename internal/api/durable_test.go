package api

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// durableCase is one kind of request whose writes a 202 promises.
type durableCase struct {
	name  string
	path  string
	body  map[string]any
	queue string
	hdr   []string
}

func durableCases() []durableCase {
	return []durableCase{
		{name: "send", path: "/api/messages/send", body: notice("a@example.com"), queue: "queue.mail.normal"},
		{name: "send with an Idempotency-Key", path: "/api/messages/send", body: notice("b@example.com"), queue: "queue.mail.normal", hdr: []string{idemHeader, "order-46"}},
		{name: "verification code", path: "/api/verification-codes", body: codeRequest("c@example.com", "login"), queue: "queue.mail"},
		{name: "verification code with an Idempotency-Key", path: "/api/verification-codes", body: codeRequest("d@example.com", "login"), queue: "queue.mail", hdr: []string{idemHeader, "code-46"}},
		{name: "batch", path: "/api/messages/batch", body: noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = []string{"e@example.com", "f@example.com"} }), queue: "queue.mail.normal"},
	}
}

// An API whose Redis master cannot get its writes acknowledged by its
// replica (frozen: the connection stays up, no acks come, as in a
// partition) answers 503 with Retry-After and leaves nothing behind, in
// Redis or in the queue; once the replica is back, the same requests (an
// idempotent one with its key) are accepted, published once, and what
// they wrote is on the replica (issue 46).
func TestNotDurableIsA503ThatLeavesNothing(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	h := setup(t, options{replicated: r, waitReplicas: 1})
	replica := r.Replica(t)

	r.StopReplica(t)
	for _, tc := range durableCases() {
		start := time.Now()
		resp := h.do("POST", tc.path, tc.body, tc.hdr...)
		took := time.Since(start)
		require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s: %s", tc.name, resp.Msg)
		require.Contains(t, resp.Msg, "could not store it durably")
		require.Contains(t, resp.Msg, "nothing was published, so it is safe to retry")
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		t.Logf("%s: 503 after %s with the replica frozen", tc.name, took)
		require.Less(t, took, 2*time.Second)
		require.Zero(t, h.depth(tc.queue), "%s: nothing published", tc.name)
	}
	// The rollbacks run bounded, partly in the background: wait for them.
	testenv.WaitFor(t, 5*time.Second, "the rollbacks leave no status record, code, batch or held entry", func() bool {
		return len(h.keysMatching("status:*")) == 0 && len(h.keysMatching("verify:*")) == 0 && len(h.keysMatching("batch:*")) == 0 &&
			len(h.keysMatching("ratelimit:*cooldown*")) == 0
	})
	idem := h.keysMatching("idem:*")
	require.Len(t, idem, 2, "the two idempotent requests' entries")
	for _, k := range idem {
		held, err := h.redis.Client.HGetAll(context.Background(), k).Result()
		require.NoError(t, err)
		require.Equal(t, ratelimit.OnceReleased, held["state"], "the refused request's entry is released, so that a retry takes it over: %v", held)
	}

	r.ResumeReplica(t)
	testenv.WaitFor(t, 10*time.Second, "the fence passes again", func() bool {
		return h.srv.d.Fence.Wait(context.Background(), "probe") == nil
	})
	for _, tc := range durableCases() {
		resp := h.do("POST", tc.path, tc.body, tc.hdr...)
		require.Equal(t, http.StatusAccepted, resp.Status, "%s: %s", tc.name, resp.Msg)
	}
	// Published once each; every task's record is on the replica already.
	for queue, want := range map[string]int{"queue.mail.normal": 4, "queue.mail": 2} {
		testenv.WaitFor(t, 5*time.Second, queue+" holds what was accepted", func() bool { return h.depth(queue) == want })
		for range want {
			m, err := envelope.Decode(h.get(queue).Body)
			require.NoError(t, err)
			n, err := replica.Exists(context.Background(), h.redis.Prefix+"status:{"+m.TaskID+"}").Result()
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "the status record of a 202 is on the replica")
		}
	}
}

// A master that refuses writes for want of replicas (min-replicas-to-write:
// its replica frozen past min-replicas-max-lag) is a 503 that says so, not
// a 500, with or without the fence, and nothing is published or kept.
func TestNoReplicasIsA503(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fence int
	}{{"fence on", 1}, {"fence off", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.NewReplicated(t, testenv.ReplicatedOptions{MasterArgs: []string{"--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}})
			h := setup(t, options{replicated: r, waitReplicas: tc.fence})
			r.StopReplica(t)
			testenv.WaitFor(t, 10*time.Second, "the master refuses writes (NOREPLICAS)", func() bool {
				return r.Master.Set(context.Background(), "w", 1, 0).Err() != nil
			})
			for _, c := range durableCases() {
				resp := h.do("POST", c.path, c.body, c.hdr...)
				require.Equal(t, http.StatusServiceUnavailable, resp.Status, "%s: %s", c.name, resp.Msg)
				require.Contains(t, resp.Msg, "min-replicas-to-write", c.name)
				require.Contains(t, resp.Msg, "safe to retry", c.name)
				require.NotEmpty(t, resp.Header.Get("Retry-After"))
				require.Zero(t, h.depth(c.queue))
			}
			require.Empty(t, h.keysMatching("status:*"))
			require.Empty(t, h.keysMatching("verify:*"))
		})
	}
}
