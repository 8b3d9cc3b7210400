package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envconf"
)

// Keys of two tenants, an admin of a third, and a key without scopes
// (send+read of the default tenant: admin must be written), read from
// API_KEYS as cmd/api does.
const (
	shopKey  = "shop-key-0123456789abcdefgh"
	blogKey  = "blog-key-0123456789abcdefgh"
	adminKey = "admin-key-0123456789abcdefgh"
	allKey   = "all-key-0123456789abcdefgh"
	readKey  = "read-key-0123456789abcdefgh"
)

func tenantKeys(t *testing.T, extra ...string) []apikey.Key {
	t.Helper()
	entries := append([]string{"shop/backend:" + shopKey + ":send+read", "blog/backend:" + blogKey + ":send+read",
		"ops/oncall:" + adminKey + ":admin", "legacy:" + allKey, "shop/dashboard:" + readKey + ":read"}, extra...)
	cfg, l := config.LoadAPI(envconf.FromMap(map[string]string{"API_KEYS": strings.Join(entries, ",")}))
	require.NoError(t, l.Err())
	return cfg.APIKeys
}

func notice(recipient string) map[string]any {
	return map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipient": recipient,
		"variables": map[string]string{"title": "t", "content": "c"}}
}

func (h *harness) send(key string, body map[string]any) response {
	h.t.Helper()
	return h.do("POST", "/api/messages/send", body, "X-API-Key", key)
}

// A message belongs to its sender's tenant: 200 to that tenant and to an
// admin key, 404 to another tenant, word for word the answer of an id that
// does not exist.
func TestMessageIsVisibleToItsTenantAndAdminOnly(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	r := h.send(shopKey, notice("a@example.com"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res SendResult
	r.data(t, &res)
	for _, tc := range []struct {
		name, key string
		want      int
	}{
		{"same tenant, same key", shopKey, 200},
		{"same tenant, read-only key", readKey, 200},
		{"admin of another tenant", adminKey, 200},
		{"another tenant", blogKey, 404},
		{"no scopes given: send+read of the default tenant, not admin", allKey, 404},
	} {
		for _, path := range []string{"/api/messages/" + res.TaskID, "/api/messages?taskId=" + res.TaskID} {
			g := h.do("GET", path, nil, "X-API-Key", tc.key)
			require.Equal(t, tc.want, g.Status, "%s %s: %s", tc.name, path, g.Msg)
			if tc.want == 404 {
				unknown := h.do("GET", strings.Replace(path, res.TaskID, "no-such-task-0123", 1), nil, "X-API-Key", tc.key)
				require.Equal(t, strings.ReplaceAll(unknown.Msg, "no-such-task-0123", res.TaskID), g.Msg, "the same answer as an unknown id")
				require.Equal(t, "null", string(g.RawData))
			}
		}
	}
	var view MessageView
	h.do("GET", "/api/messages/"+res.TaskID, nil, "X-API-Key", shopKey).data(t, &view)
	require.Equal(t, "queued", string(view.Status))

	// The record and the queued message both carry the tenant.
	rec, err := h.srv.d.Status.Get(context.Background(), res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "shop", rec.Tenant)
	var m map[string]any
	require.NoError(t, json.Unmarshal(h.get("queue.mail.normal").Body, &m)) // a notice: normal by default
	require.Equal(t, "shop", m["tenant"])

	// A code request is recorded the same way.
	c := h.do("POST", "/api/verification-codes", codeRequest("b@example.com", "login"), "X-API-Key", blogKey)
	require.Equal(t, http.StatusAccepted, c.Status, c.Msg)
	var vc VerificationCode
	c.data(t, &vc)
	require.Equal(t, 404, h.do("GET", "/api/messages/"+vc.TaskID, nil, "X-API-Key", shopKey).Status)
	require.Equal(t, 200, h.do("GET", "/api/messages/"+vc.TaskID, nil, "X-API-Key", blogKey).Status)
}

// Each route needs its scope: 403 naming the scope; a missing or unknown
// key stays 401; a key without scopes sends and reads, and is refused
// every admin route (admin must be written).
func TestScopesGuardEveryRoute(t *testing.T) {
	h := setup(t, options{keys: tenantKeys(t)})
	rl := func(id string) map[string]any {
		return map[string]any{"id": id, "provider": "aliyun", "requestsPerSecond": 5, "isEnabled": false}
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		key                string
		want               int
		msg                string
	}{
		{"send+read: rate-limit write", "POST", "/api/rate-limits", rl("a"), shopKey, 403, "lacks the admin scope"},
		{"send+read: rate-limit update", "PUT", "/api/rate-limits/a", rl("a"), shopKey, 403, "admin"},
		{"send+read: rate-limit delete", "DELETE", "/api/rate-limits/a", nil, shopKey, 403, "admin"},
		{"send+read: queue stats", "GET", "/api/queues/stats", nil, shopKey, 403, "lacks the admin scope"},
		{"send+read: DLQ stats", "GET", "/api/dlq/stats", nil, shopKey, 403, "admin"},
		{"send+read: rate-limit read", "GET", "/api/rate-limits", nil, shopKey, 200, ""},
		{"send+read: send", "POST", "/api/messages/send", notice("c@example.com"), shopKey, 202, ""},
		{"read: send", "POST", "/api/messages/send", notice("c@example.com"), readKey, 403, "lacks the send scope"},
		{"read: code", "POST", "/api/verification-codes", codeRequest("c@example.com", "login"), readKey, 403, "send"},
		{"admin: rate-limit write", "POST", "/api/rate-limits", rl("a"), adminKey, 201, ""},
		{"admin: rate-limit update", "PUT", "/api/rate-limits/a", rl("a"), adminKey, 200, ""},
		{"admin: queue stats", "GET", "/api/queues/stats", nil, adminKey, 200, ""},
		{"admin: DLQ stats", "GET", "/api/dlq/stats", nil, adminKey, 200, ""},
		{"admin: rate-limit read (admin grants read)", "GET", "/api/rate-limits", nil, adminKey, 200, ""},
		{"admin: send", "POST", "/api/messages/send", notice("c@example.com"), adminKey, 403, "lacks the send scope"},
		{"no scopes: rate-limit write", "POST", "/api/rate-limits", rl("b"), allKey, 403, "lacks the admin scope (it has send+read)"},
		{"no scopes: queue stats", "GET", "/api/queues/stats", nil, allKey, 403, "admin"},
		{"no scopes: DLQ stats", "GET", "/api/dlq/stats", nil, allKey, 403, "admin"},
		{"no scopes: send", "POST", "/api/messages/send", notice("c@example.com"), allKey, 202, ""},
		{"no scopes: code", "POST", "/api/verification-codes", codeRequest("d@example.com", "login"), allKey, 202, ""},
		{"no scopes: verify", "POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": "d@example.com", "purpose": "login", "code": "000000"}, allKey, 200, ""},
		{"no scopes: rate-limit delete", "DELETE", "/api/rate-limits/a", nil, allKey, 403, "admin"},
		{"no scopes: rate-limit read", "GET", "/api/rate-limits", nil, allKey, 200, ""},
		{"missing key", "GET", "/api/queues/stats", nil, "", 401, "missing X-API-Key"},
		{"unknown key", "GET", "/api/queues/stats", nil, "nope-0123456789abcdefgh", 401, "unknown API key"},
		{"unknown key, send", "POST", "/api/messages/send", notice("c@example.com"), "nope-0123456789abcdefgh", 401, "unknown API key"},
	} {
		r := h.do(tc.method, tc.path, tc.body, "X-API-Key", tc.key)
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.name, r.Msg)
		require.Contains(t, r.Msg, tc.msg, tc.name)
	}

	// Rate-limit changes name the key that made them.
	var changes []string
	for _, e := range h.logs.All() {
		if strings.HasPrefix(e.Message, "rate limit ") {
			changes = append(changes, e.Message+" by "+e.ContextMap()["api_key"].(string))
		}
	}
	require.Equal(t, []string{"rate limit created by ops/oncall", "rate limit updated by ops/oncall"}, changes)
}

// A key given as its SHA-256 digest authenticates with the plaintext, and
// the plaintext appears in no log line, whatever the request's outcome.
func TestDigestKeyAuthenticatesAndIsNeverLogged(t *testing.T) {
	const plain = "digest-plaintext-5a7c9e1b3d"
	h := setup(t, options{keys: tenantKeys(t, "shop/ci:sha256="+apikey.Digest(plain)+":send+read")})
	r := h.send(plain, notice("e@example.com"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res SendResult
	r.data(t, &res)
	require.Equal(t, 200, h.do("GET", "/api/messages/"+res.TaskID, nil, "X-API-Key", shopKey).Status, "the key's tenant is shop")
	require.Equal(t, 403, h.do("GET", "/api/queues/stats", nil, "X-API-Key", plain).Status)
	require.Equal(t, 401, h.do("GET", "/api/queues/stats", nil, "X-API-Key", plain+"x").Status)
	require.Equal(t, 401, h.do("GET", "/api/queues/stats", nil, "X-API-Key", apikey.Digest(plain)).Status, "the digest is not a key")

	logged := 0
	for _, e := range h.logs.All() {
		enc := zapcore.NewMapObjectEncoder()
		for _, f := range e.Context {
			f.AddTo(enc)
		}
		line, err := json.Marshal(enc.Fields)
		require.NoError(t, err)
		text := e.Message + " " + string(line)
		require.NotContains(t, text, plain[:12], "the plaintext of a digest key in a log line")
		if strings.Contains(text, "shop/ci") {
			logged++
		}
	}
	require.GreaterOrEqual(t, logged, 2, "the requests were logged, by the key's name")
}

// LIMIT_PER_TENANT_PER_MINUTE counts a tenant's keys together, and no
// other tenant's.
func TestTenantLimitSpansItsKeys(t *testing.T) {
	limits := defaultLimits()
	limits.PerTenantMinute = 2
	h := setup(t, options{limits: limits, keys: tenantKeys(t, "shop/batch:batch-key-0123456789abcdefgh:send")})
	require.Equal(t, 202, h.send(shopKey, notice("f1@example.com")).Status)
	require.Equal(t, 202, h.send("batch-key-0123456789abcdefgh", notice("f2@example.com")).Status)
	r := h.send(shopKey, notice("f3@example.com"))
	require.Equal(t, http.StatusTooManyRequests, r.Status, r.Msg)
	require.Contains(t, r.Msg, "per tenant")
	require.NotEmpty(t, r.Header.Get("Retry-After"))
	r = h.do("POST", "/api/verification-codes", codeRequest("f4@example.com", "login"), "X-API-Key", "batch-key-0123456789abcdefgh")
	require.Equal(t, http.StatusTooManyRequests, r.Status, "codes count too: %s", r.Msg)
	require.Equal(t, 202, h.send(blogKey, notice("f5@example.com")).Status, "another tenant is not limited")
}

// callbackUrl must not point the consumer inside the deployment.
func TestCallbackURLToInternalAddressesIsRefused(t *testing.T) {
	lookup := func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "loopback.example.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "metadata.example.test":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34"), netip.MustParseAddr("169.254.169.254")}, nil
		case "hooks.example.test":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	h := setup(t, options{egress: egress.Policy{Lookup: lookup}})
	withCallback := func(u string) map[string]any {
		m := notice("g@example.com")
		m["callbackUrl"] = u
		return m
	}
	for _, tc := range []struct {
		url  string
		want int
	}{
		{"https://127.0.0.1/x", 400},
		{"https://169.254.169.254/latest", 400},
		{"https://[::1]/x", 400},
		{"https://10.1.2.3/x", 400},
		{"https://[fe80::1]/x", 400},
		{"https://[fd00::1]/x", 400},
		{"https://192.168.0.10:8443/x", 400},
		{"https://0.0.0.0/x", 400},
		{"https://[::ffff:127.0.0.1]/x", 400},
		{"https://loopback.example.test/x", 400},
		{"https://metadata.example.test/x", 400},
		{"https://hooks.example.test/x", 202},
		{"https://93.184.216.34/x", 202},
		{"https://unresolvable.example.test/x", 202}, // checked again when dialled
	} {
		r := h.send(testKey, withCallback(tc.url))
		require.Equal(t, tc.want, r.Status, "%s: %s", tc.url, r.Msg)
		if tc.want == 400 {
			require.Contains(t, r.Msg, "not a public address", tc.url)
		}
	}
	// CALLBACK_ALLOW_PRIVATE lifts it.
	dev := setup(t, options{share: h, egress: egress.Policy{AllowPrivate: true, Lookup: lookup}})
	for _, u := range []string{"https://127.0.0.1/x", "https://loopback.example.test/x"} {
		r := dev.send(testKey, withCallback(u))
		require.Equal(t, http.StatusAccepted, r.Status, "%s: %s", u, r.Msg)
	}
}

// roundTrips counts the commands and pipelines a Redis client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// The tenant limit rides in the limiter's one script with the others: an
// accepted message still costs Redis one round trip. On a Redis Cluster
// (TEST_REDIS_MODE=cluster) it costs two: the checks, one script per slot
// in one pipeline, then the message's status record in its task's slot.
func TestTenantLimitKeepsOneRoundTrip(t *testing.T) {
	limits := defaultLimits()
	limits.PerTenantMinute = 100
	h := setup(t, options{limits: limits, keys: tenantKeys(t)})
	require.Equal(t, 202, h.send(shopKey, notice("h0@example.com")).Status) // scripts loaded
	rt := &roundTrips{}
	h.redis.Client.AddHook(rt)
	require.Equal(t, 202, h.send(shopKey, notice("h1@example.com")).Status)
	want := 1
	if h.redis.Mode == "cluster" {
		want = 2
	}
	require.EqualValues(t, want, rt.n.Load(), "Redis round trips for one accepted message")
	keys := h.keysMatching("*tenant:shop*")
	require.NotEmpty(t, keys, "the tenant's window is counted")
}

// API_KEYS=shopA:k1,shopB:k2 is two tenants, not two keys of one default
// tenant: a bare name is a tenant of its own, so neither reads the other's
// messages (issue 21: least privilege by default).
func TestBareKeyNamesAreTenantsOfTheirOwn(t *testing.T) {
	const a, b = "shopA-key-0123456789abcdefgh", "shopB-key-0123456789abcdefgh"
	var keys []apikey.Key
	for i, e := range []string{"shopA:" + a, "shopB:" + b} {
		k, err := apikey.Parse(e, i+1)
		require.NoError(t, err)
		keys = append(keys, k)
	}
	h := setup(t, options{keys: keys})
	r := h.send(a, notice("a@example.com"))
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	var res SendResult
	r.data(t, &res)
	require.Equal(t, 200, h.do("GET", "/api/messages/"+res.TaskID, nil, "X-API-Key", a).Status)
	require.Equal(t, 404, h.do("GET", "/api/messages/"+res.TaskID, nil, "X-API-Key", b).Status)
	rec, err := h.srv.d.Status.Get(context.Background(), res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "shopA", rec.Tenant)
}

// A batch counts each recipient against its tenant's limit, admitted
// together in one limiter script: a tenant's batch over its limit is cut
// at it, and another tenant's batch right after is not touched. On one
// Redis the admission of any number of recipients is one round trip.
func TestTenantLimitCutsABatchAndSparesTheOtherTenant(t *testing.T) {
	limits := defaultLimits()
	limits.PerTenantMinute = 3
	h := setup(t, options{limits: limits, keys: tenantKeys(t)})
	batch := func(key, tag string, n int) (BatchResult, response) {
		recipients := make([]string, n)
		for i := range recipients {
			recipients[i] = fmt.Sprintf("%s%d@example.com", tag, i)
		}
		r := h.do("POST", "/api/messages/batch", noticeBody("EMAIL", func(m map[string]any) { m["recipients"] = recipients }), "X-API-Key", key)
		var res BatchResult
		if r.Status == http.StatusAccepted {
			r.data(t, &res)
		}
		return res, r
	}
	shop, r := batch(shopKey, "s", 5)
	require.Equal(t, http.StatusAccepted, r.Status, r.Msg)
	require.Len(t, shop.Accepted, 3)
	require.Len(t, shop.Rejected, 2)
	for _, rej := range shop.Rejected {
		require.Equal(t, http.StatusTooManyRequests, rej.Code)
		require.Contains(t, rej.Msg, "per tenant")
	}
	_, r = batch(shopKey, "t", 1)
	require.Equal(t, http.StatusTooManyRequests, r.Status, "the tenant is at its limit: %s", r.Msg)

	rt := &roundTrips{}
	h.redis.Client.AddHook(rt)
	blog, r := batch(blogKey, "b", 3)
	require.Equal(t, http.StatusAccepted, r.Status, "another tenant is not limited: %s", r.Msg)
	require.Len(t, blog.Accepted, 3)
	require.Empty(t, blog.Rejected)
	if h.redis.Mode != "cluster" { // there, a Take per recipient
		// The admission of all three, then the batch's task list.
		require.EqualValues(t, 2, rt.n.Load(), "Redis round trips for a batch of three")
	}
}
