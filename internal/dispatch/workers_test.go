package dispatch_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// slowMailer is an SMTP server answering in 200 ms: the real mailer, and
// the vendor's latency on top. It counts what was mailed, by recipient.
type slowMailer struct {
	provider.Mailer
	mu   sync.Mutex
	sent map[string]int
}

func (m *slowMailer) SendMail(ctx context.Context, mail provider.Mail) (provider.Receipt, error) {
	select {
	case <-ctx.Done():
		return provider.Receipt{}, ctx.Err()
	case <-time.After(200 * time.Millisecond): // the vendor's latency, not a wait for an outcome
	}
	r, err := m.Mailer.SendMail(ctx, mail)
	if err == nil {
		m.mu.Lock()
		m.sent[mail.To]++
		m.mu.Unlock()
	}
	return r, err
}

func (m *slowMailer) counts() (recipients, mails, twice int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range m.sent {
		recipients++
		mails += n
		if n > 1 {
			twice++
		}
	}
	return
}

// With SMTP at 200 ms and 4 workers, 2,000 notices would take 100 s; the
// pool grows while they drain, and goes back to 4 once they are done.
func TestMailWorkersFollowTheQueue(t *testing.T) {
	const n = 2000
	slow := &slowMailer{sent: map[string]int{}}
	s := setup(t, dispatchtest.Options{MaxWorkers: 128, Mailer: func(m provider.Mailer) provider.Mailer { slow.Mailer = m; return slow }})
	for i := range n {
		s.Notice(topology.Mail, fmt.Sprintf("user%04d@example.com", i), "Notice", func(m *envelope.Message) { m.Level = string(topology.Normal) })
	}
	start := time.Now()
	s.StartConsumer("c1", 4)
	workers := func() float64 { return testutil.ToFloat64(s.Metrics.Workers.WithLabelValues(topology.Mail, "notices")) }
	peak := 0.0
	testenv.WaitFor(t, 2*time.Minute, "2,000 notices mailed", func() bool {
		peak = max(peak, workers()) // sampled at every poll while they drain
		_, mails, _ := slow.counts()
		return mails >= n
	})
	drained := time.Since(start)
	t.Logf("2,000 notices at 200 ms each drained in %s; msgpulse_consumer_workers{channel=\"mail\",pool=\"notices\"} peaked at %v", drained.Round(time.Millisecond), peak)
	require.Greater(t, peak, 4.0, "the pool grew while the backlog drained")
	settled := time.Now()
	testenv.WaitFor(t, time.Minute, "the pool back to 4 workers", func() bool { return workers() <= 4 })
	t.Logf("back to %v workers %s after the last notice", workers(), time.Since(settled).Round(time.Millisecond))
	recipients, mails, twice := slow.counts()
	require.Equal(t, n, recipients)
	require.Equal(t, n, mails, "every notice mailed once")
	require.Zero(t, twice)
}
