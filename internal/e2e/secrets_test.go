package e2e

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha1" //nolint:gosec // Aliyun's request signature is HMAC-SHA1
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Secrets of TestNoSecretLeavesAProcess: each is configured or handed
// out somewhere, and must be in no status, callback or log line.
const (
	goodSecret    = "corp-secret-good-4c1f0e9b7a"
	stallSecret   = "corp-secret-stall-8d2a6f3c51"
	refusedSecret = "corp-secret-refused-93e7b0"
	stuckKey      = "robot-key-stuck-5a8c2e71"
	wrongKey      = "robot-key-wrong-0f6d4b93"
	aliyunSecret  = "aliyun-secret-b27e9c4d1f"
	callbackToken = "cb-token-6e1a9d3f7c"
	// pathToken rides in a callback URL's path, as Slack-style hooks carry
	// theirs (issue 43).
	pathToken = "cb-path-token-2b7f4e0c9a"
)

// aliyunFake is Dysmsapi: it checks each request's signature as Aliyun
// does (HMAC-SHA1 of the canonical query with secret+"&"), records it,
// and answers by number: one gets SignatureDoesNotMatch, quoting the
// string it signed as Aliyun's answer does, and one never an answer.
type aliyunFake struct {
	secret string
	mu     sync.Mutex
	sigs   []string
}

func (f *aliyunFake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	keys := make([]string, 0, len(q))
	for k := range q {
		if k != "Signature" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	enc := func(s string) string {
		return strings.NewReplacer("+", "%20", "*", "%2A", "%7E", "~").Replace(url.QueryEscape(s))
	}
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = enc(k) + "=" + enc(q.Get(k))
	}
	toSign := "GET&" + enc("/") + "&" + enc(strings.Join(pairs, "&"))
	mac := hmac.New(sha1.New, []byte(f.secret+"&"))
	mac.Write([]byte(toSign))
	want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
	f.mu.Lock()
	f.sigs = append(f.sigs, q.Get("Signature"))
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case q.Get("Signature") != want || q.Get("PhoneNumbers") == "13900000001":
		// A wrong signature, or, for this number, one made with a key the
		// vendor has since rotated: Aliyun's answer, quoting the string it
		// signed (with the number and the parameters).
		w.WriteHeader(http.StatusBadRequest)
		_, _ = fmt.Fprintf(w, `{"Code":"SignatureDoesNotMatch","Message":"Specified signature is not matched with our calculation. server string to sign is:%s","RequestId":"r-1"}`, toSign)
	case q.Get("PhoneNumbers") == "13900000002":
		<-r.Context().Done() // never answers
	default:
		_, _ = w.Write([]byte(`{"Code":"OK","Message":"OK","BizId":"b-1","RequestId":"r-2"}`))
	}
}

func (f *aliyunFake) signatures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.sigs...)
}

// callbackSink records the callbacks it gets, with the signatures they
// carry; /broken never answers.
type callbackSink struct {
	mu     sync.Mutex
	bodies map[string][]byte // by task id
	sigs   []string
}

func (c *callbackSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/broken" || strings.HasPrefix(r.URL.Path, "/hooks/") {
		neverAnswer(r)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var cb struct {
		TaskID string `json:"taskId"`
	}
	_ = json.Unmarshal(body, &cb)
	c.mu.Lock()
	c.bodies[cb.TaskID] = body
	c.sigs = append(c.sigs, r.Header.Get("X-Msgpulse-Signature"))
	c.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (c *callbackSink) body(taskID string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bodies[taskID]
}

// Issue 37: a WeCom upload that never answers put the access token in
// the message's lastError, its callback and the consumer's log. Every
// failure kind is forced here through the real binaries, with
// SEND_TIMEOUT=2s: a WeCom upload that never answers, a token endpoint
// that never answers and one that refuses the secret, a robot that never
// answers and one with a wrong key, an SMS vendor that refuses and one
// that never answers, and a callback URL that never answers. Then each
// status as the tenant reads it, each callback body, the accounts' stats
// and every log line of both processes (at debug) are searched for every
// token, secret, key and signature of the run.
func TestNoSecretLeavesAProcess(t *testing.T) {
	srv := wecomtest.New(t)
	srv.AddApp("corp-good", goodSecret, 3001)
	srv.AddApp("corp-stall", stallSecret, 3002)
	srv.AddApp("corp-refused", "the-right-one-0000", 3003)
	srv.Hold = func(r *http.Request) {
		q := r.URL.Query()
		if r.URL.Path == "/cgi-bin/media/upload" || (r.URL.Path == "/cgi-bin/gettoken" && q.Get("corpid") == "corp-stall") || q.Get("key") == stuckKey {
			neverAnswer(r)
		}
	}
	sms := &aliyunFake{secret: aliyunSecret}
	vendor := httptest.NewServer(sms)
	t.Cleanup(vendor.Close)
	cb := &callbackSink{bodies: map[string][]byte{}}
	hooks := httptest.NewServer(cb)
	t.Cleanup(hooks.Close)
	files, _ := mediaFiles(t)

	s := newSystem(t, "CALLBACK_SECRET=e2e-callback-secret-0123", "CALLBACK_ALLOW_PRIVATE=true", "LOG_LEVEL=debug")
	api, c := s.api("CALLBACK_ALLOW_HTTP=true", "WECOM_ROBOTS=stuck,wrong",
		"WECOM_ACCOUNTS=default=corp-good:3001,stalled=corp-stall:3002,refused=corp-refused:3003")
	consumer := s.consumer("c1", "CHANNELS=mail,sms,wecom", "WECOM_API_BASE="+srv.URL, "SEND_TIMEOUT=2s", "WECOM_MEDIA_UPLOAD_TIMEOUT=2s", "MAX_RETRIES=1",
		"WECOM_ACCOUNTS=default=corp-good:3001:"+goodSecret+",stalled=corp-stall:3002:"+stallSecret+",refused=corp-refused:3003:"+refusedSecret,
		"WECOM_ROBOTS=stuck="+stuckKey+",wrong="+wrongKey, "CALLBACK_TIMEOUT=1s", "CALLBACK_ATTEMPTS=1",
		"SMS_PROVIDER=aliyun", "ALIYUN_ACCESS_KEY_ID=LTAI-e2e", "ALIYUN_ACCESS_KEY_SECRET="+aliyunSecret, "ALIYUN_SMS_SIGN_NAME=msgpulse",
		"ALIYUN_SMS_TEMPLATES=notice=SMS_100001", "ALIYUN_SMS_ENDPOINT="+vendor.URL+"/", "SMS_TIMEOUT=2s")
	ctx := testenv.Context(t, 90*time.Second)
	vars := map[string]string{"title": "t", "content": "c"}
	hook := hooks.URL + "/ok"
	ttl := 3.0 // a refused account's message waits for it up to its deadline
	cases := []struct {
		name string
		req  client.SendRequest
		want string // in lastError: the failure happened as meant
	}{
		{"upload never answers", client.SendRequest{MessageType: client.MessageWeCom, Recipient: "ann", Media: &client.WeComMedia{Type: "image", URL: files + "/logo.png", Filename: "logo.png"}}, "wecom: transient failure connection"},
		{"token endpoint never answers", client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "bob", Account: "stalled", Variables: vars}, "wecom: transient failure connection"},
		{"token endpoint refuses the secret", client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "cyd", Account: "refused", Variables: vars, TTLSeconds: &ttl}, "its deadline"},
		{"robot never answers", client.SendRequest{MessageType: client.MessageWeComRobot, TemplateCode: "notice", Recipient: "stuck", Variables: vars}, "wecom-robot: transient failure connection"},
		{"robot key refused", client.SendRequest{MessageType: client.MessageWeComRobot, TemplateCode: "notice", Recipient: "wrong", Variables: vars}, "93000"},
		{"SMS vendor refuses", client.SendRequest{MessageType: client.MessageSMS, TemplateCode: "notice", Recipient: "+8613900000001", Variables: vars}, "SignatureDoesNotMatch"},
		{"SMS vendor never answers", client.SendRequest{MessageType: client.MessageSMS, TemplateCode: "notice", Recipient: "+8613900000002", Variables: vars}, "aliyun: transient failure timeout"},
	}
	ids := make([]string, len(cases))
	for i, tc := range cases {
		tc.req.CallbackURL = hook
		res, err := c.SendMessage(ctx, tc.req)
		require.NoError(t, err, tc.name)
		ids[i] = res.TaskID
	}
	// And a callback that never answers (the sender's own error).
	res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "dan", Variables: vars,
		CallbackURL: hooks.URL + "/broken?token=" + callbackToken})
	require.NoError(t, err)
	// And one whose token is in its path, not its query.
	res2, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageWeCom, TemplateCode: "notice", Recipient: "eve", Variables: vars,
		CallbackURL: hooks.URL + "/hooks/T0AB/" + pathToken})
	require.NoError(t, err)
	waitSent(t, c, []string{res.TaskID, res2.TaskID})

	var leaks []string // where the secrets are looked for
	raws := make([]string, len(cases))
	for i, tc := range cases {
		var raw []byte
		testenv.WaitFor(t, 60*time.Second, tc.name+": failed, and its callback in", func() bool {
			m, err := c.GetMessage(ctx, ids[i])
			require.NoError(t, err)
			if (m.Status != client.Status("failed") && m.Status != client.Status("expired")) || cb.body(ids[i]) == nil {
				return false
			}
			raw = s.getRaw(t, "/api/messages/"+ids[i])
			return true
		})
		raws[i] = string(raw)
		leaks = append(leaks, tc.name+" status: "+string(raw), tc.name+" callback: "+string(cb.body(ids[i])))
	}
	testenv.WaitFor(t, 20*time.Second, "both failed callbacks logged", func() bool { return consumer.Count(`"callback failed"`) > 1 })
	stats := string(s.getRaw(t, "/api/queues/stats"))
	require.Contains(t, stats, "40001", "the refused account is down, with WeCom's reason")
	leaks = append(leaks, "stats: "+stats, "consumer log: "+consumer.Output(), "api log: "+api.Output())

	secrets := []string{goodSecret, stallSecret, refusedSecret, stuckKey, wrongKey, aliyunSecret, callbackToken, pathToken}
	secrets = append(secrets, srv.Tokens()...)
	secrets = append(secrets, sms.signatures()...)
	cb.mu.Lock()
	secrets = append(secrets, cb.sigs...)
	cb.mu.Unlock()
	require.NotEmpty(t, srv.Tokens(), "WeCom handed out tokens")
	require.GreaterOrEqual(t, len(sms.signatures()), 3, "the SMS vendor was asked: once refusing, twice not answering")
	for _, secret := range secrets {
		for _, place := range leaks {
			if strings.Contains(place, secret) {
				where, _, _ := strings.Cut(place, ":")
				i := strings.Index(place, secret)
				t.Errorf("secret %q leaked in %s: …%s…", secret, where, place[max(0, i-200):min(len(place), i+len(secret)+50)])
			}
		}
	}
	require.Contains(t, consumer.Output(), "/broken?[redacted]", "the callback's URL is in its failure, without its query")
	require.Contains(t, consumer.Output(), "/hooks/[redacted]", "the callback's URL is in its failure: scheme, host, first segment")
	for i, tc := range cases {
		require.Contains(t, raws[i], tc.want, "%s: the failure forced is the one meant", tc.name)
	}
}

// mediaFiles serves /logo.png (an image of 2 KB), counting fetches.
func mediaFiles(t *testing.T) (string, func() int) {
	t.Helper()
	var mu sync.Mutex
	n := 0
	logo := bytes.Repeat([]byte("\x89PNG"), 512)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		mu.Unlock()
		if r.URL.Path != "/logo.png" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(logo)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// getRaw GETs an API path as the e2e key and returns the body as is.
func (s *system) getRaw(t *testing.T, path string) []byte {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.apiURL+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-API-Key", apiKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	return body
}

// neverAnswer holds r until its client gives up. The body is read first:
// a server notices a client leaving only once the body is read.
func neverAnswer(r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	<-r.Context().Done()
}
