package dispatch_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// waits is how many WAIT commands the master has run (INFO commandstats).
func waits(t *testing.T, r *testenv.Replicated) int {
	t.Helper()
	info, err := r.Master.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\r\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_wait:calls="); ok {
			n, err := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			require.NoError(t, err)
			return n
		}
	}
	return 0
}

// A claim its replica does not acknowledge (the replica frozen: a
// partition) is not trusted: the provider is not called, the worker
// pauses and keeps asking for a durable write, and once the replica is
// back the message is sent, once (issue 46).
func TestClaimNotDurableIsNotSent(t *testing.T) {
	r := testenv.NewReplicated(t, testenv.ReplicatedOptions{})
	s := setup(t, dispatchtest.Options{Replicated: r, WaitReplicas: 1})
	s.StartConsumer("c1", 2)

	r.StopReplica(t)
	before := waits(t, r)
	taskID := s.Notice(topology.Mail, "kim@example.com", "during the partition", nil)
	testenv.WaitFor(t, 10*time.Second, "the consumer pauses", func() bool { return testutil.ToFloat64(s.Metrics.Paused) == 1 })
	testenv.WaitFor(t, 10*time.Second, "the paused worker asks for a durable write again and again", func() bool { return waits(t, r) >= before+3 })
	require.Zero(t, s.Mail.Count(), "no provider call under a claim that is not durable")
	rec, err := s.Status.Get(context.Background(), taskID)
	require.NoError(t, err)
	require.NotEqual(t, status.Sent, rec.Status)

	r.ResumeReplica(t)
	waitStatus(t, s, taskID, status.Sent)
	testenv.WaitFor(t, 10*time.Second, "the delivery is acked", func() bool { return s.Depth("queue.mail.normal") == 0 })
	require.Equal(t, 1, s.MailsTo("kim@example.com"), "sent once")
	require.Zero(t, testutil.ToFloat64(s.Metrics.Paused))
}
