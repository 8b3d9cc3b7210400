package api

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
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

// Issue 46 in small: the master is cut off from its replica while the API
// still reaches it, the replica is promoted, and the old master rejoins as
// its replica, discarding what it took meanwhile. With the fence every
// request during the partition is a 503 and every 202 (before and during
// it) is on the new master after the heal; without it (the control), 202s
// answered during the partition are gone.
func TestPartitionedMasterForgetsNo202(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fence int
	}{{"fence on", 1}, {"fence off: the control", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			r := testenv.NewReplicated(t, testenv.ReplicatedOptions{ViaProxy: true})
			h := setup(t, options{replicated: r, waitReplicas: tc.fence})
			var accepted []string
			idempotent := 0 // 202s with an Idempotency-Key: their stored answers
			send := func(i int, hdr ...string) response {
				resp := h.do("POST", "/api/messages/send", notice(fmt.Sprintf("p%d@example.com", i)), hdr...)
				if resp.Status == http.StatusAccepted {
					var res SendResult
					resp.data(t, &res)
					accepted = append(accepted, res.TaskID)
					if len(hdr) > 0 {
						idempotent++
					}
				}
				return resp
			}
			for i := range 5 {
				var hdr []string
				if i%2 == 0 {
					hdr = []string{idemHeader, fmt.Sprintf("before-%d", i)}
				}
				require.Equal(t, http.StatusAccepted, send(i, hdr...).Status)
			}
			before := len(accepted)

			r.Partition(t)
			refused := 0
			for i := 5; i < 15; i++ {
				var hdr []string
				if i%2 == 0 {
					hdr = []string{idemHeader, fmt.Sprintf("partition-%d", i)}
				}
				resp := send(i, hdr...)
				switch resp.Status {
				case http.StatusAccepted:
				case http.StatusServiceUnavailable:
					refused++
					require.NotEmpty(t, resp.Header.Get("Retry-After"))
				default:
					t.Fatalf("during the partition: %d %s", resp.Status, resp.Msg)
				}
			}
			r.Failover(t)
			r.Rejoin(t)

			newMaster := r.Replica(t)
			var lost []string
			for _, id := range accepted {
				n, err := newMaster.Exists(context.Background(), h.redis.Prefix+"status:{"+id+"}").Result()
				require.NoError(t, err)
				if n == 0 {
					lost = append(lost, id)
				}
			}
			// A retry with the same Idempotency-Key is answered from a
			// stored answer ("done"); a lost one would publish again.
			keys, err := rdb.Keys(context.Background(), newMaster, h.redis.Prefix+"idem:*")
			require.NoError(t, err)
			answers := 0
			for _, k := range keys {
				if st, _ := newMaster.HGet(context.Background(), k, "state").Result(); st == ratelimit.OnceDone {
					answers++
				}
			}
			t.Logf("%s: %d accepted before the partition, %d during it, %d refused (503); after the heal %d accepted records gone, %d of %d stored idempotent answers kept",
				tc.name, before, len(accepted)-before, refused, len(lost), answers, idempotent)
			if tc.fence > 0 {
				require.Equal(t, 10, refused, "every request during the partition is a 503")
				require.Empty(t, lost, "nothing answered 202 is gone")
				require.Equal(t, idempotent, answers, "every idempotent 202's answer is kept")
				return
			}
			require.NotEmpty(t, lost, "without the fence the partition's 202s are lost: the test sees the defect")
			require.Less(t, answers, idempotent, "and their stored answers with them")
		})
	}
}
