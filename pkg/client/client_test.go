package client

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

	"github.com/stretchr/testify/require"
)

const testKey = "k-test-123"

// recorded is what the fake server saw of one request.
type recorded struct {
	Method, Path, Query string
	Header              http.Header
	Body                string
}

// answer is what the fake server replies.
type answer struct {
	Status int
	Header map[string]string
	Body   string
}

// fakeServer answers every request with one canned answer and records what
// it received, so assertions run in the test goroutine (require must not
// be called from the handler's).
type fakeServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFakeServer(t *testing.T, a answer) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.EscapedPath(), r.URL.RawQuery, r.Header.Clone(), string(b)})
		f.mu.Unlock()
		for k, v := range a.Header {
			w.Header().Set(k, v)
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.Status)
		_, _ = io.WriteString(w, a.Body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func newTestClient(t *testing.T, base string, opts ...Option) *Client {
	t.Helper()
	c, err := New(base, testKey, opts...)
	require.NoError(t, err)
	return c
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func ptr[T any](v T) *T { return &v }

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name, base, key string
		wantErr         string
		wantBase        string
	}{
		{name: "plain", base: "http://msgpulse:8080", key: "k", wantBase: "http://msgpulse:8080"},
		{name: "trailing slash trimmed", base: "https://msgpulse/", key: "k", wantBase: "https://msgpulse"},
		{name: "path prefix kept", base: "https://gw/msgpulse/", key: "k", wantBase: "https://gw/msgpulse"},
		{name: "no scheme", base: "msgpulse:8080", key: "k", wantErr: "want http(s)://host"},
		{name: "ftp", base: "ftp://msgpulse", key: "k", wantErr: "want http(s)://host"},
		{name: "no host", base: "http://", key: "k", wantErr: "want http(s)://host"},
		{name: "unparsable", base: "http://a b:x", key: "k", wantErr: "base URL"},
		{name: "query", base: "http://msgpulse/?x=1", key: "k", wantErr: "must not have a query"},
		{name: "user info", base: "http://u:p@msgpulse", key: "k", wantErr: "must not have a query, fragment or user info"},
		{name: "empty key", base: "http://msgpulse", key: "", wantErr: "API key is empty"},
		{name: "newline in key", base: "http://msgpulse", key: "k\r\nX-Evil: 1", wantErr: "control characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(tc.base, tc.key)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.Nil(t, c)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantBase, c.baseURL)
			require.Equal(t, DefaultTimeout, c.timeout)
			require.Equal(t, DefaultUserAgent, c.userAgent)
		})
	}
}

// Every method: the request it makes (method, escaped path, key, JSON body)
// and how it reads the contract's answer.
func TestMethods(t *testing.T) {
	const msgJSON = `{"taskId":"t-1","status":"sent","channel":"email","recipient":"a***@example.com","attempts":2,
		"createdAt":"2026-05-04T10:15:00Z","updatedAt":"2026-05-04T10:15:09Z","lastError":"",
		"kind":"notification","template":"order_shipped","sentAt":"2026-05-04T10:15:09Z","provider":"smtp"}`
	const rlJSON = `{"id":"aliyun-sms","provider":"aliyun","requestsPerSecond":10,"requestsPerMinute":300,
		"requestsPerHour":0,"requestsPerDay":100000,"isEnabled":true}`
	aliyun := RateLimit{ID: "aliyun-sms", Provider: ptr("aliyun"), RequestsPerSecond: 10, RequestsPerMinute: 300, RequestsPerDay: 100000, IsEnabled: true}

	for _, tc := range []struct {
		name       string
		call       func(context.Context, *Client) (any, error)
		wantMethod string
		wantPath   string
		wantBody   string // JSON; "" means no body
		noKey      bool   // the route takes no API key
		status     int
		respBody   string
		want       any
	}{
		{
			name: "request verification code",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.RequestVerificationCode(ctx, VerificationCodeRequest{Channel: ChannelEmail, Recipient: "alice@example.com", Purpose: "register", Locale: LocaleEn, ClientIP: "203.0.113.7"})
			},
			wantMethod: "POST", wantPath: "/api/verification-codes",
			wantBody: `{"channel":"email","recipient":"alice@example.com","purpose":"register","locale":"en","clientIp":"203.0.113.7"}`,
			status:   202,
			respBody: `{"code":202,"msg":"accepted","data":{"taskId":"t-1","status":"queued","expiresAt":"2026-05-04T10:20:00Z","resendAfter":"2026-05-04T10:16:00Z"}}`,
			want:     &VerificationCode{TaskID: "t-1", Status: StatusQueued, ExpiresAt: ts("2026-05-04T10:20:00Z"), ResendAfter: ts("2026-05-04T10:16:00Z")},
		},
		{
			name: "request verification code omits optional fields",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.RequestVerificationCode(ctx, VerificationCodeRequest{Channel: ChannelSMS, Recipient: "+8613800138000", Purpose: "login"})
			},
			wantMethod: "POST", wantPath: "/api/verification-codes",
			wantBody: `{"channel":"sms","recipient":"+8613800138000","purpose":"login"}`,
			status:   202,
			respBody: `{"code":202,"msg":"accepted","data":{"taskId":"t-2","status":"queued","expiresAt":"2026-05-04T10:20:00+08:00","resendAfter":"2026-05-04T10:16:00+08:00"}}`,
			want:     &VerificationCode{TaskID: "t-2", Status: StatusQueued, ExpiresAt: ts("2026-05-04T10:20:00+08:00"), ResendAfter: ts("2026-05-04T10:16:00+08:00")},
		},
		{
			name: "verify code",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.VerifyCode(ctx, VerifyRequest{Channel: ChannelEmail, Recipient: "alice@example.com", Purpose: "register", Code: "012345"})
			},
			wantMethod: "POST", wantPath: "/api/verification-codes/verify",
			wantBody: `{"channel":"email","recipient":"alice@example.com","purpose":"register","code":"012345"}`,
			status:   200, respBody: `{"code":200,"msg":"code does not match","data":{"valid":false,"attemptsLeft":2}}`,
			want: &VerifyResult{Valid: false, AttemptsLeft: 2},
		},
		{
			name: "send message with every option, priority 0 kept",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SendMessage(ctx, SendRequest{MessageType: MessageEmail, TemplateCode: "order_shipped", Recipient: "alice@example.com",
					Variables: map[string]string{"name": "Alice"}, Locale: "en", Priority: ptr(0),
					CallbackURL: "https://shop.example.com/hook", DelaySeconds: ptr(90.5)})
			},
			wantMethod: "POST", wantPath: "/api/messages/send",
			wantBody: `{"messageType":"EMAIL","templateCode":"order_shipped","recipient":"alice@example.com","variables":{"name":"Alice"},
				"locale":"en","priority":0,"callbackUrl":"https://shop.example.com/hook","delaySeconds":90.5}`,
			status:   202,
			respBody: `{"code":202,"msg":"accepted","data":{"taskId":"t-3","status":"scheduled","scheduledAt":"2026-05-04T10:16:30.5Z"}}`,
			want:     &SendResult{TaskID: "t-3", Status: StatusScheduled, ScheduledAt: ptr(ts("2026-05-04T10:16:30.5Z"))},
		},
		{
			name: "send message at a level, with a ttl",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SendMessage(ctx, SendRequest{MessageType: MessageEmail, TemplateCode: "notice", Recipient: "alice@example.com",
					Variables: map[string]string{}, Level: LevelLow, TTLSeconds: ptr(3600.0)})
			},
			wantMethod: "POST", wantPath: "/api/messages/send",
			wantBody: `{"messageType":"EMAIL","templateCode":"notice","recipient":"alice@example.com","variables":{},
				"ttlSeconds":3600,"priority":"low"}`,
			status:   202,
			respBody: `{"code":202,"msg":"accepted","data":{"taskId":"t-4","status":"queued"}}`,
			want:     &SendResult{TaskID: "t-4", Status: StatusQueued},
		},
		{
			name: "send message: nil variables sent as {}, sendAt as RFC 3339",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.SendMessage(ctx, SendRequest{MessageType: MessageSMS, TemplateCode: "reminder", Recipient: "+8613800138000",
					SendAt: ptr(ts("2026-05-04T18:00:00+08:00"))})
			},
			wantMethod: "POST", wantPath: "/api/messages/send",
			wantBody: `{"messageType":"SMS","templateCode":"reminder","recipient":"+8613800138000","variables":{},"sendAt":"2026-05-04T18:00:00+08:00"}`,
			status:   202, respBody: `{"code":202,"msg":"accepted","data":{"taskId":"t-4","status":"queued"}}`,
			want: &SendResult{TaskID: "t-4", Status: StatusQueued},
		},
		{
			name:       "get message escapes the task id",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.GetMessage(ctx, "a/b c?d") },
			wantMethod: "GET", wantPath: "/api/messages/a%2Fb%20c%3Fd",
			status: 200, respBody: `{"code":200,"msg":"ok","data":` + msgJSON + `}`,
			want: &Message{TaskID: "t-1", Status: StatusSent, Channel: ChannelEmail, Recipient: "a***@example.com", Attempts: 2,
				CreatedAt: ts("2026-05-04T10:15:00Z"), UpdatedAt: ts("2026-05-04T10:15:09Z"), Kind: "notification", Template: "order_shipped",
				SentAt: ptr(ts("2026-05-04T10:15:09Z")), Provider: "smtp"},
		},
		{
			name:       "list rate limits",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.ListRateLimits(ctx) },
			wantMethod: "GET", wantPath: "/api/rate-limits",
			status: 200, respBody: `{"code":200,"msg":"ok","data":[{"id":"global","provider":null,"requestsPerSecond":50,"requestsPerMinute":0,"requestsPerHour":0,"requestsPerDay":0,"isEnabled":true},` + rlJSON + `]}`,
			want: []RateLimit{{ID: "global", RequestsPerSecond: 50, IsEnabled: true}, aliyun},
		},
		{
			name:       "list rate limits: none",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.ListRateLimits(ctx) },
			wantMethod: "GET", wantPath: "/api/rate-limits",
			status: 200, respBody: `{"code":200,"msg":"ok","data":[]}`,
			want: []RateLimit{},
		},
		{
			name: "create global rate limit: id omitted, provider null",
			call: func(ctx context.Context, c *Client) (any, error) {
				return c.CreateRateLimit(ctx, RateLimit{RequestsPerSecond: 50, IsEnabled: true})
			},
			wantMethod: "POST", wantPath: "/api/rate-limits",
			wantBody: `{"provider":null,"requestsPerSecond":50,"requestsPerMinute":0,"requestsPerHour":0,"requestsPerDay":0,"isEnabled":true}`,
			status:   201,
			respBody: `{"code":201,"msg":"created","data":{"id":"rl-9","provider":null,"requestsPerSecond":50,"requestsPerMinute":0,"requestsPerHour":0,"requestsPerDay":0,"isEnabled":true}}`,
			want:     &RateLimit{ID: "rl-9", RequestsPerSecond: 50, IsEnabled: true},
		},
		{
			name:       "get rate limit",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.GetRateLimit(ctx, "aliyun-sms") },
			wantMethod: "GET", wantPath: "/api/rate-limits/aliyun-sms",
			status: 200, respBody: `{"code":200,"msg":"ok","data":` + rlJSON + `}`,
			want: &aliyun,
		},
		{
			name: "update rate limit: the path id goes into the body",
			call: func(ctx context.Context, c *Client) (any, error) {
				rl := aliyun
				rl.ID = "ignored"
				return c.UpdateRateLimit(ctx, "aliyun-sms", rl)
			},
			wantMethod: "PUT", wantPath: "/api/rate-limits/aliyun-sms",
			wantBody: rlJSON,
			status:   200, respBody: `{"code":200,"msg":"ok","data":` + rlJSON + `}`,
			want: &aliyun,
		},
		{
			name: "delete rate limit",
			call: func(ctx context.Context, c *Client) (any, error) {
				return "deleted", c.DeleteRateLimit(ctx, "a b")
			},
			wantMethod: "DELETE", wantPath: "/api/rate-limits/a%20b",
			status: 200, respBody: `{"code":200,"msg":"deleted","data":null}`,
			want: "deleted",
		},
		{
			name:       "list fraud blocks",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.ListFraudBlocks(ctx) },
			wantMethod: "GET", wantPath: "/api/fraud/blocks",
			status: 200, respBody: `{"code":200,"msg":"ok","data":[{"tenant":"shop","prefix":"+44740012","country":"GB","reason":"unverified",
				"since":"2026-05-04T10:15:00Z","until":"2026-05-04T11:15:00Z","sent":50,"verified":0}]}`,
			want: []FraudBlock{{Tenant: "shop", Prefix: "+44740012", Country: "GB", Reason: "unverified", Since: ts("2026-05-04T10:15:00Z"),
				Until: ts("2026-05-04T11:15:00Z"), Sent: 50}},
		},
		{
			name: "lift a fraud block",
			call: func(ctx context.Context, c *Client) (any, error) {
				return "lifted", c.LiftFraudBlock(ctx, "shop", "+44740012")
			},
			wantMethod: "DELETE", wantPath: "/api/fraud/blocks/shop/+44740012",
			status: 200, respBody: `{"code":200,"msg":"fraud guard block lifted","data":null}`,
			want: "lifted",
		},
		{
			name:       "queue stats",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.QueueStats(ctx) },
			wantMethod: "GET", wantPath: "/api/queues/stats",
			status: 200,
			respBody: `{"code":200,"msg":"ok","data":{"queues":[
				{"name":"queue.mail","role":"main","channel":"mail","messages":850,"consumers":4,"maxLength":1000,"usage":0.85,"status":"warning"},
				{"name":"queue.relay","role":"relay","channel":"","messages":0,"consumers":1,"maxLength":0,"usage":0,"status":"ok"}]}}`,
			want: &QueueStats{Queues: []QueueStat{
				{Name: "queue.mail", Role: "main", Channel: "mail", Messages: 850, Consumers: 4, MaxLength: 1000, Usage: 0.85, Status: "warning"},
				{Name: "queue.relay", Role: "relay", Consumers: 1, Status: "ok"},
			}},
		},
		{
			name:       "dlq stats",
			call:       func(ctx context.Context, c *Client) (any, error) { return c.DLQStats(ctx) },
			wantMethod: "GET", wantPath: "/api/dlq/stats",
			status: 200,
			respBody: `{"code":200,"msg":"ok","data":{"queues":[
				{"queue":"queue.mail.dlq","channel":"mail","total":4,"byReason":{"expired":3,"maxlen":1},"oldest":"2026-05-04T08:00:12Z","newest":"2026-05-04T10:02:40Z"},
				{"queue":"queue.sms.dlq","channel":"sms","total":0,"byReason":{}}]}}`,
			want: &DLQStats{Queues: []DLQQueueStat{
				{Queue: "queue.mail.dlq", Channel: "mail", Total: 4, ByReason: map[string]int{"expired": 3, "maxlen": 1},
					Oldest: ptr(ts("2026-05-04T08:00:12Z")), Newest: ptr(ts("2026-05-04T10:02:40Z"))},
				{Queue: "queue.sms.dlq", Channel: "sms", ByReason: map[string]int{}},
			}},
		},
		{
			name:       "ready sends no API key",
			call:       func(ctx context.Context, c *Client) (any, error) { return "ready", c.Ready(ctx) },
			wantMethod: "GET", wantPath: "/readyz", noKey: true,
			status: 200, respBody: `{"code":200,"msg":"ok","data":{"amqp":"ok","redis":"ok"}}`,
			want: "ready",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, answer{Status: tc.status, Body: tc.respBody})
			c := newTestClient(t, srv.URL)

			got, err := tc.call(t.Context(), c)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)

			reqs := srv.requests()
			require.Len(t, reqs, 1)
			r := reqs[0]
			require.Equal(t, tc.wantMethod, r.Method)
			require.Equal(t, tc.wantPath, r.Path)
			require.Empty(t, r.Query)
			require.Equal(t, DefaultUserAgent, r.Header.Get("User-Agent"))
			require.Equal(t, "application/json", r.Header.Get("Accept"))
			if tc.noKey {
				require.Empty(t, r.Header.Values("X-API-Key"))
			} else {
				require.Equal(t, []string{testKey}, r.Header.Values("X-API-Key"))
			}
			if tc.wantBody == "" {
				require.Empty(t, r.Body)
				require.Empty(t, r.Header.Get("Content-Type"))
			} else {
				require.JSONEq(t, tc.wantBody, r.Body)
				require.Equal(t, "application/json", r.Header.Get("Content-Type"))
			}
		})
	}
}

// Non-2xx answers become *APIError, envelope or not.
func TestAPIErrors(t *testing.T) {
	long := strings.Repeat("é", 2*maxResponseBytes) // larger than the read limit, multi-byte
	for _, tc := range []struct {
		name        string
		ans         answer
		wantStatus  int
		wantMsg     string
		wantRetry   time.Duration
		wantLimited bool
		wantMissing bool
	}{
		{
			name:       "429 with Retry-After seconds",
			ans:        answer{Status: 429, Header: map[string]string{"Retry-After": "30"}, Body: `{"code":429,"msg":"per recipient: over the per-hour limit (5)","data":null}`},
			wantStatus: 429, wantMsg: "per recipient: over the per-hour limit (5)", wantRetry: 30 * time.Second, wantLimited: true,
		},
		{
			name:       "429 without Retry-After",
			ans:        answer{Status: 429, Body: `{"code":429,"msg":"per IP: over the per-minute limit (10)","data":null}`},
			wantStatus: 429, wantMsg: "per IP: over the per-minute limit (10)", wantLimited: true,
		},
		{
			name:       "404",
			ans:        answer{Status: 404, Body: `{"code":404,"msg":"task t-1: not found","data":null}`},
			wantStatus: 404, wantMsg: "task t-1: not found", wantMissing: true,
		},
		{
			name:       "400 names the field",
			ans:        answer{Status: 400, Body: `{"code":400,"msg":"recipient: not a valid email address","data":null}`},
			wantStatus: 400, wantMsg: "recipient: not a valid email address",
		},
		{
			name:       "503 with Retry-After as an HTTP date",
			ans:        answer{Status: 503, Header: map[string]string{"Retry-After": "Mon, 04 May 2026 10:01:00 GMT"}, Body: `{"code":503,"msg":"broker did not confirm the message","data":null}`},
			wantStatus: 503, wantMsg: "broker did not confirm the message", wantRetry: time.Minute,
		},
		{
			name: "proxy HTML page",
			ans: answer{Status: 502, Header: map[string]string{"Content-Type": "text/html"},
				Body: "<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n"},
			wantStatus: 502, wantMsg: "502 Bad Gateway 502 Bad Gateway nginx",
		},
		{
			name:       "plain text",
			ans:        answer{Status: 413, Header: map[string]string{"Content-Type": "text/plain"}, Body: "request entity too large\n"},
			wantStatus: 413, wantMsg: "request entity too large",
		},
		{
			name:       "JSON that is not an envelope",
			ans:        answer{Status: 401, Body: `{"message":"Invalid API key"}`},
			wantStatus: 401, wantMsg: `{"message":"Invalid API key"}`,
		},
		{
			name:       "empty body",
			ans:        answer{Status: 500},
			wantStatus: 500, wantMsg: "Internal Server Error",
		},
		{
			name:       "redirect is not followed",
			ans:        answer{Status: 307, Header: map[string]string{"Location": "http://evil.invalid/steal"}},
			wantStatus: 307, wantMsg: "Temporary Redirect",
		},
		{
			name:       "oversized error body is cut to a short excerpt",
			ans:        answer{Status: 500, Header: map[string]string{"Content-Type": "text/plain"}, Body: long},
			wantStatus: 500, wantMsg: strings.Repeat("é", maxErrorExcerpt/2) + "…",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, tc.ans)
			c := newTestClient(t, srv.URL)
			c.now = func() time.Time { return ts("2026-05-04T10:00:00Z") }

			got, err := c.GetMessage(t.Context(), "t-1")
			require.Nil(t, got)
			var ae *APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, &APIError{StatusCode: tc.wantStatus, Msg: tc.wantMsg, RetryAfter: tc.wantRetry}, ae)
			require.Same(t, ae, err, "returned unwrapped so a type assertion works too")

			retry, limited := IsRateLimited(err)
			require.Equal(t, tc.wantLimited, limited)
			require.Equal(t, tc.wantRetry*time.Duration(boolInt(limited)), retry)
			require.Equal(t, tc.wantMissing, IsNotFound(err))
			require.Len(t, srv.requests(), 1)
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestAPIErrorString(t *testing.T) {
	for _, tc := range []struct {
		err  *APIError
		want string
	}{
		{&APIError{StatusCode: 404, Msg: "task t-1: not found"}, "msgpulse: HTTP 404: task t-1: not found"},
		{&APIError{StatusCode: 429, Msg: "per recipient: over the per-hour limit (5)", RetryAfter: 90 * time.Second},
			"msgpulse: HTTP 429: per recipient: over the per-hour limit (5) (retry after 1m30s)"},
	} {
		require.Equal(t, tc.want, tc.err.Error())
	}
}

func TestHelpersSeeThroughWrapping(t *testing.T) {
	for _, tc := range []struct {
		name        string
		err         error
		wantLimited bool
		wantRetry   time.Duration
		wantMissing bool
	}{
		{"wrapped 429", fmtWrap(&APIError{StatusCode: 429, RetryAfter: time.Second}), true, time.Second, false},
		{"wrapped 404", fmtWrap(&APIError{StatusCode: 404}), false, 0, true},
		{"other status", &APIError{StatusCode: 500}, false, 0, false},
		{"not an APIError", errors.New("dial tcp: refused"), false, 0, false},
		{"nil", nil, false, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			retry, limited := IsRateLimited(tc.err)
			require.Equal(t, tc.wantLimited, limited)
			require.Equal(t, tc.wantRetry, retry)
			require.Equal(t, tc.wantMissing, IsNotFound(tc.err))
		})
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("sending code"), err) }

func TestVerifyCodeRefused(t *testing.T) {
	for _, tc := range []struct {
		name       string
		body       string
		wantResult *VerifyResult
		wantMsg    string
	}{
		{
			name:       "burned code: result and error",
			body:       `{"code":429,"msg":"too many wrong attempts: request a new code","data":{"valid":false,"attemptsLeft":0}}`,
			wantResult: &VerifyResult{Valid: false, AttemptsLeft: 0},
			wantMsg:    "too many wrong attempts: request a new code",
		},
		{
			name:    "request rate limit: no result",
			body:    `{"code":429,"msg":"per IP: over the per-minute limit (10)","data":null}`,
			wantMsg: "per IP: over the per-minute limit (10)",
		},
		{
			name:    "malformed data: no result, still the error",
			body:    `{"code":429,"msg":"limited","data":"nope"}`,
			wantMsg: "limited",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, answer{Status: 429, Header: map[string]string{"Retry-After": "600"}, Body: tc.body})
			c := newTestClient(t, srv.URL)
			res, err := c.VerifyCode(t.Context(), VerifyRequest{Channel: ChannelSMS, Recipient: "+8613800138000", Purpose: "login", Code: "000000"})
			require.Equal(t, tc.wantResult, res)
			retry, limited := IsRateLimited(err)
			require.True(t, limited)
			require.Equal(t, 10*time.Minute, retry)
			require.ErrorContains(t, err, tc.wantMsg)
		})
	}
}

func TestReady(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ans       answer
		wantErr   string // "" means ready
		wantCode  int
		notReady  bool
		noAPIData bool
	}{
		{name: "ready", ans: answer{Status: 200, Body: `{"code":200,"msg":"ok","data":{"amqp":"ok","redis":"ok"}}`}},
		{
			name:     "redis down",
			ans:      answer{Status: 503, Body: `{"code":503,"msg":"not ready: redis","data":{"amqp":"ok","redis":"dial tcp 127.0.0.1:6379: connect: connection refused"}}`},
			wantErr:  "msgpulse not ready (amqp: ok; redis: dial tcp 127.0.0.1:6379: connect: connection refused): msgpulse: HTTP 503: not ready: redis",
			wantCode: 503,
		},
		{
			name:     "proxy answers instead",
			ans:      answer{Status: 503, Header: map[string]string{"Content-Type": "text/plain"}, Body: "no healthy upstream"},
			wantErr:  "msgpulse: HTTP 503: no healthy upstream",
			wantCode: 503,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, tc.ans)
			err := newTestClient(t, srv.URL).Ready(t.Context())
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.EqualError(t, err, tc.wantErr)
			var ae *APIError
			require.ErrorAs(t, err, &ae)
			require.Equal(t, tc.wantCode, ae.StatusCode)
		})
	}
}

// 2xx answers that break the contract are errors, never zero values.
func TestMalformedSuccess(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ans     answer
		wantErr string
	}{
		{"not JSON", answer{Status: 200, Header: map[string]string{"Content-Type": "text/html"}, Body: "<html><body>Welcome to nginx!</body></html>"},
			"GET /api/messages/t-1: HTTP 200 answer is not a JSON envelope (Welcome to nginx!)"},
		{"no data", answer{Status: 200, Body: `{"code":200,"msg":"ok","data":null}`}, "GET /api/messages/t-1: response has no data"},
		{"empty object", answer{Status: 200, Body: `{}`}, "response has no data"},
		{"wrong data type", answer{Status: 200, Body: `{"code":200,"msg":"ok","data":{"attempts":"two"}}`}, "GET /api/messages/t-1: decoding data"},
		{"too large", answer{Status: 200, Body: `{"code":200,"msg":"ok","data":{"lastError":"` + strings.Repeat("x", maxResponseBytes) + `"}}`},
			"GET /api/messages/t-1: response larger than 1048576 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, tc.ans)
			got, err := newTestClient(t, srv.URL).GetMessage(t.Context(), "t-1")
			require.Nil(t, got)
			require.ErrorContains(t, err, tc.wantErr)
			var ae *APIError
			require.False(t, errors.As(err, &ae), "a 2xx is not an APIError")
		})
	}
}

// Arguments the server could never accept fail before any request.
func TestRefusedBeforeSending(t *testing.T) {
	for _, tc := range []struct {
		name    string
		call    func(context.Context, *Client) error
		wantErr string
	}{
		{"delay and sendAt together", func(ctx context.Context, c *Client) error {
			_, err := c.SendMessage(ctx, SendRequest{MessageType: MessageSMS, TemplateCode: "x", Recipient: "+1", DelaySeconds: ptr(1.0), SendAt: ptr(time.Now())})
			return err
		}, "mutually exclusive"},
		{"empty task id", func(ctx context.Context, c *Client) error { _, err := c.GetMessage(ctx, ""); return err }, `invalid task id ""`},
		{"dot-dot task id", func(ctx context.Context, c *Client) error { _, err := c.GetMessage(ctx, ".."); return err }, `invalid task id ".."`},
		{"empty rate limit id (get)", func(ctx context.Context, c *Client) error { _, err := c.GetRateLimit(ctx, ""); return err }, "invalid rate limit id"},
		{"dot rate limit id (update)", func(ctx context.Context, c *Client) error {
			_, err := c.UpdateRateLimit(ctx, ".", RateLimit{})
			return err
		}, "invalid rate limit id"},
		{"empty rate limit id (delete)", func(ctx context.Context, c *Client) error { return c.DeleteRateLimit(ctx, "") }, "invalid rate limit id"},
		{"empty fraud block tenant", func(ctx context.Context, c *Client) error { return c.LiftFraudBlock(ctx, "", "+44740012") }, "invalid tenant"},
		{"empty fraud block prefix", func(ctx context.Context, c *Client) error { return c.LiftFraudBlock(ctx, "shop", "") }, "invalid prefix"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newFakeServer(t, answer{Status: 200, Body: `{"code":200,"msg":"ok","data":{}}`})
			err := tc.call(t.Context(), newTestClient(t, srv.URL))
			require.ErrorContains(t, err, tc.wantErr)
			require.Empty(t, srv.requests())
		})
	}
}

// blockingServer holds every request until the client gives up, and says
// when a request has arrived so the test cancels at the right moment
// without sleeping.
func blockingServer(t *testing.T) (*httptest.Server, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 1)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) }) // runs first: never let Close wait on a handler
	return srv, arrived
}

func TestCancellation(t *testing.T) {
	t.Run("caller cancels", func(t *testing.T) {
		srv, arrived := blockingServer(t)
		c := newTestClient(t, srv.URL, WithTimeout(0))
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() {
			_, err := c.QueueStats(ctx)
			errc <- err
		}()
		<-arrived
		cancel()
		err := <-errc
		require.ErrorIs(t, err, context.Canceled)
		require.ErrorContains(t, err, "msgpulse: GET /api/queues/stats")
	})
	t.Run("WithTimeout bounds the call", func(t *testing.T) {
		srv, _ := blockingServer(t)
		c := newTestClient(t, srv.URL, WithTimeout(50*time.Millisecond))
		errc := make(chan error, 1)
		go func() {
			_, err := c.DLQStats(t.Context())
			errc <- err
		}()
		select {
		case err := <-errc:
			require.ErrorIs(t, err, context.DeadlineExceeded)
		case <-time.After(10 * time.Second): // a guard, not a wait: fail instead of hanging
			t.Fatal("WithTimeout did not bound the call")
		}
	})
	t.Run("already cancelled context sends nothing", func(t *testing.T) {
		srv := newFakeServer(t, answer{Status: 200, Body: `{"code":200,"msg":"ok","data":[]}`})
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := newTestClient(t, srv.URL).ListRateLimits(ctx)
		require.ErrorIs(t, err, context.Canceled)
		require.Empty(t, srv.requests())
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestOptions(t *testing.T) {
	t.Run("custom HTTP client, user agent and path prefix", func(t *testing.T) {
		var seen *http.Request
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			seen = r
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"code":200,"msg":"ok","data":[]}`))}, nil
		})}
		c := newTestClient(t, "https://gw.example/msgpulse/", WithHTTPClient(hc), WithUserAgent("billing/2.1"))
		got, err := c.ListRateLimits(t.Context())
		require.NoError(t, err)
		require.Empty(t, got)
		require.NotNil(t, seen)
		require.Equal(t, "https://gw.example/msgpulse/api/rate-limits", seen.URL.String())
		require.Equal(t, "billing/2.1", seen.Header.Get("User-Agent"))
		require.Nil(t, hc.CheckRedirect, "the caller's client is not modified")
	})
	t.Run("nil and empty values keep the defaults", func(t *testing.T) {
		c := newTestClient(t, "http://msgpulse", WithHTTPClient(nil), WithUserAgent(""), WithTimeout(-time.Second))
		require.NotNil(t, c.hc)
		require.Equal(t, DefaultUserAgent, c.userAgent)
		require.Zero(t, c.timeout)
	})
}

func TestParseRetryAfter(t *testing.T) {
	now := ts("2026-05-04T10:00:00Z")
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"30", 30 * time.Second},
		{" 5 ", 5 * time.Second},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{"99999999999999999", time.Duration(1<<63 - 1)},
		{"Mon, 04 May 2026 10:02:00 GMT", 2 * time.Minute},
		{"Mon, 04 May 2026 09:59:00 GMT", 0}, // in the past
	} {
		t.Run(tc.in, func(t *testing.T) {
			require.Equal(t, tc.want, parseRetryAfter(tc.in, now))
		})
	}
}

// The request types marshal to exactly the contract's field names; a
// renamed tag would otherwise only show up against a real server.
func TestRequestJSONNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		v    any
		want string
	}{
		{"VerificationCodeRequest", VerificationCodeRequest{Channel: "email", Recipient: "r", Purpose: "p", Locale: "en", ClientIP: "ip"},
			`{"channel":"email","recipient":"r","purpose":"p","locale":"en","clientIp":"ip"}`},
		{"VerifyRequest", VerifyRequest{Channel: "sms", Recipient: "r", Purpose: "p", Code: "c"},
			`{"channel":"sms","recipient":"r","purpose":"p","code":"c"}`},
		{"SendRequest zero", SendRequest{}, `{"messageType":"","templateCode":"","recipient":"","variables":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := json.Marshal(tc.v)
			require.NoError(t, err)
			require.JSONEq(t, tc.want, string(b))
		})
	}
}

func TestSendRequestLevelOrPriorityNotBoth(t *testing.T) {
	_, err := json.Marshal(SendRequest{MessageType: MessageEmail, Priority: ptr(3), Level: LevelHigh})
	require.Error(t, err)
	b, err := json.Marshal(SendRequest{MessageType: MessageEmail})
	require.NoError(t, err)
	require.NotContains(t, string(b), "priority", "the server's default when neither is set")
	b, err = json.Marshal(BatchRequest{MessageType: MessageEmail, Recipients: []string{"a@example.com"}, Level: LevelLow})
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	require.Equal(t, "low", m["priority"])
	_, err = json.Marshal(BatchRequest{Priority: ptr(1), Level: LevelLow})
	require.Error(t, err)
}

func TestWithIdempotencyKeySetsTheHeaderOnlyWhenGiven(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get(HeaderIdempotencyKey))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"code":202,"msg":"ok","data":{"taskId":"t1","status":"queued"}}`))
	}))
	t.Cleanup(srv.Close)
	c := newTestClient(t, srv.URL)
	ctx := context.Background()
	req := SendRequest{MessageType: "email", Recipient: "a@example.com", TemplateCode: "welcome"}
	_, err := c.SendMessage(ctx, req, WithIdempotencyKey("order-42"))
	require.NoError(t, err)
	_, err = c.SendMessage(ctx, req)
	require.NoError(t, err)
	require.Equal(t, []string{"order-42", ""}, got)
}
