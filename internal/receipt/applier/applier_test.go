package applier_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/callback"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/applier"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/suppression"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

const tenantKey = "shopA-callback-secret-0001"

// suppressions is a suppression list kept in a Redis hash of the test's
// own prefix (field tenant|channel|recipient, value the entry's JSON): the
// suppression package's store is another engineer's.
type suppressions struct {
	rdb  redis.UniversalClient
	key  string
	fail error // Add fails with it while set
	mu   sync.Mutex
}

func (s *suppressions) Add(ctx context.Context, e suppression.Entry) error {
	s.mu.Lock()
	fail := s.fail
	s.mu.Unlock()
	if fail != nil {
		return fail
	}
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return s.rdb.HSet(ctx, s.key, e.Tenant+"|"+e.Channel+"|"+e.Recipient, b).Err()
}

func (s *suppressions) all(t *testing.T) map[string]suppression.Entry {
	t.Helper()
	m, err := s.rdb.HGetAll(context.Background(), s.key).Result()
	require.NoError(t, err)
	out := map[string]suppression.Entry{}
	for k, v := range m {
		var e suppression.Entry
		require.NoError(t, json.Unmarshal([]byte(v), &e))
		out[k] = e
	}
	return out
}

type delivery struct {
	cb     callback.Payload
	header http.Header
	body   []byte
	url    string
}

type env struct {
	ctx       context.Context
	r         *testenv.Redis
	status    *status.Store
	keys      *seal.Keys
	applier   *applier.Applier
	metrics   *applier.Metrics
	supp      *suppressions
	callbacks chan delivery
	hook      string // the callback receiver's URL
}

func setup(t *testing.T) env {
	t.Helper()
	r := testenv.NewRedis(t)
	st, err := status.New(r.Client, status.Config{Prefix: r.Prefix, TTL: time.Hour})
	require.NoError(t, err)
	keys, err := seal.New(strings.Repeat("s", 32))
	require.NoError(t, err)
	got := make(chan delivery, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var cb callback.Payload
		if json.Unmarshal(body, &cb) != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- delivery{cb: cb, header: req.Header.Clone(), body: body, url: "http://" + req.Host + req.URL.RequestURI()}
	}))
	t.Cleanup(srv.Close)
	ckeys, err := callbackkey.New(map[string]string{"shopA": tenantKey}, "")
	require.NoError(t, err)
	// The receiver listens on loopback: allowed here, as in development.
	cbs, err := callback.New(callback.Config{Keys: ckeys, Workers: 1, Backoff: 10 * time.Millisecond, Egress: egress.Policy{AllowPrivate: true}})
	require.NoError(t, err)
	t.Cleanup(func() { cbs.Close(context.Background()) })
	supp := &suppressions{rdb: r.Client, key: r.Prefix + "h45f:suppressions"}
	m := applier.NewMetrics(nil)
	a, err := applier.New(applier.Config{Status: st, Keys: keys, Callbacks: cbs, Suppressor: supp, Metrics: m})
	require.NoError(t, err)
	return env{ctx: testenv.Context(t, 60*time.Second), r: r, status: st, keys: keys, applier: a, metrics: m, supp: supp, callbacks: got, hook: srv.URL + "/hooks/msg?token=cb-secret"}
}

// sent creates a record as the API and the consumer leave it once sent:
// tenant shopA, its callback URL and recipient digest written with
// "sending".
func (e env) sent(t *testing.T, taskID, channel, recipient string) {
	t.Helper()
	require.NoError(t, e.status.Create(e.ctx, status.Record{TaskID: taskID, Channel: channel, Status: status.Queued, Tenant: "shopA", Recipient: "masked"}))
	_, err := e.status.Update(e.ctx, taskID, status.Update{Status: status.Sending, IncAttempts: true, Blind: true,
		CallbackURL: &e.hook, RecipientDigest: new(status.DigestRecipient(e.keys, channel, recipient))})
	require.NoError(t, err)
	_, err = e.status.Update(e.ctx, taskID, status.Update{Status: status.Sent, Provider: new("twilio"), Blind: true})
	require.NoError(t, err)
}

// next is the next callback, which must come within 10 s.
func (e env) next(t *testing.T) delivery {
	t.Helper()
	select {
	case d := <-e.callbacks:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("no callback")
	}
	return delivery{}
}

func (e env) count(tenant string, k receipt.Kind) float64 {
	return testutil.ToFloat64(e.metrics.Receipts.WithLabelValues(tenant, string(k)))
}

func TestReceiptMovesTheStatusAndCallsBack(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.sent(t, "t-del", "sms", "+15005550006")
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	r := receipt.Receipt{TaskID: "t-del", Channel: "sms", Kind: receipt.Delivered, Code: "delivered", At: at, Source: "twilio", Recipient: "+15005550006"}
	require.NoError(t, e.applier.Apply(e.ctx, r))

	rec, err := e.status.Get(e.ctx, "t-del")
	require.NoError(t, err)
	require.Equal(t, status.Delivered, rec.Status)
	require.Equal(t, &at, rec.DeliveredAt)

	d := e.next(t)
	require.Equal(t, callback.Payload{Event: "message.status", TaskID: "t-del", Status: "delivered", Channel: "sms", Recipient: "masked", Attempts: 1,
		Provider: "twilio", SentAt: d.cb.SentAt, UpdatedAt: d.cb.UpdatedAt, ReceiptCode: "delivered", ReceiptSource: "twilio", DeliveredAt: &at}, d.cb)
	require.NotNil(t, d.cb.SentAt)
	h := d.header
	require.Equal(t, "shopA", h.Get(callbackkey.TenantHeader), "the record's tenant")
	require.NoError(t, callbackkey.Verify(tenantKey, h.Get(callbackkey.SignatureHeader), h.Get(callbackkey.TimestampHeader), h.Get(callbackkey.TenantHeader), "shopA", d.url, d.body, time.Now()))
	require.Equal(t, e.hook, d.url)
	require.NotContains(t, string(d.body), "cb-secret", "the callback URL is never in a body")
	require.NotContains(t, string(d.body), "+15005550006", "nor the recipient")
	require.Equal(t, 1.0, e.count("shopA", receipt.Delivered))

	// The same receipt again: nothing, no second callback, not counted.
	require.NoError(t, e.applier.Apply(e.ctx, r))
	require.Equal(t, 1.0, e.count("shopA", receipt.Delivered))
	// A delivery report after "delivered" is kept; a complaint follows.
	require.NoError(t, e.applier.Apply(e.ctx, receipt.Receipt{TaskID: "t-del", Channel: "sms", Kind: receipt.Accepted, Source: "twilio"}))
	require.NoError(t, e.applier.Apply(e.ctx, receipt.Receipt{TaskID: "t-del", Channel: "sms", Kind: receipt.Complained, Source: "arf"}))
	d = e.next(t)
	require.Equal(t, "complained", string(d.cb.Status), "the next callback is the complaint's: neither the duplicate nor the accepted report sent one")
	require.Equal(t, 1.0, e.count("shopA", receipt.Accepted))
	require.Equal(t, 1.0, e.count("shopA", receipt.Complained))
}

func TestBounceSuppressesTheRecipient(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.sent(t, "t-bounce", "email", "nobody@example.com")
	r := receipt.Receipt{TaskID: "t-bounce", Channel: "email", Kind: receipt.Bounced, Code: "5.1.1", Detail: "550 5.1.1 <nobody@example.com>: user unknown",
		Source: "dsn", Recipient: "nobody@example.com", Suppress: receipt.SuppressHardBounce, At: time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}

	// Redis failed between the status and the entry: an error (the MTA
	// tries again), and the retry adds the entry though the status is
	// already bounced.
	e.supp.mu.Lock()
	e.supp.fail = errors.New("redis: connection refused")
	e.supp.mu.Unlock()
	err := e.applier.Apply(e.ctx, r)
	require.Error(t, err)
	require.NotErrorIs(t, err, receipt.ErrUnknownMessage)
	e.supp.mu.Lock()
	e.supp.fail = nil
	e.supp.mu.Unlock()
	require.NoError(t, e.applier.Apply(e.ctx, r))

	require.Equal(t, map[string]suppression.Entry{"shopA|email|nobody@example.com": {Tenant: "shopA", Channel: "email", Recipient: "nobody@example.com",
		Reason: suppression.HardBounce, Code: "5.1.1", TaskID: "t-bounce", At: r.At}}, e.supp.all(t), "the record's tenant, never the receipt's")
	rec, err := e.status.Get(e.ctx, "t-bounce")
	require.NoError(t, err)
	require.Equal(t, status.Bounced, rec.Status)
	require.Equal(t, "5.1.1", rec.ReceiptCode)
	d := e.next(t)
	require.Equal(t, "bounced", string(d.cb.Status))
	require.Equal(t, "5.1.1", d.cb.ReceiptCode)
	require.Equal(t, "dsn", d.cb.ReceiptSource)
	require.Equal(t, 1.0, e.count("shopA", receipt.Bounced), "counted once")
}

func TestReceiptsThatApplyToNothing(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.sent(t, "t-mine", "sms", "+15005550006")
	before, err := e.status.Get(e.ctx, "t-mine")
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		r    receipt.Receipt
		want error
	}{
		{"unknown task", receipt.Receipt{TaskID: "t-none", Channel: "sms", Kind: receipt.Delivered, Source: "twilio"}, receipt.ErrUnknownMessage},
		{"another number", receipt.Receipt{TaskID: "t-mine", Channel: "sms", Kind: receipt.Undelivered, Code: "30003", Source: "twilio", Recipient: "+15005550007",
			Suppress: receipt.SuppressUnreachable}, receipt.ErrUnknownMessage},
		{"another channel", receipt.Receipt{TaskID: "t-mine", Channel: "email", Kind: receipt.Bounced, Source: "dsn", Suppress: receipt.SuppressHardBounce,
			Recipient: "+15005550006"}, receipt.ErrUnknownMessage},
		{"no task", receipt.Receipt{Channel: "sms", Kind: receipt.Delivered}, receipt.ErrInvalid},
		{"unknown kind", receipt.Receipt{TaskID: "t-mine", Channel: "sms", Kind: "opened"}, receipt.ErrInvalid},
		{"unknown reason", receipt.Receipt{TaskID: "t-mine", Channel: "sms", Kind: receipt.Undelivered, Suppress: "because", Recipient: "+15005550006"}, receipt.ErrInvalid},
	} {
		err := e.applier.Apply(e.ctx, tc.r)
		require.ErrorIs(t, err, tc.want, tc.name)
	}
	after, err := e.status.Get(e.ctx, "t-mine")
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing changed")
	require.Empty(t, e.supp.all(t), "nobody suppressed")
	require.Zero(t, testutil.CollectAndCount(e.metrics.Receipts), "nothing counted")
}

// TestRedisDownIsNotUnknown: a receiver must answer "try again", never
// "no such message", when Redis did not answer.
func TestRedisDownIsNotUnknown(t *testing.T) {
	t.Parallel()
	e := setup(t)
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = down.Close() })
	st, err := status.New(down, status.Config{Prefix: e.r.Prefix})
	require.NoError(t, err)
	a, err := applier.New(applier.Config{Status: st, Keys: e.keys})
	require.NoError(t, err)
	err = a.Apply(e.ctx, receipt.Receipt{TaskID: "t-x", Channel: "sms", Kind: receipt.Delivered, Source: "twilio"})
	require.Error(t, err)
	require.NotErrorIs(t, err, receipt.ErrUnknownMessage)
	require.NotErrorIs(t, err, receipt.ErrInvalid)
}

// TestWithoutSuppressorOrCallbacks: an applier of a process without a
// suppression list still moves the status.
func TestWithoutSuppressorOrCallbacks(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.sent(t, "t-bare", "email", "a@example.com")
	a, err := applier.New(applier.Config{Status: e.status, Keys: e.keys})
	require.NoError(t, err)
	require.NoError(t, a.Apply(e.ctx, receipt.Receipt{TaskID: "t-bare", Channel: "email", Kind: receipt.Bounced, Code: "5.1.1", Source: "smtp",
		Recipient: "a@example.com", Suppress: receipt.SuppressHardBounce}))
	rec, err := e.status.Get(e.ctx, "t-bare")
	require.NoError(t, err)
	require.Equal(t, status.Bounced, rec.Status)
}

func TestTenantLabelsAreBounded(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for i := range applier.MaxTenantLabels + 3 {
		tenant := "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)) + time.Duration(i).String()
		id := "bound-" + tenant
		require.NoError(t, e.status.Create(e.ctx, status.Record{TaskID: id, Channel: "email", Status: status.Sent, Tenant: tenant}))
		require.NoError(t, e.applier.Apply(e.ctx, receipt.Receipt{TaskID: id, Channel: "email", Kind: receipt.Delayed, Source: "dsn"}))
	}
	require.Equal(t, applier.MaxTenantLabels+1, testutil.CollectAndCount(e.metrics.Receipts), "the first tenants and other")
	require.Equal(t, 3.0, e.count("other", receipt.Delayed))
}
