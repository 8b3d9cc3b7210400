package api

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
)

// publishHook runs before (and, with after, instead of the answer of)
// every publish.
type publishHook struct {
	Publisher
	before func()
	// after may replace the broker's answer: an ambiguous failure is a
	// publish that reached the queue and still answers an error.
	after func(error) error
}

func (p *publishHook) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	if p.before != nil {
		p.before()
	}
	err := p.Publisher.Publish(ctx, exchange, key, msg)
	if p.after != nil {
		err = p.after(err)
	}
	return err
}

func withHook(hook *publishHook) func(Publisher) Publisher {
	return func(p Publisher) Publisher { hook.Publisher = p; return hook }
}

// taskIDs drains queue and returns the task id of each message in it.
func (h *harness) taskIDs(queue string) []string {
	h.t.Helper()
	var ids []string
	for {
		d, ok, err := h.ch.Get(queue, true)
		require.NoError(h.t, err)
		if !ok {
			return ids
		}
		m, err := envelope.Decode(d.Body)
		require.NoError(h.t, err)
		ids = append(ids, m.TaskID)
	}
}

const idemHeader = "Idempotency-Key"

// The same key and body answer the first answer again, byte for byte, and
// publish nothing more; a request without the key is unchanged.
func TestIdempotencyKeyReplaysTheFirstAnswer(t *testing.T) {
	h := setup(t, options{})
	body := notice("a@example.com")
	first := h.do("POST", "/api/messages/send", body, idemHeader, "order-1")
	require.Equal(t, http.StatusAccepted, first.Status, first.Msg)
	again := h.do("POST", "/api/messages/send", body, idemHeader, "order-1")
	require.Equal(t, http.StatusAccepted, again.Status, again.Msg)
	require.Equal(t, "true", again.Header.Get("Idempotent-Replayed"))
	require.Empty(t, first.Header.Get("Idempotent-Replayed"))
	require.JSONEq(t, string(first.RawData), string(again.RawData))
	var res SendResult
	first.data(t, &res)
	require.Equal(t, []string{res.TaskID}, h.taskIDs("queue.mail.normal"), "one message published")

	// Without the header: two requests, two messages, and no entry.
	a, b := h.do("POST", "/api/messages/send", body), h.do("POST", "/api/messages/send", body)
	require.Equal(t, http.StatusAccepted, a.Status)
	require.Equal(t, http.StatusAccepted, b.Status)
	require.NotEqual(t, string(a.RawData), string(b.RawData))
	require.Len(t, h.taskIDs("queue.mail.normal"), 2)
	require.Len(t, h.keysMatching("idem:*"), 1, "order-1's entry alone, its lease ended; none for the requests without a key")
}

// The same key with another body is 422 naming the key; a code request
// and a batch replay like a send.
func TestIdempotencyKeyOtherBodyCodesAndBatches(t *testing.T) {
	h := setup(t, options{})
	r := h.do("POST", "/api/messages/send", notice("a@example.com"), idemHeader, "k-1")
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	other := h.do("POST", "/api/messages/send", notice("b@example.com"), idemHeader, "k-1")
	require.Equal(t, http.StatusUnprocessableEntity, other.Status, other.Msg)
	require.Contains(t, other.Msg, `Idempotency-Key "k-1"`)
	path := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = []string{"a@example.com"} }), idemHeader, "k-1")
	require.Equal(t, http.StatusUnprocessableEntity, path.Status, "another endpoint is another request")

	c1 := h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login"), idemHeader, "code-1")
	require.Equal(t, http.StatusAccepted, c1.Status, c1.Msg)
	c2 := h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login"), idemHeader, "code-1")
	require.Equal(t, http.StatusAccepted, c2.Status, "a replay, not the resend cooldown: %s", c2.Msg)
	require.JSONEq(t, string(c1.RawData), string(c2.RawData))
	require.Len(t, h.taskIDs("queue.mail"), 1)

	batch := noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = []string{"x@example.com", "y@example.com"} })
	b1 := h.do("POST", "/api/messages/batch", batch, idemHeader, "batch-1")
	require.Equal(t, http.StatusAccepted, b1.Status, b1.Msg)
	b2 := h.do("POST", "/api/messages/batch", batch, idemHeader, "batch-1")
	require.Equal(t, http.StatusAccepted, b2.Status, b2.Msg)
	require.JSONEq(t, string(b1.RawData), string(b2.RawData), "same batchId and taskIds")
	require.Len(t, h.taskIDs("queue.mail.normal"), 3, "a@ once, x@ and y@ once each")

	for _, bad := range []string{strings.Repeat("k", 256), "caf\u00e9", "tab\there"} {
		r := h.do("POST", "/api/messages/send", notice("a@example.com"), idemHeader, bad)
		require.Equal(t, http.StatusBadRequest, r.Status, bad)
		require.Contains(t, r.Msg, "Idempotency-Key")
	}
}

// Two tenants using one key get two messages.
func TestIdempotencyKeysOfTwoTenantsNeverMeet(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	body := notice("a@example.com")
	shop := h.do("POST", "/api/messages/send", body, "X-API-Key", shopKey, idemHeader, "same")
	blog := h.do("POST", "/api/messages/send", body, "X-API-Key", blogKey, idemHeader, "same")
	require.Equal(t, http.StatusAccepted, shop.Status, shop.Msg)
	require.Equal(t, http.StatusAccepted, blog.Status, blog.Msg)
	require.Empty(t, blog.Header.Get("Idempotent-Replayed"))
	var s, b SendResult
	shop.data(t, &s)
	blog.data(t, &b)
	require.NotEqual(t, s.TaskID, b.TaskID)
	require.ElementsMatch(t, []string{s.TaskID, b.TaskID}, h.taskIDs("queue.mail.normal"))
}

// A key sent again while its first request is held in its publish is 409
// with Retry-After; once the first ends, the retry gets its answer.
func TestIdempotencyKeyInProgressIs409(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h := setup(t, options{publisher: withHook(&publishHook{before: func() {
		once.Do(func() { close(entered); <-release })
	}})})
	body := notice("a@example.com")
	firstDone := make(chan response, 1)
	go func() { firstDone <- h.do("POST", "/api/messages/send", body, idemHeader, "slow") }()
	<-entered
	held := h.do("POST", "/api/messages/send", body, idemHeader, "slow")
	require.Equal(t, http.StatusConflict, held.Status, held.Msg)
	require.NotEmpty(t, held.Header.Get("Retry-After"))
	require.Contains(t, held.Msg, `Idempotency-Key "slow"`)
	close(release)
	first := <-firstDone
	require.Equal(t, http.StatusAccepted, first.Status, first.Msg)
	after := h.do("POST", "/api/messages/send", body, idemHeader, "slow")
	require.Equal(t, http.StatusAccepted, after.Status)
	require.JSONEq(t, string(first.RawData), string(after.RawData))
	require.Len(t, h.taskIDs("queue.mail.normal"), 1)
}

// A publish whose confirm did not come (here: it reached the queue and
// still failed) is 503; its retry with the key publishes the same taskId,
// so that the consumer's claim delivers one of the two copies. A batch
// keeps its batchId and taskIds the same way.
func TestIdempotentRetryAfterAmbiguous503PublishesTheSameTask(t *testing.T) {
	var fail atomic.Bool
	h := setup(t, options{publisher: withHook(&publishHook{after: func(err error) error {
		if err == nil && fail.Load() {
			return broker.ErrConfirmTimeout
		}
		return err
	}})})
	body := notice("a@example.com")
	fail.Store(true)
	r := h.do("POST", "/api/messages/send", body, idemHeader, "amb")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	fail.Store(false)
	r = h.do("POST", "/api/messages/send", body, idemHeader, "amb")
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res SendResult
	r.data(t, &res)
	require.Equal(t, []string{res.TaskID, res.TaskID}, h.taskIDs("queue.mail.normal"), "both copies carry the first attempt's taskId")
	g := h.do("GET", "/api/messages/"+res.TaskID, nil)
	require.Equal(t, http.StatusOK, g.Status, "the retry's status record stands")

	batch := noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = []string{"x@example.com", "y@example.com"} })
	fail.Store(true)
	r = h.do("POST", "/api/messages/batch", batch, idemHeader, "amb-batch")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	// A batch starts no more publishes once one has failed: the second
	// went out only if it started before the first's failure came back.
	first := h.taskIDs("queue.mail.normal")
	require.NotEmpty(t, first)
	require.LessOrEqual(t, len(first), 2)
	fail.Store(false)
	r = h.do("POST", "/api/messages/batch", batch, idemHeader, "amb-batch")
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var br BatchResult
	r.data(t, &br)
	retried := []string{br.Accepted[0].TaskID, br.Accepted[1].TaskID}
	require.Subset(t, retried, first, "the retry publishes under the ids the failed attempt may have queued")
	require.ElementsMatch(t, retried, h.taskIDs("queue.mail.normal"))
	// A code: the same taskId and the same code (verify.Store.For), so
	// the two copies are one claim.
	fail.Store(true)
	r = h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login"), idemHeader, "amb-code")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	fail.Store(false)
	r = h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login"), idemHeader, "amb-code")
	require.Equal(t, http.StatusAccepted, r.Status, "the failed attempt left no cooldown: %s", r.Msg)
	var vc VerificationCode
	r.data(t, &vc)
	var digests []string
	for {
		d, ok, err := h.ch.Get("queue.mail", true)
		require.NoError(t, err)
		if !ok {
			break
		}
		m, err := envelope.Decode(d.Body)
		require.NoError(t, err)
		require.Equal(t, vc.TaskID, m.TaskID)
		digests = append(digests, m.CodeDigest)
	}
	require.Len(t, digests, 2)
	require.Equal(t, digests[0], digests[1], "the retry seals the first attempt's code: one claim, one mail, a code that verifies")
	require.Equal(t, 3, h.logs.FilterMessageSnippet("publishing under the failed attempt's ids").Len(), "the send's, the batch's and the code's retries")
	// The failed attempt withdrew its tasks' claims; the retry took the
	// marks back, or a consumer would ack its copies unsent.
	for _, id := range first {
		require.Empty(t, h.keysMatching("mail:sent:task:{"+id+"}"), "withdrawal of %s undone", id)
	}
}
