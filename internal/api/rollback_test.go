package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Redis stops answering (blackholed: connections stay open, nothing comes
// back) once a batch of 1,000 is admitted, as its records go out. The
// batch's 503 comes within 3 × REDIS_TIMEOUT of that moment: the write
// that hangs, then its rollback in one round trip. Undone recipient by
// recipient, one round trip each, it took 1,000 × REDIS_TIMEOUT, over 8
// minutes (issue 38).
func TestBatchRollbackIsBoundedWhenRedisStopsAnswering(t *testing.T) {
	if testenv.RedisMode != rdb.Single {
		t.Skip("a fault proxy stands for one Redis, not a cluster's nodes")
	}
	// Both ways the API can batch its commands: pipelines on pooled
	// connections, and on the held full-duplex one (the default).
	for _, mode := range []string{rdb.AutoPipelineFullDuplex, rdb.AutoPipelineOff} {
		t.Run(mode, func(t *testing.T) { testBatchRollbackBounded(t, mode) })
	}
}

func testBatchRollbackBounded(t *testing.T, autoPipeline string) {
	const timeout = 500 * time.Millisecond // REDIS_TIMEOUT's default
	u, err := url.Parse(testenv.RedisURL)
	require.NoError(t, err)
	proxy := testenv.NewFaultProxy(t, u.Host)
	lim := defaultLimits()
	lim.EmailPerSecond = 0
	// A short STATUS_TTL: a record the silent Redis took in after the
	// test deleted its keys must not stay in the shared Redis for days.
	h := setup(t, options{limits: lim, redisVia: proxy, redisTimeout: timeout, autoPipeline: autoPipeline, statusTTL: time.Minute})
	var holeAt atomic.Pointer[time.Time]
	batchKey := h.redis.Prefix + "batch:"
	h.apiRedis.AddHook(testenv.CommandHook(func(cmd redis.Cmder) error {
		keys, _, ok := testenv.IsScript(cmd)
		if ok && slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, batchKey) }) && holeAt.Load() == nil {
			now := time.Now()
			holeAt.Store(&now)
			proxy.Blackhole()
		}
		return nil
	}))

	to := make([]string, MaxBatchRecipients)
	for i := range to {
		to[i] = fmt.Sprintf("r%04d@example.com", i)
	}
	body, err := json.Marshal(noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = to }))
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, h.http.URL+"/api/messages/batch", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-API-Key", testKey)
	req.Header.Set("Content-Type", "application/json")
	// Long enough for the old rollback to show itself as a failure, not
	// a hung test.
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("no answer within a minute of Redis going silent")
	}
	require.NoError(t, err)
	answered := time.Now()
	_ = resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.NotNil(t, holeAt.Load(), "Redis went silent as the batch's records went out")
	took := answered.Sub(*holeAt.Load())
	t.Logf("503 %s after Redis stopped answering (REDIS_TIMEOUT %s)", took.Round(time.Millisecond), timeout)
	require.LessOrEqual(t, took, 3*timeout, "the 503 of a batch of %d waited on Redis longer than 3 × REDIS_TIMEOUT", len(to))
	testenv.WaitFor(t, 10*time.Second, "a line saying what is left", func() bool {
		return h.logs.FilterMessageSnippet("rollback after a failed publish was incomplete").Len() > 0
	})
	require.Zero(t, h.depth("queue.mail.normal"), "nothing published")
	// What the silent Redis never answered could still land if it spoke
	// again on a connection that stayed open (a full-duplex one delivers
	// what it held, as TCP would), and would then expire with STATUS_TTL.
	// Cut, not Restore: those bytes are dropped, and nothing lands in the
	// shared Redis after the test's keys are deleted.
	proxy.Cut()
}
