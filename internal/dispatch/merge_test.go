package dispatch_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// 500 single notices with the same content to 500 users, queued together:
// one or two message/send calls, each user served once, each with its own
// status record, and the users WeCom does not know failed alone.
func TestSingleWeComMessagesAreMerged(t *testing.T) {
	// A window wide enough for 500 claims on a Redis Cluster too (one
	// script per task's slot): at 100 ms a slow run there split the 500
	// into 4 groups. What is checked is that they merge, not how fast.
	s, srv := setupWeCom(t, dispatchtest.Options{MergeWindow: time.Second})
	to := users("m", 500)
	srv.Unknown[to[42]] = true
	ids := make([]string, len(to))
	for i, u := range to {
		ids[i] = s.WeCom("Maintenance", []string{u}, func(m *envelope.Message) { m.Level = string(topology.Normal) })[0]
	}
	// One that differs, and one that is high: neither joins the merge.
	other := s.WeCom("Other", []string{"x-other"}, func(m *envelope.Message) { m.Level = string(topology.Normal) })[0]
	high := s.WeCom("Maintenance", []string{"x-high"}, nil)[0]
	s.StartConsumer("c1", 600)
	for i, id := range ids {
		if i == 42 {
			rec := waitStatus(t, s, id, status.Failed)
			require.Contains(t, rec.LastError, "invaliduser")
			continue
		}
		rec := waitStatus(t, s, id, status.Sent)
		require.Equal(t, 1, rec.Attempts, "%d %+v", i, rec)
	}
	waitStatus(t, s, other, status.Sent)
	waitStatus(t, s, high, status.Sent)
	merged := testutil.ToFloat64(s.Metrics.MergedSends)
	t.Logf("500 messages went out in %v merged message/send calls (%d calls in all, with the 2 others)", merged, srv.SendCalls())
	require.LessOrEqual(t, merged, 3.0, "the 500, and the other content")
	require.LessOrEqual(t, srv.SendCalls(), 4, "at most 2 for the 500, one for the other content, one for high")
	for i, u := range to {
		if i != 42 {
			require.Len(t, srv.ReceivedBy(u), 1, u)
		}
	}
	require.Len(t, srv.ReceivedBy("x-high"), 1)
	n, err := s.Status.Get(context.Background(), ids[0])
	require.NoError(t, err)
	require.Equal(t, status.Sent, n.Status)
}

// A full merge buffer sends every group it holds, as large as each got,
// and gathers again: 400 messages through a buffer of 40 go out in about
// 400/40 calls, never in groups of one (which a buffer that stayed full
// after sending would make, each taking a send of the account's rate).
func TestFullMergeBufferSendsItsGroups(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{MergeWindow: 5 * time.Second, MergeMax: 40})
	var ids []string
	for _, u := range users("full", 400) {
		ids = append(ids, s.WeCom("Full", []string{u}, func(m *envelope.Message) { m.Level = string(topology.Normal) })...)
	}
	s.StartConsumer("c1", 64)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	calls := srv.Calls()
	t.Logf("400 messages through a buffer of 40: %d calls", len(calls))
	require.LessOrEqual(t, len(calls), 20)
	for _, c := range calls {
		require.LessOrEqual(t, len(c), 40, "never more than the buffer holds")
	}
}

// A merged send reads its account's adaptive rate once, for the group,
// not once a member: 200 singles merged into a few calls cost a few reads
// of the rate, where each member used to read it (a Redis GET each).
func TestMergedSendReadsItsAccountsRateOnce(t *testing.T) {
	s, srv := setupWeCom(t, dispatchtest.Options{MergeWindow: time.Second})
	var reads atomic.Int64
	s.Redis.Client.AddHook(testenv.CommandHook(func(cmd redis.Cmder) error {
		if args := cmd.Args(); cmd.Name() == "get" && len(args) == 2 {
			if k, _ := args[1].(string); strings.Contains(k, "{adaptive:") && strings.HasSuffix(k, "}:rate") {
				reads.Add(1)
			}
		}
		return nil
	}))
	var ids []string
	for _, u := range users("rate", 200) {
		ids = append(ids, s.WeCom("Rate", []string{u}, func(m *envelope.Message) { m.Level = string(topology.Normal) })...)
	}
	s.StartConsumer("c1", 64)
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	merged := int64(testutil.ToFloat64(s.Metrics.MergedSends))
	t.Logf("200 singles: %d merged calls (%d calls in all), %d reads of the account's rate", merged, srv.SendCalls(), reads.Load())
	require.Positive(t, merged)
	require.Positive(t, reads.Load(), "the rate is still read: a merged send keeps to it")
	require.LessOrEqual(t, reads.Load(), merged, "one read a merged send")
}
