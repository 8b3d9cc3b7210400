package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Issue 20 point 4: 200 codes and 200 notices to 400 recipients, at once,
// through a 3-master Redis Cluster; 3 codes, each the first request for its
// recipient, were refused with 429 "resend cooldown: wait 1m0s". Each run
// starts with scripts the masters have not loaded (a fresh cluster, a
// promoted replica), where it happened: the first request to reach a
// master without the limiter's script gets NOSCRIPT, and its pipeline runs
// again, also in the slots where the script had run. Every first request
// must get 202, in 10 runs out of 10.
//
// A 503 is not what this test is about: it says the request was not kept
// and may be sent again (a broker slow to confirm on a loaded machine, as
// in a CI run), so the test sends it again, as a client does. That retry
// must then get 202: a 429 would mean the 503 left a cooldown behind.
func TestFirstRequestsNeverMeetACooldownOnACluster(t *testing.T) {
	if testenv.RedisMode != rdb.Cluster {
		t.Skip("needs a Redis Cluster (TEST_REDIS_MODE=cluster, make test-cluster): one Redis runs each request's limits in one script")
	}
	// A subtest of a test that is not parallel: setup makes it parallel,
	// but it still runs alone, before the package's parallel tests. Its
	// flushes would otherwise cost them round trips they count
	// (TestTenantLimitKeepsOneRoundTrip).
	t.Run("10 runs", firstRequestsOnACluster)
}

func firstRequestsOnACluster(t *testing.T) {
	const runs, codes, notices = 10, 200, 200
	limits := defaultLimits()
	limits.PerAPIKeyMinute = runs * (codes + notices)
	h := setup(t, options{limits: limits})
	cc, ok := rdb.AsCluster(h.redis.Client)
	require.True(t, ok)
	ctx := testenv.Context(t, 5*time.Minute)
	post := func(path string, body map[string]any) (int, string, time.Duration) {
		data, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", h.http.URL+path, bytes.NewReader(data))
		if err != nil {
			return 0, err.Error(), 0
		}
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error(), 0
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Msg string `json:"msg"`
		}
		_ = json.Unmarshal(raw, &out)
		after, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		return resp.StatusCode, out.Msg, time.Duration(after) * time.Second
	}
	// send posts until the answer is not a 503, for at most 30 s.
	send := func(path string, body map[string]any) (st int, msg string, unavailable []string) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			var after time.Duration
			st, msg, after = post(path, body)
			if st != http.StatusServiceUnavailable || time.Now().After(deadline) {
				return st, msg, unavailable
			}
			unavailable = append(unavailable, msg)
			select {
			case <-ctx.Done():
				return st, msg, unavailable
			case <-time.After(min(max(after, 50*time.Millisecond), time.Second)):
			}
		}
	}
	id := testenv.ID()
	failedRuns := 0
	for run := range runs {
		// This private cluster (make test-cluster) is the only one
		// flushed: its masters forget every script, as a fresh one.
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return m.ScriptFlush(ctx).Err()
		}))
		// Each run starts with empty queues, so that no queue bound
		// refuses what this test is not about.
		for _, q := range h.model.Queues {
			_, err := h.ch.QueuePurge(q.Name, false)
			require.NoError(t, err)
		}
		var (
			wg          sync.WaitGroup
			start       = make(chan struct{})
			mu          sync.Mutex
			refused     []string
			unavailable []string
		)
		for i := range codes + notices {
			wg.Go(func() {
				path, body := "/api/messages/send", notice(fmt.Sprintf("n%d-%d-%s@example.com", run, i, id))
				if i < codes {
					path, body = "/api/verification-codes", codeRequest(fmt.Sprintf("c%d-%d-%s@example.com", run, i, id), "login")
				}
				<-start
				st, msg, busy := send(path, body)
				mu.Lock()
				defer mu.Unlock()
				unavailable = append(unavailable, busy...)
				if st != http.StatusAccepted {
					refused = append(refused, fmt.Sprintf("%s %v: %d %s (after %d × 503)", path, body["recipient"], st, msg, len(busy)))
				}
			})
		}
		close(start)
		wg.Wait()
		t.Logf("run %d: %d of %d first requests answered 202", run+1, codes+notices-len(refused), codes+notices)
		if len(unavailable) > 0 {
			t.Logf("run %d: %d answers were 503 and sent again, e.g. %q", run+1, len(unavailable), unavailable[0])
		}
		if len(refused) > 0 {
			failedRuns++
			t.Errorf("run %d: %d first requests not accepted, e.g. %v", run+1, len(refused), refused[:min(len(refused), 5)])
		}
	}
	t.Logf("%d of %d runs answered 202 to every first request", runs-failedRuns, runs)
}
