package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func TestVerificationCodeLandsOnQueueWithTheRightProperties(t *testing.T) {
	h := setup(t, options{})
	r := h.do("POST", "/api/verification-codes", map[string]any{"channel": "email", "recipient": "Alice@Example.com", "purpose": "login", "locale": "zh-CN", "clientIp": "203.0.113.9"})
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var got VerificationCode
	r.data(t, &got)
	require.Equal(t, "queued", got.Status)
	require.WithinDuration(t, time.Now().Add(10*time.Minute), got.ExpiresAt, 5*time.Second)
	require.WithinDuration(t, time.Now().Add(time.Minute), got.ResendAfter, 5*time.Second)

	d := h.get("queue.mail")
	require.Equal(t, got.TaskID, d.MessageId)
	require.Equal(t, amqp.Persistent, d.DeliveryMode)
	require.Equal(t, "application/json", d.ContentType)
	require.Equal(t, "verification", d.Type)
	require.Equal(t, "exchange.direct.mail", d.Exchange)
	require.Equal(t, "mail", d.RoutingKey)
	schema, _ := envelope.HeaderInt(d.Headers, envelope.HeaderSchema)
	require.EqualValues(t, envelope.SchemaVersion, schema)
	deadline, ok := envelope.HeaderTime(d.Headers, envelope.HeaderDeadline)
	require.True(t, ok)
	require.WithinDuration(t, got.ExpiresAt, deadline, time.Second)
	m, err := envelope.Decode(d.Body)
	require.NoError(t, err)
	require.Equal(t, "alice@example.com", m.Recipient, "recipient normalised")
	require.Equal(t, "zh-CN", m.Locale)
	require.Equal(t, "verify_code", m.Template)
	require.Equal(t, "10", m.Variables["ttlMinutes"])
	code := h.code(d)
	require.Regexp(t, `^[0-9]{6}$`, code)
	require.NotContains(t, string(d.Body), code, "the body carries the code sealed, not in clear")

	require.NotContains(t, h.redisDump(), code, "Redis never holds the code in clear")
	for _, e := range h.logs.All() {
		line := fmt.Sprint(e.Message, e.ContextMap())
		require.NotContains(t, line, code, "logs never contain a code")
		require.NotContains(t, line, "alice@example.com", "logs never contain a full recipient")
	}
}

func TestVerifyWorksOnceThenFails(t *testing.T) {
	h := setup(t, options{})
	require.Equal(t, http.StatusAccepted, h.do("POST", "/api/verification-codes", codeRequest("a@example.com", "login")).Status)
	code := h.code(h.get("queue.mail"))
	verify := func(c string) (response, VerifyResult) {
		r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "A@example.com", "purpose": "login", "code": c})
		var v VerifyResult
		r.data(t, &v)
		return r, v
	}
	r, v := verify(code)
	require.Equal(t, http.StatusOK, r.Status)
	require.Equal(t, VerifyResult{Valid: true, AttemptsLeft: 5}, v)
	r, v = verify(code)
	require.Equal(t, http.StatusOK, r.Status)
	require.False(t, v.Valid, "a code works once")

	// Wrong guesses burn a code: the fifth answers 429.
	require.Equal(t, http.StatusAccepted, h.do("POST", "/api/verification-codes", codeRequest("a@example.com", "reset_password")).Status)
	code = h.code(h.get("queue.mail"))
	wrong := "000000"
	if code == wrong {
		wrong = "111111"
	}
	for i := 1; i <= 5; i++ {
		r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "a@example.com", "purpose": "reset_password", "code": wrong})
		var v VerifyResult
		r.data(t, &v)
		require.False(t, v.Valid)
		require.Equal(t, 5-i, v.AttemptsLeft)
		if i < 5 {
			require.Equal(t, http.StatusOK, r.Status)
		} else {
			require.Equal(t, http.StatusTooManyRequests, r.Status)
			require.Contains(t, r.Msg, "too many wrong attempts")
		}
	}
	// The sixth and seventh checks, the right code among them, are still
	// 429 (until the burned code would have expired): a locked-out user is
	// not a mistyped code.
	for i, c := range []string{code, wrong} {
		r = h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "a@example.com", "purpose": "reset_password", "code": c})
		v = VerifyResult{}
		r.data(t, &v)
		require.False(t, v.Valid, "a burned code stays dead")
		require.Equal(t, http.StatusTooManyRequests, r.Status, "check %d", 6+i)
		require.Contains(t, r.Msg, "too many wrong attempts")
	}
	// A new code lifts the lock.
	require.NoError(t, h.redis.Client.Del(context.Background(), h.keysMatching("*cooldown*")...).Err())
	require.Equal(t, http.StatusAccepted, h.do("POST", "/api/verification-codes", codeRequest("a@example.com", "reset_password")).Status)
	code = h.code(h.get("queue.mail"))
	r, v = verify2(h, "reset_password", code)
	require.Equal(t, http.StatusOK, r.Status)
	require.True(t, v.Valid, "a new code after a lock works")
}

func verify2(h *harness, purpose, code string) (response, VerifyResult) {
	h.t.Helper()
	r := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "a@example.com", "purpose": purpose, "code": code})
	var v VerifyResult
	r.data(h.t, &v)
	return r, v
}

func TestFrequencyControlAnswers429WithRetryAfter(t *testing.T) {
	limits := defaultLimits()
	limits.PerRecipientHour = 2
	limits.PerIPMinute = 2
	h := setup(t, options{limits: limits})
	for _, tc := range []struct {
		name       string
		body       map[string]any
		wantStatus int
		wantMsg    string
		maxRetry   int
	}{
		{"first", codeRequest("x@example.com", "login"), 202, "", 0},
		{"same purpose again: cooldown", codeRequest("x@example.com", "login"), 429, "resend cooldown", 60},
		{"other purpose", codeRequest("x@example.com", "register"), 202, "", 0},
		{"third in the hour", codeRequest("x@example.com", "reset_password"), 429, "per recipient: over the per-hour limit (2)", 3600},
		{"ip 1", map[string]any{"channel": "sms", "recipient": "+8613900000001", "purpose": "login", "clientIp": "198.51.100.7"}, 202, "", 0},
		{"ip 2", map[string]any{"channel": "sms", "recipient": "+8613900000002", "purpose": "login", "clientIp": "198.51.100.7"}, 202, "", 0},
		{"ip 3", map[string]any{"channel": "sms", "recipient": "+8613900000003", "purpose": "login", "clientIp": "198.51.100.7"}, 429, "per IP: over the per-minute limit (2)", 60},
		{"other ip", map[string]any{"channel": "sms", "recipient": "+8613900000004", "purpose": "login", "clientIp": "198.51.100.8"}, 202, "", 0},
	} {
		r := h.do("POST", "/api/verification-codes", tc.body)
		require.Equal(t, tc.wantStatus, r.Status, "%s: %s", tc.name, r.Msg)
		if tc.wantStatus == 429 {
			require.Contains(t, r.Msg, tc.wantMsg, tc.name)
			ra, err := strconv.Atoi(r.Header.Get("Retry-After"))
			require.NoError(t, err, tc.name)
			require.Positive(t, ra, tc.name)
			require.LessOrEqual(t, ra, tc.maxRetry, tc.name)
		}
	}
	require.Equal(t, 2, h.depth("queue.mail"))
	require.Equal(t, 3, h.depth("queue.sms"))
}

// A publish the broker does not confirm answers 503 and leaves nothing
// behind: no code, no counted attempt, no status record.
func TestFailedPublishRollsBackEverything(t *testing.T) {
	for _, tc := range []struct {
		name    string
		breakIt func(h *harness)
		why     string // the cause the 503 names
	}{
		{"exchange removed", func(h *harness) { require.NoError(t, h.ch.ExchangeDelete("exchange.direct.mail", false, false)) }, "its exchange does not exist"},
		{"queue unbound: returned as unroutable", func(h *harness) {
			require.NoError(t, h.ch.QueueUnbind("queue.mail", "mail", "exchange.direct.mail", nil))
		}, "no queue is bound for it"},
		{"broker connection down", func(h *harness) { h.stopBus() }, "there is no connection to RabbitMQ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := setup(t, options{})
			// A code issued before the failure must survive the rollback.
			require.Equal(t, http.StatusAccepted, h.do("POST", "/api/verification-codes", codeRequest("b@example.com", "register")).Status)
			before := h.code(h.get("queue.mail"))
			limiterBefore := h.keysMatching("ratelimit:*")

			tc.breakIt(h)
			r := h.do("POST", "/api/verification-codes", codeRequest("b@example.com", "login"))
			require.Equal(t, http.StatusServiceUnavailable, r.Status)
			require.Contains(t, r.Msg, "message not accepted")
			require.Contains(t, r.Msg, tc.why)
			require.Contains(t, r.Msg, "safe to retry")
			require.NotEmpty(t, r.Header.Get("Retry-After"), "every 503 says when to come back")

			require.Empty(t, h.keysMatching("verify:{*:email:b@example.com}:login"), "no code left behind")
			require.Empty(t, h.keysMatching("ratelimit:*cooldown*login"), "no cooldown left behind")
			// Nothing new is left behind. (A key may be gone: the per-second
			// global window expires on its own when the machine is slow.)
			require.Subset(t, limiterBefore, h.keysMatching("ratelimit:*"))
			for _, k := range h.keysMatching("ratelimit:*:log:*") {
				n, err := h.redis.Client.ZCard(t.Context(), k).Result()
				require.NoError(t, err)
				require.LessOrEqual(t, n, int64(1), "only the earlier request is counted in %s", k)
			}
			for _, k := range h.keysMatching("ratelimit:*:log:verify:recipient:*") {
				n, err := h.redis.Client.ZCard(t.Context(), k).Result()
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "the earlier request is still counted in %s", k)
			}
			require.Len(t, h.keysMatching("status:*"), 1, "no status record for the failed message")

			// The code from before still verifies.
			v := h.do("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "b@example.com", "purpose": "register", "code": before})
			var res VerifyResult
			v.data(t, &res)
			require.True(t, res.Valid)
		})
	}
}

func TestConcurrentDuplicateRequestsMakeOneCode(t *testing.T) {
	h := setup(t, options{})
	var wg sync.WaitGroup
	statuses := make(chan int, 20)
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses <- h.do("POST", "/api/verification-codes", codeRequest("dup@example.com", "login")).Status
		}()
	}
	wg.Wait()
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	require.Equal(t, map[int]int{202: 1, 429: 19}, count)
	require.Equal(t, 1, h.depth("queue.mail"))
	require.Len(t, h.keysMatching("verify:*"), 1)
}

// A rate-limit change made on one API replica is enforced by another
// within one second.
func TestRateLimitChangeReachesSecondInstanceWithinOneSecond(t *testing.T) {
	a := setup(t, options{})
	b := setup(t, options{share: a})
	send := func(h *harness) response {
		return h.do("POST", "/api/messages/send", map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipient": "c@example.com",
			"variables": map[string]string{"title": "t", "content": "c"}})
	}
	require.Equal(t, http.StatusAccepted, send(b).Status)
	r := a.do("POST", "/api/rate-limits", map[string]any{"id": "global-tight", "provider": nil, "requestsPerMinute": 1, "isEnabled": true})
	require.Equal(t, http.StatusCreated, r.Status, r.Msg)
	changed := time.Now()
	testenv.WaitFor(t, time.Second, "second instance sees the new limit", func() bool { return len(b.srv.d.RateLimits.Rules("")) == 1 })
	t.Logf("seen by the second instance after %s", time.Since(changed))
	first, second := send(b), send(b)
	require.Equal(t, http.StatusAccepted, first.Status, first.Msg)
	require.Equal(t, http.StatusTooManyRequests, second.Status)
	require.Contains(t, second.Msg, "over the per-minute limit (1)")

	// Disabling it is seen as fast.
	r = a.do("PUT", "/api/rate-limits/global-tight", map[string]any{"provider": nil, "requestsPerMinute": 1, "isEnabled": false})
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	testenv.WaitFor(t, time.Second, "second instance sees the limit disabled", func() bool { return len(b.srv.d.RateLimits.Rules("")) == 0 })
	require.Equal(t, http.StatusAccepted, send(b).Status)
}

func TestRateLimitCRUD(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		method, path string
		body         any
		want         int
		msg          string
	}{
		{"GET", "/api/rate-limits", nil, 200, ""},
		{"POST", "/api/rate-limits", map[string]any{"id": "aliyun", "provider": "aliyun", "requestsPerSecond": 5, "requestsPerMinute": 200, "requestsPerHour": 5000, "isEnabled": true}, 201, ""},
		{"POST", "/api/rate-limits", map[string]any{"id": "aliyun", "provider": "aliyun", "requestsPerSecond": 1, "isEnabled": true}, 409, "already exists"},
		{"POST", "/api/rate-limits", map[string]any{"provider": nil, "requestsPerSecond": -1, "isEnabled": true}, 400, ""},
		{"POST", "/api/rate-limits", map[string]any{"provider": nil, "requestsPerSecond": 10, "requestsPerMinute": 5, "isEnabled": true}, 400, ""},
		{"POST", "/api/rate-limits", map[string]any{"manufacturerId": 1}, 400, "unknown field"},
		{"GET", "/api/rate-limits/aliyun", nil, 200, ""},
		{"PUT", "/api/rate-limits/aliyun", map[string]any{"provider": "aliyun", "requestsPerSecond": 10, "isEnabled": true}, 200, ""},
		{"PUT", "/api/rate-limits/aliyun", map[string]any{"id": "other", "provider": "aliyun", "isEnabled": true}, 400, "differs"},
		{"PUT", "/api/rate-limits/missing", map[string]any{"provider": nil, "isEnabled": true}, 404, ""},
		{"DELETE", "/api/rate-limits/aliyun", nil, 200, ""},
		{"GET", "/api/rate-limits/aliyun", nil, 404, ""},
		{"DELETE", "/api/rate-limits/aliyun", nil, 404, ""},
	} {
		r := h.do(tc.method, tc.path, tc.body)
		require.Equal(t, tc.want, r.Status, "%s %s: %s", tc.method, tc.path, r.Msg)
		require.Contains(t, r.Msg, tc.msg)
	}
	r := h.do("POST", "/api/rate-limits", map[string]any{"provider": nil, "requestsPerHour": 100, "isEnabled": true})
	require.Equal(t, 201, r.Status)
	var created map[string]any
	r.data(t, &created)
	require.NotEmpty(t, created["id"], "an id is generated")
	require.Nil(t, created["provider"])
	var list []map[string]any
	h.do("GET", "/api/rate-limits", nil).data(t, &list)
	require.Len(t, list, 1)
}

func TestSendValidation(t *testing.T) {
	h := setup(t, options{})
	base := func(mod func(map[string]any)) map[string]any {
		m := map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipient": "d@example.com", "variables": map[string]string{"title": "t", "content": "c"}}
		mod(m)
		return m
	}
	for _, tc := range []struct {
		name string
		body any
		want int
		msg  string
	}{
		{"ok", base(func(map[string]any) {}), 202, "queued"},
		{"sms ok", base(func(m map[string]any) { m["messageType"] = "SMS"; m["recipient"] = "+14155550100" }), 202, ""},
		{"unknown template", base(func(m map[string]any) { m["templateCode"] = "welcome" }), 400, `unknown template "welcome"`},
		{"missing variable", base(func(m map[string]any) { m["variables"] = map[string]string{"title": "t"} }), 400, `needs variable "content"`},
		{"numeric variable", base(func(m map[string]any) { m["variables"] = map[string]any{"title": 1, "content": "c"} }), 400, "must be a string"},
		{"bad type", base(func(m map[string]any) { m["messageType"] = "PUSH" }), 400, "messageType"},
		{"bad email", base(func(m map[string]any) { m["recipient"] = "not-an-email" }), 400, "email address"},
		{"display name", base(func(m map[string]any) { m["recipient"] = "Bob <bob@example.com>" }), 400, "bare email"},
		{"header injection", base(func(m map[string]any) { m["recipient"] = "d@example.com\r\nBcc: x@evil.com" }), 400, "CR or LF"},
		{"subject injection", base(func(m map[string]any) {
			m["variables"] = map[string]string{"title": "hi\r\nBcc: x@evil.com", "content": "c"}
		}), 400, "subject"},
		{"bad phone", base(func(m map[string]any) { m["messageType"] = "SMS"; m["recipient"] = "13900001234" }), 400, "E.164"},
		{"priority", base(func(m map[string]any) { m["priority"] = 10 }), 400, "priority"},
		{"http callback", base(func(m map[string]any) { m["callbackUrl"] = "http://example.com/cb" }), 400, "https"},
		{"negative delay", base(func(m map[string]any) { m["delaySeconds"] = -1 }), 400, "positive"},
		{"too long delay", base(func(m map[string]any) { m["delaySeconds"] = 90000 }), 400, "maximum of 24h"},
		{"past sendAt", base(func(m map[string]any) { m["sendAt"] = "2020-01-01T00:00:00Z" }), 400, "not in the future"},
		{"bad sendAt", base(func(m map[string]any) { m["sendAt"] = "tomorrow" }), 400, "RFC 3339"},
		{"both delays", base(func(m map[string]any) { m["delaySeconds"] = 1; m["sendAt"] = "2099-01-01T00:00:00Z" }), 400, "not both"},
		{"unknown field", base(func(m map[string]any) { m["cc"] = "x@example.com" }), 400, `unknown field "cc"`},
		{"not json", "{nope", 400, "malformed JSON"},
		{"empty", "", 400, "empty body"},
		{"array", "[]", 400, "JSON object"},
		{"trailing", `{"messageType":"EMAIL"} {}`, 400, "after the JSON object"},
		{"too large", base(func(m map[string]any) {
			m["variables"] = map[string]string{"title": strings.Repeat("x", 5000), "content": "c"}
		}), 413, "larger than 4096"},
	} {
		r := h.do("POST", "/api/messages/send", tc.body)
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.name, r.Msg)
		require.Contains(t, r.Msg, tc.msg, tc.name)
	}
	r := h.do("POST", "/api/messages/send", `{}`, "Content-Type", "text/plain")
	require.Equal(t, http.StatusUnsupportedMediaType, r.Status)
}

func TestScheduledMessageAndStatus(t *testing.T) {
	h := setup(t, options{})
	r := h.do("POST", "/api/messages/send", map[string]any{"messageType": "SMS", "templateCode": "notice", "recipient": "+8613900001234",
		"variables": map[string]string{"title": "t", "content": "c"}, "delaySeconds": 0.3})
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res SendResult
	r.data(t, &res)
	require.Equal(t, "scheduled", res.Status)
	require.NotNil(t, res.ScheduledAt)
	require.WithinDuration(t, time.Now().Add(300*time.Millisecond), *res.ScheduledAt, time.Second)
	// 0.3 s starts on the 256 ms tier, carrying its due time and target.
	d := h.get("queue.delay.256ms")
	require.Equal(t, res.TaskID, d.MessageId)
	require.Equal(t, "exchange.direct.sms", d.Headers[envelope.HeaderTargetExchange])
	require.Equal(t, "sms.normal", d.Headers[envelope.HeaderTargetKey], "it comes back to its level (normal by default)")

	g := h.do("GET", "/api/messages/"+res.TaskID, nil)
	require.Equal(t, http.StatusOK, g.Status)
	var view MessageView
	g.data(t, &view)
	require.Equal(t, "scheduled", string(view.Status))
	require.Equal(t, "sms", string(view.Channel))
	require.Equal(t, "+86*******1234", view.Recipient)
	require.NotNil(t, view.ScheduledAt)
	q := h.do("GET", "/api/messages?taskId="+res.TaskID, nil)
	require.Equal(t, http.StatusOK, q.Status)
	require.Equal(t, http.StatusNotFound, h.do("GET", "/api/messages/01234567-no-such-task", nil).Status)
	require.Equal(t, http.StatusBadRequest, h.do("GET", "/api/messages?taskId=../etc", nil).Status)
	require.Equal(t, http.StatusBadRequest, h.do("GET", "/api/messages", nil).Status)
}

func TestAuthAndEnvelopeEverywhere(t *testing.T) {
	h := setup(t, options{})
	for _, tc := range []struct {
		name, method, path string
		key                string
		want               int
	}{
		{"no key", "GET", "/api/rate-limits", "", 401},
		{"wrong key", "GET", "/api/rate-limits", "nope", 401},
		{"good key", "GET", "/api/rate-limits", testKey, 200},
		{"unknown route with key", "GET", "/api/nothing", testKey, 404},
		{"wrong method", "DELETE", "/api/messages/send", testKey, 405},
		{"health needs no key", "GET", "/healthz", "", 200},
		{"ready needs no key", "GET", "/readyz", "", 200},
	} {
		r := h.do(tc.method, tc.path, nil, "X-API-Key", tc.key)
		require.Equal(t, tc.want, r.Status, tc.name)
		require.NotEmpty(t, r.Msg, "%s: every answer is an envelope with a message", tc.name)
	}
}

func TestQueueStatsWarnsAbove80Percent(t *testing.T) {
	h := setup(t, options{model: func(c *topology.Config) {
		c.Channels[topology.SMS] = topology.ChannelConfig{QueueTTL: time.Minute, MaxLength: 10}
	}})
	for i := range 9 {
		require.NoError(t, h.ch.Publish("exchange.direct.sms", "sms", false, false, amqp.Publishing{Body: []byte(strconv.Itoa(i))}))
	}
	testenv.WaitFor(t, 5*time.Second, "9 messages in queue.sms", func() bool { return h.depth("queue.sms") == 9 })
	r := h.do("GET", "/api/queues/stats", nil)
	require.Equal(t, http.StatusOK, r.Status)
	var data struct{ Queues []QueueStat }
	r.data(t, &data)
	byName := map[string]QueueStat{}
	for _, q := range data.Queues {
		byName[q.Name] = q
	}
	require.Len(t, byName, len(h.model.Queues))
	require.Equal(t, QueueStat{Name: "queue.sms", Role: "main", Channel: "sms", Level: "code", Messages: 9, MaxLength: 10, Usage: 0.9, Status: "warning"}, byName["queue.sms"])
	require.Equal(t, "ok", byName["queue.mail"].Status)
	require.Equal(t, "dead-letter", byName["queue.mail.dlq"].Role)
	require.Equal(t, "delay", byName["queue.delay.5s"].Role)
	require.Equal(t, "relay", byName["queue.delay.relay"].Role)
	require.NoError(t, h.ch.ExchangeDelete("x", false, false)) // no-op: the stats read nothing but queues
}

func TestMetricsEndpoint(t *testing.T) {
	h := setup(t, options{})
	require.Equal(t, 202, h.do("POST", "/api/verification-codes", codeRequest("m@example.com", "login")).Status)
	require.Equal(t, 429, h.do("POST", "/api/verification-codes", codeRequest("m@example.com", "login")).Status)
	resp, err := http.Get(h.http.URL + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	buf := new(strings.Builder)
	_, _ = fmt.Fprint(buf, readAll(t, resp))
	for _, want := range []string{
		`msgpulse_http_requests_total{code="202",method="POST",route="/api/verification-codes"} 1`,
		`msgpulse_ratelimit_rejections_total{limit="resend cooldown"} 1`,
		`msgpulse_publish_total{result="confirmed"} 1`,
		`msgpulse_http_request_duration_seconds_bucket{route="/api/verification-codes"`,
	} {
		require.Contains(t, buf.String(), want)
	}
}

func TestDLQStats(t *testing.T) {
	h := setup(t, options{})
	// Two dead letters: one rejected, one malformed body.
	require.NoError(t, h.ch.Publish("exchange.dead-letter.sms", "sms", false, false, amqp.Publishing{MessageId: "m1", Body: []byte("garbage")}))
	body := `{"v":1,"taskId":"m2","kind":"notification","channel":"sms","recipient":"+8613900001234","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`
	require.NoError(t, h.ch.Publish("exchange.direct.sms", "sms", false, false, amqp.Publishing{MessageId: "m2", Body: []byte(body)}))
	var got amqp.Delivery
	testenv.WaitFor(t, 5*time.Second, "m2 in queue.sms", func() bool {
		var ok bool
		var err error
		got, ok, err = h.ch.Get("queue.sms", false)
		require.NoError(t, err)
		return ok
	})
	require.NoError(t, got.Reject(false)) // the broker dead-letters it: reason rejected
	testenv.WaitFor(t, 5*time.Second, "two dead letters", func() bool { return h.depth("queue.sms.dlq") == 2 })
	r := h.do("GET", "/api/dlq/stats", nil)
	require.Equal(t, http.StatusOK, r.Status, r.Msg)
	var data struct{ Queues []DLQStat }
	r.data(t, &data)
	var sms *DLQStat
	for i := range data.Queues {
		if data.Queues[i].Queue == "queue.sms.dlq" {
			sms = &data.Queues[i]
		}
	}
	require.NotNil(t, sms)
	require.Equal(t, "sms", sms.Channel)
	require.Equal(t, 2, sms.Total)
	require.Equal(t, 1, sms.ByReason["malformed"], "%v", sms.ByReason)
	require.Equal(t, 1, sms.ByReason["rejected"], "%v", sms.ByReason)
	require.Equal(t, 2, h.depth("queue.sms.dlq"), "reading for stats keeps every message")
}
