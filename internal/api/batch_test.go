package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

func noticeBody(messageType string, mod func(map[string]any)) map[string]any {
	m := map[string]any{"messageType": messageType, "templateCode": "notice", "variables": map[string]string{"title": "t", "content": "c"}}
	if mod != nil {
		mod(m)
	}
	return m
}

func TestWeComSendValidation(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		name string
		body map[string]any
		want int
		msg  string
	}{
		{"userid", noticeBody("WECOM", func(m map[string]any) { m["recipient"] = "zhang.san@corp" }), 202, "queued"},
		{"robot", noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"] = "ops"; m["mentions"] = []string{"alice"} }), 202, "queued"},
		{"bad userid", noticeBody("WECOM", func(m map[string]any) { m["recipient"] = "a|b" }), 400, "WeCom userid"},
		{"bad robot", noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"] = "ops team" }), 400, "robot"},
		{"mentions off robots", noticeBody("WECOM", func(m map[string]any) { m["recipient"] = "a"; m["mentions"] = []string{"b"} }), 400, "WECOM_ROBOT messages only"},
		{"bad mention", noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"] = "ops"; m["mentions"] = []string{"a b"} }), 400, "mention"},
		{"@all in markdown", noticeBody("WECOM_ROBOT", func(m map[string]any) { m["recipient"] = "ops"; m["mentions"] = []string{"@all"} }), 400, "@all only in text"},
		{"a code template, never a message", noticeBody("WECOM", func(m map[string]any) {
			m["recipient"], m["templateCode"], m["variables"] = "a", "verify_code", map[string]string{"code": "1", "ttlMinutes": "1"}
		}), 400, "/api/verification-codes"},
	} {
		r := h.do("POST", "/api/messages/send", tc.body)
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.name, r.Msg)
		require.Contains(t, r.Msg, tc.msg, tc.name)
	}
	app, err := envelope.Decode(h.get("queue.wecom.normal").Body)
	require.NoError(t, err)
	require.Equal(t, "zhang.san@corp", app.Recipient)
	require.False(t, app.Robot)
	robot, err := envelope.Decode(h.get("queue.wecom.normal").Body)
	require.NoError(t, err)
	require.True(t, robot.Robot)
	require.Equal(t, []string{"alice"}, robot.Mentions)
}

func TestWeComBatchIsOneMessageWithEveryAcceptedRecipient(t *testing.T) {
	h := setup(t, options{})
	var to []string
	for i := range 600 {
		to = append(to, fmt.Sprintf("u%04d", i))
	}
	to = append(to, "bad|id", "@all", "@ALL", "u0001") // not one person (issue 43), and listed twice
	r := h.do("POST", "/api/messages/batch", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = to }))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Len(t, res.Accepted, 600)
	require.Equal(t, []BatchRejected{
		{Recipient: "bad|id", Code: 400, Msg: "recipient must be a WeCom userid: a letter or digit, then up to 63 letters, digits, _ . @ or -; one person, never @all or a list"},
		{Recipient: "@all", Code: 400, Msg: "recipient must be a WeCom userid: a letter or digit, then up to 63 letters, digits, _ . @ or -; one person, never @all or a list"},
		{Recipient: "@ALL", Code: 400, Msg: "recipient must be a WeCom userid: a letter or digit, then up to 63 letters, digits, _ . @ or -; one person, never @all or a list"},
		{Recipient: "u0001", Code: 400, Msg: "recipient u0001 is listed twice in this batch"},
	}, res.Rejected)

	msg, err := envelope.Decode(h.get("queue.wecom.normal").Body)
	require.NoError(t, err)
	require.Equal(t, 0, h.depth("queue.wecom.normal"), "one message for the whole batch")
	require.Equal(t, res.BatchID, msg.BatchID)
	require.Len(t, msg.Recipients, 600)
	require.Equal(t, envelope.Recipient{TaskID: res.Accepted[7].TaskID, Recipient: "u0007"}, msg.Recipients[7])

	g := h.do("GET", "/api/batches/"+res.BatchID, nil)
	require.Equal(t, http.StatusOK, g.Status)
	var view client.Batch
	g.data(t, &view)
	require.Equal(t, 600, view.Total)
	require.Equal(t, 600, view.Counts["queued"])
	require.Equal(t, 0, view.Counts["sent"])
	require.Equal(t, res.Accepted[599].TaskID, view.TaskIDs[599])
	one := h.do("GET", "/api/messages/"+res.Accepted[0].TaskID, nil)
	require.Equal(t, http.StatusOK, one.Status)
	require.Equal(t, http.StatusNotFound, h.do("GET", "/api/batches/nope", nil).Status)
}

func TestMailBatchIsOneMessagePerRecipientAndLimitedOnesAreRejectedAlone(t *testing.T) {
	lim := defaultLimits()
	lim.PerAPIKeyMinute = 3
	h := setup(t, options{limits: lim})
	r := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) {
		m["recipients"] = []string{"a@example.com", "not-mail", "B@example.com", "c@example.com", "d@example.com"}
	}))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Equal(t, []string{"a@example.com", "b@example.com", "c@example.com"}, []string{res.Accepted[0].Recipient, res.Accepted[1].Recipient, res.Accepted[2].Recipient})
	require.Len(t, res.Rejected, 2)
	require.Equal(t, 400, res.Rejected[0].Code)
	require.Equal(t, BatchRejected{Recipient: "d@example.com", Code: 429, Msg: res.Rejected[1].Msg}, res.Rejected[1])
	require.Contains(t, res.Rejected[1].Msg, "per API key")
	want, got := map[string]string{}, map[string]string{}
	for _, a := range res.Accepted {
		want[a.TaskID] = a.Recipient
		m, err := envelope.Decode(h.get("queue.mail.normal").Body) // published concurrently: in any order
		require.NoError(t, err)
		require.Equal(t, res.BatchID, m.BatchID)
		got[m.TaskID] = m.Recipient
	}
	require.Equal(t, want, got, "one message per accepted recipient")
	require.Equal(t, 0, h.depth("queue.mail.normal"))

	// Nothing accepted: the answer a single send would get.
	none := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = []string{"e@example.com"} }))
	require.Equal(t, http.StatusTooManyRequests, none.Status)
	require.NotEmpty(t, none.Header.Get("Retry-After"))
	bad := h.do("POST", "/api/messages/batch", noticeBody("SMS", func(m map[string]any) { m["recipients"] = []string{"123"} }))
	require.Equal(t, http.StatusBadRequest, bad.Status)
	require.Contains(t, bad.Msg, "E.164")
}

func TestBatchValidation(t *testing.T) {
	h := setup(t, options{})
	many := make([]string, 1001)
	for i := range many {
		many[i] = fmt.Sprintf("u%d", i)
	}
	for _, tc := range []struct {
		name string
		body map[string]any
		msg  string
	}{
		{"none", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = []string{} }), "1 to 1000"},
		{"too many", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = many }), "1 to 1000"},
		{"bad type", noticeBody("FAX", func(m map[string]any) { m["recipients"] = []string{"a"} }), "messageType"},
		{"missing variable", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = []string{"a"}; m["variables"] = map[string]string{} }), "needs variable"},
	} {
		r := h.do("POST", "/api/messages/batch", tc.body)
		require.Equal(t, http.StatusBadRequest, r.Status, tc.name)
		require.Contains(t, r.Msg, tc.msg, tc.name)
	}
}

func TestFailedBatchPublishRollsBackEveryRecipient(t *testing.T) {
	for _, tc := range []struct{ messageType, exchange string }{{"EMAIL", "exchange.direct.mail"}, {"WECOM", "exchange.direct.wecom"}} {
		t.Run(tc.messageType, func(t *testing.T) {
			h := setup(t, options{})
			require.NoError(t, h.ch.ExchangeDelete(tc.exchange, false, false))
			recipients := []string{"a@example.com", "b@example.com"}
			if tc.messageType == "WECOM" {
				recipients = []string{"alice", "bob"}
			}
			r := h.do("POST", "/api/messages/batch", noticeBody(tc.messageType, func(m map[string]any) { m["recipients"] = recipients }))
			require.Equal(t, http.StatusServiceUnavailable, r.Status)
			require.Contains(t, r.Msg, "safe to retry")
			require.Empty(t, h.keysMatching("status:*"), "no status record left")
			require.Empty(t, h.keysMatching("batch:*"), "no batch left")
			for _, k := range h.keysMatching("ratelimit:{rl}:log:*") {
				n, err := h.redis.Client.ZCard(t.Context(), k).Result()
				require.NoError(t, err)
				require.Zero(t, n, "nothing counted in %s", k)
			}
		})
	}
}

// A batch's recipients are admitted together (one reservation): a batch
// that fails to publish gives every one of them back to the limits.
func TestFailedBatchGivesBackWhatItCounted(t *testing.T) {
	lim := defaultLimits()
	lim.PerAPIKeyMinute = 3
	refusing := &refusingWhile{}
	refusing.on.Store(true)
	h := setup(t, options{limits: lim, publisher: func(p Publisher) Publisher { refusing.Publisher = p; return refusing }})
	three := func(m map[string]any) { m["recipients"] = []string{"a@example.com", "b@example.com", "c@example.com"} }
	require.Equal(t, http.StatusServiceUnavailable, h.do("POST", "/api/messages/batch", noticeBody("EMAIL", three)).Status)
	refusing.on.Store(false)
	r := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", three))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Len(t, res.Accepted, 3, "the failed batch's three were given back")
	require.Empty(t, res.Rejected)
}

// A batch belongs to its sender's tenant, like its messages: another
// tenant gets the answer of an unknown batch.
func TestBatchIsVisibleToItsTenantOnly(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	r := h.do("POST", "/api/messages/batch", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = []string{"a", "b"} }), "X-API-Key", shopKey)
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	for _, tc := range []struct {
		key  string
		want int
	}{{shopKey, 200}, {readKey, 200}, {adminKey, 200}, {blogKey, 404}} {
		require.Equal(t, tc.want, h.do("GET", "/api/batches/"+res.BatchID, nil, "X-API-Key", tc.key).Status, tc.key)
	}
	m, err := envelope.Decode(h.get("queue.wecom.normal").Body)
	require.NoError(t, err)
	require.Equal(t, "shop", m.Tenant)
	require.Equal(t, http.StatusForbidden, h.do("POST", "/api/messages/batch", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = []string{"a"} }), "X-API-Key", readKey).Status)
}

// failingAfter lets the real publisher take n messages, then fails the
// rest as a broker that stopped confirming would.
type failingAfter struct {
	Publisher
	n atomic.Int32
}

func (f *failingAfter) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	if f.n.Add(-1) < 0 {
		return broker.ErrNacked
	}
	return f.Publisher.Publish(ctx, exchange, key, msg)
}

// refusingWhile nacks every publish while on is set.
type refusingWhile struct {
	Publisher
	on atomic.Bool
}

func (f *refusingWhile) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	if f.on.Load() {
		return broker.ErrNacked
	}
	return f.Publisher.Publish(ctx, exchange, key, msg)
}

// A mail batch whose publishing fails half-way rolls back every recipient
// and withdraws what already reached the queue, so that no consumer sends
// it: the 503 keeps its promise that nothing was kept.
func TestPartlyPublishedBatchIsWithdrawn(t *testing.T) {
	h := setup(t, options{})
	f := &failingAfter{Publisher: h.srv.d.Publisher}
	f.n.Store(2)
	h.srv.d.Publisher = f
	var to []string
	for i := range 6 {
		to = append(to, fmt.Sprintf("m%d@example.com", i))
	}
	r := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = to }))
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	require.Empty(t, h.keysMatching("status:*"))
	require.Empty(t, h.keysMatching("batch:*"))
	require.Equal(t, 2, h.depth("queue.mail.normal"), "two were confirmed before the failure")
	for range 2 {
		m, err := envelope.Decode(h.get("queue.mail.normal").Body)
		require.NoError(t, err)
		v, err := h.redis.Client.Get(t.Context(), h.redis.Prefix+"mail:sent:task:{"+m.TaskID+"}").Result()
		require.NoError(t, err)
		require.Equal(t, "withdrawn", v, "a consumer acks it without sending")
	}
}

// statusScripts watches the scripts that write status records (a key
// under status:{…}) on a harness's Redis client: how many records each
// carries, and, while fail is set, fails them as an unreachable Redis
// would, leaving the other scripts alone.
type statusScripts struct {
	fail  atomic.Bool
	mu    sync.Mutex
	sizes []int
	seen  map[string]bool
}

// watchStatusScripts records, per script call, how many status records it
// writes. A call sent again is not counted twice: when another test
// flushes the scripts (SCRIPT FLUSH on every master, on the shared Redis
// Cluster), the EVALSHA answers NOSCRIPT and go-redis sends the same call
// as EVAL, with the same keys.
func watchStatusScripts(h *harness) *statusScripts {
	s := &statusScripts{seen: map[string]bool{}}
	marker := h.redis.Prefix + "status:{"
	h.redis.AddHook(testenv.CommandHook(func(cmd redis.Cmder) error {
		keys, _, ok := testenv.IsScript(cmd)
		if !ok {
			return nil
		}
		s.mu.Lock()
		records, again := 0, false
		for _, k := range keys {
			if strings.HasPrefix(k, marker) {
				again = again || s.seen[k]
				s.seen[k] = true
				records++
			}
		}
		if records > 0 && !again {
			s.sizes = append(s.sizes, records)
		}
		s.mu.Unlock()
		if records == 0 {
			return nil
		}
		if s.fail.Load() {
			return errors.New("injected: Redis unreachable")
		}
		return nil
	}))
	return s
}

// A batch's 1,000 records are written after its admission, in scripts of
// at most rdb.CompositeMax records: none holds Redis long in front of the
// codes of other requests (issue 22: the admitting script with every
// record in it took about 7 ms).
func TestBatchRecordsGoInBoundedScripts(t *testing.T) {
	h := setup(t, options{})
	watch := watchStatusScripts(h)
	to := make([]string, MaxBatchRecipients)
	for i := range to {
		to[i] = fmt.Sprintf("u%04d", i)
	}
	r := h.do("POST", "/api/messages/batch", noticeBody("WECOM", func(m map[string]any) { m["recipients"] = to }))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Len(t, res.Accepted, MaxBatchRecipients)
	require.Len(t, h.keysMatching("status:*"), MaxBatchRecipients, "every record written")
	watch.mu.Lock()
	sizes := watch.sizes
	watch.mu.Unlock()
	total := 0
	for _, n := range sizes {
		require.LessOrEqual(t, n, rdb.CompositeMax, "records in one script: %v", sizes)
		total += n
	}
	require.Equal(t, MaxBatchRecipients, total, "each record written once: %v", sizes)
}

// When a batch's records cannot be written after its recipients were
// admitted, the answer is a 503 that keeps its word: no record, nothing
// published, and what was counted given back.
func TestBatchWhoseRecordsFailIsUndone(t *testing.T) {
	for _, messageType := range []string{"EMAIL", "WECOM"} {
		t.Run(messageType, func(t *testing.T) {
			lim := defaultLimits()
			lim.PerAPIKeyMinute = 3
			h := setup(t, options{limits: lim})
			watch := watchStatusScripts(h)
			three := []string{"a@example.com", "b@example.com", "c@example.com"}
			queue := "queue.mail.normal"
			if messageType == "WECOM" {
				three, queue = []string{"alice", "bob", "carol"}, "queue.wecom.normal"
			}
			body := noticeBody(messageType, func(m map[string]any) { m["recipients"] = three })
			watch.fail.Store(true)
			r := h.do("POST", "/api/messages/batch", body)
			require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
			require.Contains(t, r.Msg, "nothing was kept")
			watch.fail.Store(false)
			require.Empty(t, h.keysMatching("status:*"), "no status record")
			require.Empty(t, h.keysMatching("batch:*"), "no batch")
			require.Zero(t, h.depth(queue), "nothing published")
			// The reservation is given back in the background: the same
			// three fit again once it is.
			deadline := time.Now().Add(10 * time.Second)
			for {
				r = h.do("POST", "/api/messages/batch", body)
				if r.Status == http.StatusAccepted || time.Now().After(deadline) {
					break
				}
				require.Equal(t, http.StatusTooManyRequests, r.Status, r.Msg)
				time.Sleep(20 * time.Millisecond)
			}
			require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
			var res BatchResult
			r.data(t, &res)
			require.Len(t, res.Accepted, 3, "the failed batch's three were given back")
		})
	}
}

// A client that retries the 503 of a batch whose records failed, with its
// Idempotency-Key, gets the batch once: every record, one message per
// recipient, and the same answer when it asks again.
func TestBatchRetriedAfterItsRecordsFailed(t *testing.T) {
	h := setup(t, options{})
	watch := watchStatusScripts(h)
	body := noticeBody("EMAIL", func(m map[string]any) {
		m["recipients"] = []string{"a@example.com", "b@example.com", "c@example.com"}
	})
	watch.fail.Store(true)
	r := h.do("POST", "/api/messages/batch", body, idemHeader, "rec-fail")
	require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	watch.fail.Store(false)
	require.Zero(t, h.depth("queue.mail.normal"), "nothing published by the failed attempt")

	r = h.do("POST", "/api/messages/batch", body, idemHeader, "rec-fail")
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res BatchResult
	r.data(t, &res)
	require.Len(t, res.Accepted, 3)
	for _, a := range res.Accepted {
		got := h.do("GET", "/api/messages/"+a.TaskID, nil)
		require.Equal(t, http.StatusOK, got.Status, "record of %s", a.Recipient)
	}
	require.Len(t, h.keysMatching("status:*"), 3, "no record left over from the failed attempt")
	require.Equal(t, 3, h.depth("queue.mail.normal"), "one message per recipient")

	again := h.do("POST", "/api/messages/batch", body, idemHeader, "rec-fail")
	require.Equal(t, http.StatusAccepted, again.Status, again.Msg)
	require.JSONEq(t, string(r.RawData), string(again.RawData), "replayed, not sent again")
	require.Equal(t, 3, h.depth("queue.mail.normal"))
}
