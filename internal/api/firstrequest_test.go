package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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
	post := func(path string, body map[string]any) (int, string) {
		data, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", h.http.URL+path, bytes.NewReader(data))
		if err != nil {
			return 0, err.Error()
		}
		req.Header.Set("X-API-Key", testKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer func() { _ = resp.Body.Close() }()
		raw, _ := io.ReadAll(resp.Body)
		var out struct {
			Msg string `json:"msg"`
		}
		_ = json.Unmarshal(raw, &out)
		return resp.StatusCode, out.Msg
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
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			refused []string
		)
		for i := range codes + notices {
			wg.Go(func() {
				path, body := "/api/messages/send", notice(fmt.Sprintf("n%d-%d-%s@example.com", run, i, id))
				if i < codes {
					path, body = "/api/verification-codes", codeRequest(fmt.Sprintf("c%d-%d-%s@example.com", run, i, id), "login")
				}
				<-start
				if st, msg := post(path, body); st != http.StatusAccepted {
					mu.Lock()
					refused = append(refused, fmt.Sprintf("%s %v: %d %s", path, body["recipient"], st, msg))
					mu.Unlock()
				}
			})
		}
		close(start)
		wg.Wait()
		t.Logf("run %d: %d of %d first requests answered 202", run+1, codes+notices-len(refused), codes+notices)
		if len(refused) > 0 {
			failedRuns++
			t.Errorf("run %d: %d first requests not accepted, e.g. %v", run+1, len(refused), refused[:min(len(refused), 5)])
		}
	}
	t.Logf("%d of %d runs answered 202 to every first request", runs-failedRuns, runs)
}
