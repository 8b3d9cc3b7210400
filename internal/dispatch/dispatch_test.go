package dispatch_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func setup(t *testing.T, opts dispatchtest.Options) *dispatchtest.Stack {
	t.Helper()
	t.Parallel()
	return dispatchtest.New(t, opts)
}

func waitStatus(t *testing.T, s *dispatchtest.Stack, taskID string, want status.State) status.Record {
	t.Helper()
	var rec status.Record
	testenv.WaitFor(t, 15*time.Second, "status "+string(want)+" for "+taskID, func() bool {
		r, err := s.Status.Get(context.Background(), taskID)
		rec = r
		return err == nil && r.Status == want
	})
	return rec
}

func TestVerificationCodeIsMailedOnce(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	s.StartConsumer("c1", 4)
	taskID, code := s.Verification("alice@example.com", "login", nil)
	rec := waitStatus(t, s, taskID, status.Sent)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, "smtp", rec.Provider)
	require.NotNil(t, rec.SentAt)
	msgs := s.Mail.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"alice@example.com"}, msgs[0].To)
	require.Contains(t, msgs[0].Text, code)
	require.Contains(t, msgs[0].HTML, code)
	require.Contains(t, msgs[0].Headers["X-Msgpulse-Task-Id"], taskID)
	testenv.WaitFor(t, 5*time.Second, "queue drained", func() bool { return s.Depth("queue.mail") == 0 })
	// The seed's idempotency key, with the code's digest in place of the code.
	keys, err := rdb.Keys(context.Background(), s.Redis.Client, s.Redis.Prefix+"mail:sent:mq:*:alice@example.com:*:login")
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.NotContains(t, keys[0], code)
	// The mark shares a pipeline with the status update, but after a
	// NOSCRIPT (a Redis Cluster node that had not seen the script) only the
	// mark is sent again, a round trip after the status says sent.
	testenv.WaitFor(t, 5*time.Second, "claim marked sent by c1", func() bool {
		v, err := s.Redis.Client.Get(context.Background(), keys[0]).Result()
		return err == nil && strings.HasPrefix(v, "sent:c1:")
	})
}

func TestSameMessageDeliveredTwiceIsMailedOnce(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	// Publish one notice twice (a redelivery, or a replay) before any
	// consumer runs, and a verification code twice.
	id := testenv.ID()
	for range 2 {
		s.Notice(topology.Mail, "bob@example.com", "hello", func(m *envelope.Message) { m.TaskID = id })
	}
	_, code := s.Verification("carol@example.com", "register", nil)
	_, code2 := s.Verification("carol@example.com", "register", func(m *envelope.Message) {
		// same code, new task id: the seed's key {email}:{code}:{purpose} still matches
	})
	_ = code2
	s.StartConsumer("c1", 4)
	s.StartConsumer("c2", 4)
	testenv.WaitFor(t, 15*time.Second, "both queues drained", func() bool { return s.Depth("queue.mail") == 0 && s.Mail.Count() >= 2 })
	testenv.WaitFor(t, 5*time.Second, "duplicates acked", func() bool {
		return testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("mail", "code", "duplicate")) >= 1
	})
	require.Equal(t, 1, s.MailsTo("bob@example.com"))
	if code == code2 {
		require.Equal(t, 1, s.MailsTo("carol@example.com"), "same code, recipient and purpose: one mail")
	}
}

func TestSMTP4xxIsRetriedThenMailedOnce(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	var mu sync.Mutex
	var attempts []time.Time
	fails := 2
	s.Mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		attempts = append(attempts, time.Now())
		if fails > 0 {
			fails--
			return mailcatcher.Reject(451, "4.3.0 try again later")
		}
		return nil
	})
	s.StartConsumer("c1", 2)
	taskID := s.Notice(topology.Mail, "dave@example.com", "retry me", nil)
	rec := waitStatus(t, s, taskID, status.Sent)
	mu.Lock()
	require.Len(t, attempts, 3)
	// Each retry came back through the delay queues after its backoff
	// (200 ms, then 400 ms; jitter 1%), not at once.
	require.GreaterOrEqual(t, attempts[1].Sub(attempts[0]), 195*time.Millisecond)
	require.GreaterOrEqual(t, attempts[2].Sub(attempts[1]), 390*time.Millisecond)
	mu.Unlock()
	require.Equal(t, 3, rec.Attempts)
	require.Equal(t, 1, s.MailsTo("dave@example.com"))
	require.Equal(t, 2.0, testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("mail", "code", "smtp", "transient")))
	require.Zero(t, s.Depth("queue.mail.dlq"))
}

func TestSMTP5xxDeadLettersWithReason(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	s.Mail.FailAlways(550, "5.1.1 no such user")
	s.StartConsumer("c1", 2)
	taskID := s.Notice(topology.Mail, "nobody@example.com", "bounce", nil)
	rec := waitStatus(t, s, taskID, status.Failed)
	require.Equal(t, status.ReasonPermanent, rec.Reason)
	require.Equal(t, "permanent", rec.ErrorClass)
	require.Contains(t, rec.LastError, "550")
	require.Equal(t, 1, rec.Attempts, "a permanent failure is not retried")
	testenv.WaitFor(t, 5*time.Second, "message in queue.mail.dlq", func() bool { return s.Depth("queue.mail.dlq") == 1 })
	d, ok, err := s.Ch.Get("queue.mail.dlq", false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, taskID, d.MessageId)
	require.Equal(t, "rejected", d.Headers["x-first-death-reason"])
	require.Equal(t, "queue.mail", d.Headers["x-first-death-queue"])
	require.NoError(t, d.Nack(false, true))
	require.Zero(t, s.MailsTo("nobody@example.com"))
}

func TestRetriesExhaustedDeadLetter(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	s.Mail.FailAlways(421, "4.7.0 service not available")
	s.StartConsumer("c1", 2)
	taskID := s.Notice(topology.Mail, "erin@example.com", "never", nil)
	rec := waitStatus(t, s, taskID, status.Failed)
	require.Equal(t, status.ReasonExhausted, rec.Reason)
	require.Equal(t, 4, rec.Attempts, "the first attempt and MAX_RETRIES=3 retries")
	testenv.WaitFor(t, 5*time.Second, "message in the DLQ", func() bool { return s.Depth("queue.mail.dlq") == 1 })
}

func TestExpiredMessageIsNotMailed(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	taskID, _ := s.Verification("frank@example.com", "login", func(m *envelope.Message) {
		past := time.Now().Add(-time.Second)
		m.Deadline = &past
	})
	s.StartConsumer("c1", 2)
	rec := waitStatus(t, s, taskID, status.Expired)
	require.Equal(t, status.ReasonDeadline, rec.Reason)
	require.Contains(t, rec.LastError, "deadline")
	testenv.WaitFor(t, 5*time.Second, "expired message in the DLQ", func() bool { return s.Depth("queue.mail.dlq") == 1 })
	require.Zero(t, s.Mail.Count())
}

func TestMalformedMessagesAreDeadLettered(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	s.StartConsumer("c1", 2)
	for i, body := range []string{
		`not json`,
		`{"v":99,"taskId":"x","kind":"notification","channel":"mail","recipient":"a@b.c","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
		`{"v":1,"taskId":"y","kind":"notification","channel":"sms","recipient":"+8613900001234","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`,
	} {
		s.PublishRaw(topology.Mail, "bad-"+strconv.Itoa(i), []byte(body))
	}
	testenv.WaitFor(t, 10*time.Second, "three malformed messages dead-lettered", func() bool { return s.Depth("queue.mail.dlq") == 3 })
	rec, err := s.Status.Get(context.Background(), "bad-1")
	require.NoError(t, err)
	require.Equal(t, status.ReasonMalformed, rec.Reason)
	require.Contains(t, rec.LastError, "schema version 99")
	require.Equal(t, 3.0, testutil.ToFloat64(s.Metrics.DeadLettered.WithLabelValues("mail", "code", "smtp", "malformed")))
	// The worker lives on.
	taskID := s.Notice(topology.Mail, "gina@example.com", "still here", nil)
	waitStatus(t, s, taskID, status.Sent)
}

type panicky struct {
	provider.Mailer
	target string
}

func (p panicky) SendMail(ctx context.Context, m provider.Mail) (provider.Receipt, error) {
	if m.To == p.target {
		panic("provider bug")
	}
	return p.Mailer.SendMail(ctx, m)
}

func TestPanicIsRecoveredAndDeadLettered(t *testing.T) {
	s := setup(t, dispatchtest.Options{Mailer: func(m provider.Mailer) provider.Mailer { return panicky{m, "boom@example.com"} }})
	s.StartConsumer("c1", 1)
	bad := s.Notice(topology.Mail, "boom@example.com", "panic", nil)
	good := s.Notice(topology.Mail, "fine@example.com", "after", nil)
	waitStatus(t, s, good, status.Sent)
	rec := waitStatus(t, s, bad, status.Failed)
	require.Equal(t, status.ReasonPanic, rec.Reason)
	testenv.WaitFor(t, 5*time.Second, "panicked message in the DLQ", func() bool { return s.Depth("queue.mail.dlq") == 1 })
}

// A claim held by another (crashed) consumer is not sent now: it comes back
// after the lease can have expired, and is then sent once.
func TestHeldClaimIsSnoozedUntilTheLeaseExpires(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	id := testenv.ID()
	res, err := s.Claims.Acquire(context.Background(), s.Claims.TaskKey("mail", id), "ghost")
	require.NoError(t, err)
	require.NotNil(t, res.Claim)
	s.StartConsumer("c1", 2)
	s.Notice(topology.Mail, "held@example.com", "held", func(m *envelope.Message) { m.TaskID = id })
	testenv.WaitFor(t, 5*time.Second, "snoozed", func() bool {
		return testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("mail", "code", "snoozed")) >= 1
	})
	require.Zero(t, s.MailsTo("held@example.com"), "not sent while another consumer holds the lease")
	rec := waitStatus(t, s, id, status.Sent)
	require.Equal(t, 1, rec.Attempts)
	require.Equal(t, 1, s.MailsTo("held@example.com"))
}

// A retry lives in RabbitMQ, not in the consumer: stopping the consumer
// right after a failure loses nothing, and another consumer sends it.
func TestRetrySurvivesConsumerRestart(t *testing.T) {
	s := setup(t, dispatchtest.Options{Retry: dispatch.RetryPolicy{MaxRetries: 3, Backoff: []time.Duration{1500 * time.Millisecond}, Throttled: []time.Duration{time.Second}}})
	s.Mail.FailNext(1, 451, "later")
	c1 := s.StartConsumer("c1", 1)
	taskID := s.Notice(topology.Mail, "henry@example.com", "retry", nil)
	waitStatus(t, s, taskID, status.Retrying)
	c1.Stop()
	s.StartConsumer("c2", 1)
	rec := waitStatus(t, s, taskID, status.Sent)
	require.Equal(t, 2, rec.Attempts)
	require.Equal(t, 1, s.MailsTo("henry@example.com"))
}

// blockingMailer holds sends to one recipient until released.
type blockingMailer struct {
	provider.Mailer
	target  string
	entered chan struct{}
	release chan struct{}
}

func (b *blockingMailer) SendMail(ctx context.Context, m provider.Mail) (provider.Receipt, error) {
	if m.To == b.target {
		b.entered <- struct{}{}
		<-b.release
	}
	return b.Mailer.SendMail(ctx, m)
}

// SIGTERM: the consumer stops taking work, the send in flight finishes and
// is acked, nothing is redelivered or sent twice.
func TestGracefulStopFinishesInFlightSend(t *testing.T) {
	bm := &blockingMailer{target: "slow@example.com", entered: make(chan struct{}, 1), release: make(chan struct{})}
	s := setup(t, dispatchtest.Options{Mailer: func(m provider.Mailer) provider.Mailer { bm.Mailer = m; return bm }})
	c1 := s.StartConsumer("c1", 1)
	taskID := s.Notice(topology.Mail, "slow@example.com", "slow", nil)
	<-bm.entered
	stopped := make(chan struct{})
	go func() { c1.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("the consumer stopped before its in-flight send finished")
	case <-time.After(100 * time.Millisecond):
	}
	close(bm.release)
	<-stopped
	require.Equal(t, status.Sent, s.StatusOf(taskID).Status)
	require.Equal(t, 1, s.MailsTo("slow@example.com"))
	require.Zero(t, s.Depth("queue.mail"), "acked before the channel closed")
}

// A Redis outage pauses work: the message is neither sent nor acked, and
// it is sent once Redis is back.
func TestRedisOutagePausesAndResumes(t *testing.T) {
	if testenv.RedisMode != "single" {
		t.Skip("cuts one Redis through a proxy; the cluster scenarios (internal/cluster) kill a cluster master instead")
	}
	s := setup(t, dispatchtest.Options{})
	proxy := testenv.NewProxy(t, "127.0.0.1:6379")
	opt, err := redis.ParseURL(testenv.RedisURL)
	require.NoError(t, err)
	opt.Addr = proxy.Addr()
	opt.MaxRetries = -1
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { _ = rdb.Close() })
	s.StartConsumerWith("c1", 2, rdb)
	proxy.Cut()
	taskID := s.Notice(topology.Mail, "ivy@example.com", "during outage", nil)
	testenv.WaitFor(t, 10*time.Second, "consumer paused", func() bool { return testutil.ToFloat64(s.Metrics.Paused) == 1 })
	require.Zero(t, s.Mail.Count(), "nothing sent without the idempotency check")
	q, err := s.Ch.QueueDeclarePassive("queue.mail", true, false, false, false, nil)
	require.NoError(t, err)
	require.Zero(t, q.Messages, "the delivery is held, unacked, not dropped")
	proxy.Restore()
	waitStatus(t, s, taskID, status.Sent)
	require.Equal(t, 1, s.MailsTo("ivy@example.com"))
}

// Per-provider limits, shared through Redis: over the limit, a message
// waits instead of failing.
func TestProviderLimitDelaysInsteadOfFailing(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	store, err := ratelimit.NewConfigStore(s.Redis.Client, s.Redis.Prefix, nil, ratelimit.StoreConfig{})
	require.NoError(t, err)
	smtp := "smtp"
	_, err = store.Create(context.Background(), ratelimit.Config{ID: "smtp-slow", Provider: &smtp, RequestsPerSecond: 2, IsEnabled: true})
	require.NoError(t, err)
	s.StartConsumer("c1", 4)
	var ids []string
	for i := range 6 {
		ids = append(ids, s.Notice(topology.Mail, fmt.Sprintf("limited%d@example.com", i), "limited", nil))
	}
	for _, id := range ids {
		waitStatus(t, s, id, status.Sent)
	}
	require.Equal(t, 6, s.Mail.Count())
	require.GreaterOrEqual(t, testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("mail", "code", "snoozed")), 1.0, "some waited")
	require.Zero(t, s.Depth("queue.mail.dlq"))
}

func TestSMSIsRenderedAndSent(t *testing.T) {
	rec := &dispatchtest.RecordingSMS{}
	s := setup(t, dispatchtest.Options{SMS: rec})
	s.StartConsumer("c1", 2)
	taskID := s.Notice(topology.SMS, "+8613900001234", "Maintenance", func(m *envelope.Message) { m.Locale = "zh-CN" })
	st := waitStatus(t, s, taskID, status.Sent)
	require.Equal(t, "recording", st.Provider)
	require.Equal(t, 1, rec.Count())
	require.Equal(t, "+8613900001234", rec.Sent[0].To)
	require.Contains(t, rec.Sent[0].Text, "Maintenance")
	require.Equal(t, "notice", rec.Sent[0].Template)
	// The vendor's message id names the task and its number, for the
	// delivery report: written with the sent mark.
	e, ok, err := smslookup.New(s.Redis.Client, s.Redis.Prefix).Get(context.Background(), "recording", "r-1")
	require.NoError(t, err)
	require.True(t, ok, "the vendor id's entry is written with the sent mark")
	require.Equal(t, smslookup.Entry{TaskID: taskID, Recipient: "+8613900001234"}, e)
}

// The final status is POSTed to callbackUrl, signed with the key of the
// message's own tenant: each tenant's callback verifies with its key and
// not with the other's, and the signature covers the tenant, the URL and
// the timestamp as well as the body.
func TestCallbackIsSignedWithItsTenantsKeyAndDelivered(t *testing.T) {
	keys, err := callbackkey.New(map[string]string{"shopA": "shopA-callback-secret-0001", "shopB": "shopB-callback-secret-0002"}, "")
	require.NoError(t, err)
	type delivery struct {
		cb     dispatch.Callback
		header http.Header
		body   []byte
		url    string
	}
	got := make(chan delivery, 2)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // retried
			return
		}
		body, _ := io.ReadAll(r.Body)
		var cb dispatch.Callback
		if err := json.Unmarshal(body, &cb); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- delivery{cb: cb, header: r.Header.Clone(), body: body, url: "http://" + r.Host + r.URL.RequestURI()}
	}))
	t.Cleanup(srv.Close)
	// The test server listens on loopback: allowed here, as in development.
	cbs, err := dispatch.NewCallbacks(dispatch.CallbackConfig{Keys: keys, Backoff: 50 * time.Millisecond, Workers: 1, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	t.Cleanup(func() { cbs.Close(context.Background()) })
	cbs.Send(context.Background(), srv.URL+"/a", "shopA", status.Record{TaskID: "tA", Status: status.Sent, Channel: "email", Recipient: "a***e@example.com", Attempts: 1, UpdatedAt: time.Now()})
	cbs.Send(context.Background(), srv.URL+"/b", "shopB", status.Record{TaskID: "tB", Status: status.Sent, Channel: "email", Recipient: "b***b@example.com", Attempts: 1, UpdatedAt: time.Now()})
	own := map[string]string{"tA": "shopA-callback-secret-0001", "tB": "shopB-callback-secret-0002"}
	other := map[string]string{"tA": own["tB"], "tB": own["tA"]}
	for range 2 {
		var d delivery
		select {
		case d = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("no callback")
		}
		require.Equal(t, "message.status", d.cb.Event)
		require.Equal(t, "sent", string(d.cb.Status))
		h := d.header
		wantTenant := map[string]string{"tA": "shopA", "tB": "shopB"}[d.cb.TaskID]
		require.Equal(t, wantTenant, h.Get(callbackkey.TenantHeader))
		verify := func(key, tenant, url string) error {
			return callbackkey.Verify(key, h.Get(callbackkey.SignatureHeader), h.Get(callbackkey.TimestampHeader), h.Get(callbackkey.TenantHeader), tenant, url, d.body, time.Now())
		}
		require.NoError(t, verify(own[d.cb.TaskID], wantTenant, d.url), "verifies with its own tenant's key")
		require.ErrorIs(t, verify(other[d.cb.TaskID], wantTenant, d.url), callbackkey.ErrBadSignature, "not with the other tenant's key")
		require.ErrorIs(t, verify(own[d.cb.TaskID], wantTenant, d.url+"x"), callbackkey.ErrBadSignature, "the URL is signed")
		require.ErrorIs(t, callbackkey.Verify(own[d.cb.TaskID], h.Get(callbackkey.SignatureHeader), h.Get(callbackkey.TimestampHeader), h.Get(callbackkey.TenantHeader), wantTenant, d.url, d.body, time.Now().Add(6*time.Minute)),
			callbackkey.ErrStale, "a replay older than 5 minutes is refused")
	}
	require.EqualValues(t, 3, calls.Load(), "the 503 was tried again")
}

// A callback target that redirects gets no second POST at the host it
// names: the 3xx is a failed attempt, tried again at the original URL only.
func TestCallbackRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	var elsewhere, origin atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(other.Close)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin.Add(1)
		http.Redirect(w, r, other.URL+"/stolen", http.StatusFound)
	}))
	t.Cleanup(srv.Close)
	keys, err := callbackkey.New(nil, "callback-master-secret-0123")
	require.NoError(t, err)
	metrics := dispatch.NewMetrics(prometheus.NewRegistry())
	cbs, err := dispatch.NewCallbacks(dispatch.CallbackConfig{Keys: keys, Attempts: 2, Backoff: 10 * time.Millisecond, Results: metrics.Callbacks, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	cbs.Send(context.Background(), srv.URL+"/cb", "shopA", status.Record{TaskID: "t-redirect", Status: status.Sent, Channel: "sms", UpdatedAt: time.Now()})
	cbs.Close(context.Background()) // waits for the queued callback
	require.EqualValues(t, 2, origin.Load(), "the 302 is a failed attempt, tried again")
	require.EqualValues(t, 0, elsewhere.Load(), "the redirect's host got no POST")
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.Callbacks.WithLabelValues("failed")))
	require.Equal(t, 0.0, testutil.ToFloat64(metrics.Callbacks.WithLabelValues("delivered")))
}

// A tenant without a callback key gets no callback, signed with nothing
// or with someone else's key.
func TestCallbackWithoutTenantKeyIsNotSent(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { calls.Add(1) }))
	t.Cleanup(srv.Close)
	keys, err := callbackkey.New(map[string]string{"shopA": "shopA-callback-secret-0001"}, "")
	require.NoError(t, err)
	metrics := dispatch.NewMetrics(prometheus.NewRegistry())
	cbs, err := dispatch.NewCallbacks(dispatch.CallbackConfig{Keys: keys, Results: metrics.Callbacks, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	cbs.Send(context.Background(), srv.URL, "shopB", status.Record{TaskID: "t-nokey", Status: status.Sent, UpdatedAt: time.Now()})
	cbs.Close(context.Background())
	require.EqualValues(t, 0, calls.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(metrics.Callbacks.WithLabelValues("nokey")))
}

// A callback host that resolved to a public address when the API accepted
// it, but resolves to an internal one when the consumer dials, is not
// delivered: the dialer checks the address it connects to. It is logged,
// counted, and not retried. The name resolves (through the test's lookup,
// not DNS) to the loopback address of a live server, so a missing check
// would deliver.
func TestCallbackToPrivateAddressAtDialTimeIsRefused(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		calls.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == "hooks.shop.example" {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	for _, tc := range []struct {
		name      string
		allow     bool
		delivered bool
	}{
		{"refused", false, false},
		{"allowed for development", true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			metrics := dispatch.NewMetrics(prometheus.NewRegistry())
			cbs, err := dispatch.NewCallbacks(dispatch.CallbackConfig{Keys: testCallbackKeys(t), Backoff: 10 * time.Millisecond, Logger: zap.New(core),
				Results: metrics.Callbacks, Egress: egress.Policy{AllowPrivate: tc.allow, Lookup: lookup}})
			require.NoError(t, err)
			before := calls.Load()
			cbs.Send(context.Background(), "http://user:hunter2@hooks.shop.example:"+port+"/cb", "", status.Record{TaskID: "t-" + tc.name, Status: status.Sent, Channel: "sms", UpdatedAt: time.Now()})
			cbs.Close(context.Background()) // waits for the queued callback
			if tc.delivered {
				require.Equal(t, before+1, calls.Load())
				require.Equal(t, 1.0, testutil.ToFloat64(metrics.Callbacks.WithLabelValues("delivered")))
				return
			}
			require.Equal(t, before, calls.Load(), "nothing reached the server")
			require.Equal(t, 1.0, testutil.ToFloat64(metrics.Callbacks.WithLabelValues("refused")))
			refused := logs.FilterMessageSnippet("callback refused").All()
			require.Len(t, refused, 1, "logged once: a refused address is not retried")
			fields := refused[0].ContextMap()
			require.Equal(t, "t-"+tc.name, fields["task_id"])
			require.Contains(t, fields["error"], "127.0.0.1")
			require.Contains(t, fields["error"], "not a public address")
			require.NotContains(t, fields["url"], "hunter2", "credentials in a callback URL are masked")
			require.NotContains(t, fields["error"], "hunter2")
		})
	}
}

func TestRetryPolicyWait(t *testing.T) {
	t.Parallel()
	p := dispatch.RetryPolicy{MaxRetries: 3, Backoff: []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, Throttled: []time.Duration{time.Minute}}
	for _, tc := range []struct {
		n         int
		throttled bool
		hint      time.Duration
		want      time.Duration
	}{
		{1, false, 0, 5 * time.Second},
		{2, false, 0, 30 * time.Second},
		{3, false, 0, 5 * time.Minute},
		{4, false, 0, 5 * time.Minute},
		{1, true, 0, time.Minute},
		{1, false, 2 * time.Minute, 2 * time.Minute},
	} {
		require.Equal(t, tc.want, p.Wait(tc.n, tc.throttled, tc.hint), "%+v", tc)
	}
}

// openBreaker refuses the first n sends the way an open circuit breaker
// does (guard.go, the SMS router): nothing reaches the server.
type openBreaker struct {
	provider.Mailer
	refuse atomic.Int64
}

func (o *openBreaker) SendMail(ctx context.Context, m provider.Mail) (provider.Receipt, error) {
	if o.refuse.Add(-1) >= 0 {
		return provider.Receipt{}, &provider.Error{Provider: "smtp", Class: provider.Transient, Code: "circuit_open",
			Message: "circuit breaker open", RetryAfter: 100 * time.Millisecond, Err: breaker.ErrOpen}
	}
	return o.Mailer.SendMail(ctx, m)
}

// A send an open breaker refused never happened, so it must not spend one
// of the message's retries: with one retry allowed, three refusals in a
// row still end in one mail, not in the DLQ.
func TestOpenBreakerRefusalsDoNotSpendRetries(t *testing.T) {
	ob := &openBreaker{}
	ob.refuse.Store(3)
	s := setup(t, dispatchtest.Options{
		Retry:  dispatch.RetryPolicy{MaxRetries: 1, Backoff: []time.Duration{100 * time.Millisecond}},
		Mailer: func(m provider.Mailer) provider.Mailer { ob.Mailer = m; return ob },
	})
	s.StartConsumer("c1", 1)
	taskID := s.Notice(topology.Mail, "erin@example.com", "breaker", nil)
	waitStatus(t, s, taskID, status.Sent)
	require.Equal(t, 1, s.MailsTo("erin@example.com"))
	require.Zero(t, s.Depth("queue.mail.dlq"))
	require.Equal(t, 3.0, testutil.ToFloat64(s.Metrics.Skipped.WithLabelValues("mail", "code", "breaker_open")))
	require.Zero(t, testutil.ToFloat64(s.Metrics.Retried.WithLabelValues("mail", "code", "smtp", "transient")))
}

func testCallbackKeys(t *testing.T) callbackkey.Keys {
	t.Helper()
	keys, err := callbackkey.New(nil, "callback-master-secret-0123")
	require.NoError(t, err)
	return keys
}

// A notification with a code template (which the API refuses) is never
// sent: it would carry a code its sender chose. Dead-lettered, permanent.
func TestCodeTemplateAsANotificationIsDeadLettered(t *testing.T) {
	s := setup(t, dispatchtest.Options{})
	s.StartConsumer("c1", 2)
	taskID := s.Notice(topology.Mail, "mallory@example.com", "fake", func(m *envelope.Message) {
		m.Template, m.Variables = "verify_code", map[string]string{"code": "123456", "ttlMinutes": "10"}
	})
	rec := waitStatus(t, s, taskID, status.Failed)
	require.Equal(t, status.ReasonPermanent, rec.Reason)
	require.Contains(t, rec.LastError, "/api/verification-codes")
	testenv.WaitFor(t, 5*time.Second, "message in queue.mail.dlq", func() bool { return s.Depth("queue.mail.dlq") == 1 })
	require.Zero(t, s.MailsTo("mallory@example.com"))
}
