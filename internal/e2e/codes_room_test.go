package e2e

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Issue 36, "Done when": with the consumer stopped, 2,000 notices sent with
// "priority": 9, then 20 codes: all 20 codes get 202, and once the consumer
// starts they are mailed within 5 s, before the notices drain. The notices
// (every limit off, so that all 2,000 wait: the worst case) had filled
// queue.mail, the codes' queue, and every code after them was refused with
// 503 "queue.mail is nearly full"; now they have a queue of their own and
// the codes' room is the codes' alone. Every accepted notice is mailed
// once too, and nothing is dead-lettered.
func TestUrgentNoticesNeverCrowdOutCodes(t *testing.T) {
	const notices, codes = 2000, 20
	s := newSystem(t, "QUEUE_TYPE="+string(testenv.QueueType), "LIMIT_EMAIL_PER_SECOND=0", "LIMIT_PER_API_KEY_PER_MINUTE=0",
		"LIMIT_HIGH_PER_TENANT_PER_MINUTE=0", "VERIFY_MAX_PER_IP_PER_MINUTE=0")
	var mu sync.Mutex
	mailed := map[string]time.Time{} // code recipient -> when the SMTP server got its DATA
	var noticesMailed atomic.Int64
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		if strings.HasPrefix(e.To[0], "code-") {
			mu.Lock()
			mailed[e.To[0]] = time.Now()
			mu.Unlock()
			return nil
		}
		noticesMailed.Add(1)
		time.Sleep(10 * time.Millisecond) // a slow SMTP server, not waiting for an outcome
		return nil
	})
	_, c := s.api()
	ctx := testenv.Context(t, 5*time.Minute)

	var accepted []string
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, notices)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nine := 9
			for i := int(next.Add(1)) - 1; i < notices; i = int(next.Add(1)) - 1 {
				rcpt := fmt.Sprintf("urgent-%d@example.com", i)
				_, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: rcpt,
					Variables: map[string]string{"title": "t", "content": "c"}, Priority: &nine})
				var ae *client.APIError
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, rcpt)
					mu.Unlock()
				case errors.As(err, &ae) && ae.StatusCode == http.StatusServiceUnavailable && ae.RetryAfter > 0:
					// a confirm slower than PUBLISH_TIMEOUT on a loaded machine: fair
				default:
					errs <- fmt.Errorf("%s: %w", rcpt, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, s.depth("queue.mail"), "no notice in the codes' queue")

	for i := range codes {
		_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: fmt.Sprintf("code-%d@example.com", i), Purpose: "login"})
		require.NoError(t, err, "code %d after %d urgent notices", i, len(accepted))
	}
	require.GreaterOrEqual(t, len(accepted), notices*99/100, "the urgent notices have a queue of their own")

	started := time.Now()
	s.consumer("c1")
	testenv.WaitFor(t, 30*time.Second, "every code mailed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(mailed) == codes
	})
	pending := len(accepted) - int(noticesMailed.Load())
	var slowest time.Duration
	mu.Lock()
	for rcpt, at := range mailed {
		slowest = max(slowest, at.Sub(started))
		require.Less(t, at.Sub(started), 5*time.Second, "%s mailed %s after the consumer started", rcpt, at.Sub(started))
	}
	mu.Unlock()
	t.Logf("%s: %d urgent notices accepted; the 20 codes mailed within %s of the consumer's start, %d notices still to send",
		string(testenv.QueueType), len(accepted), slowest.Round(time.Millisecond), pending)
	require.Positive(t, pending, "the codes went before the notices drained")

	// By recipient, not by total: a notice answered 503 because its
	// confirm was late may have been kept after all, and is mailed too.
	var counts map[string]int
	testenv.WaitFor(t, 3*time.Minute, "every accepted notice mailed", func() bool {
		counts = s.mailCounts()
		for _, rcpt := range accepted {
			if counts[rcpt] == 0 {
				return false
			}
		}
		return true
	})
	for _, rcpt := range accepted {
		require.Equal(t, 1, counts[rcpt], rcpt)
	}
	require.Zero(t, s.depth("queue.mail.dlq"))
}
