package security

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/api"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Secrets of the run: each must stay out of every log line.
const (
	codeSecret     = "code-secret-0f1e2d3c4b5a69788796a5b4c3d2e1f0"
	apiKey         = "api-key-7d6c5b4a39281706f5e4"
	smtpPassword   = "smtp-password-93b2a1c0ffee"
	webhookSecret  = "webhook-secret-5e4d3c2b1a09"
	callbackSecret = "callback-secret-a1b2c3d4e5f6"
)

// Recipients of the run: each may be logged only masked.
const (
	mailCode   = "alice.sensitive@example.com"
	mailNotice = "bob.private@example.net"
	smsCode    = "+8613912345678"
	smsNotice  = "+8613987654321"
)

// smsHook is the SMS vendor: a signed-JSON webhook that refuses each
// task's first request with a 500 echoing the whole request (number and
// text, code included, as vendors' error messages do), then accepts.
type smsHook struct {
	mu    sync.Mutex
	seen  map[string]int
	texts map[string]string // by recipient, accepted
}

func (h *smsHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if err := sms.VerifyWebhookSignature(webhookSecret, r.Header.Get(sms.WebhookTimestampHeader), body, r.Header.Get(sms.WebhookSignatureHeader)); err != nil {
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	var p sms.WebhookPayload
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen[p.TaskID]++
	if h.seen[p.TaskID] == 1 {
		http.Error(w, "upstream failure for "+p.To+" sending "+p.Text+" params "+fmt.Sprint(p.Params), http.StatusInternalServerError)
		return
	}
	h.texts[p.To] = p.Text
	_, _ = w.Write([]byte(`{"messageId":"wh-` + p.TaskID + `"}`))
}

func (h *smsHook) text(to string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.texts[to]
}

var sixDigits = regexp.MustCompile(`\b\d{6}\b`)

// Runs the API and the consumer in-process, logging at debug level into a
// buffer; sends codes and notices by mail and SMS through the whole path,
// with a failed first attempt on each (the error paths are where a
// provider's reply, echoing the recipient and the text, could reach a log);
// verifies the codes; then scans every captured line. No plaintext code, no
// full recipient, no secret; recipients appear masked.
func TestLogsHoldNoCodeNoRecipientNoSecret(t *testing.T) {
	t.Parallel()
	b, r := testenv.NewBroker(t), testenv.NewRedis(t)
	cat, err := mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0", Username: "msgpulse", Password: smtpPassword})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cat.Close() })
	var mailMu sync.Mutex
	mailTries := map[string]int{}
	cat.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageData {
			return nil
		}
		mailMu.Lock()
		defer mailMu.Unlock()
		rcpt := strings.Join(e.To, ",")
		mailTries[rcpt]++
		if mailTries[rcpt] == 1 {
			// A server that quotes the recipient and the subject (with the
			// code) in its refusal.
			subject := ""
			for _, line := range strings.Split(string(e.Data), "\r\n") {
				if strings.HasPrefix(line, "Subject:") {
					subject = line
				}
			}
			return mailcatcher.Reject(451, "4.2.1 mailbox "+rcpt+" busy, try again; "+subject)
		}
		return nil
	})
	hook := &smsHook{seen: map[string]int{}, texts: map[string]string{}}
	vendor := httptest.NewServer(hook)
	t.Cleanup(vendor.Close)
	callbackSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(callbackSrv.Close)

	smtpHost, smtpPort, err := net.SplitHostPort(cat.Addr())
	require.NoError(t, err)
	env := map[string]string{
		"AMQP_URL": b.URL, "REDIS_URL": r.URL, "REDIS_PREFIX": r.Prefix, "RABBITMQ_MANAGEMENT_URL": testenv.ManagementURL,
		"LOG_LEVEL": "debug", "LOG_FORMAT": "json", "CODE_SECRET": codeSecret,
		// api
		"HTTP_ADDR": "127.0.0.1:0", "CALLBACK_ALLOW_HTTP": "true", "CALLBACK_ALLOW_PRIVATE": "true",
		// The digest form: the plaintext key is only in the requests.
		"API_KEYS": "security:sha256=" + apikey.Digest(apiKey),
		// consumer
		"SMTP_HOST": smtpHost, "SMTP_PORT": smtpPort, "SMTP_TLS": "none", "SMTP_USERNAME": "msgpulse", "SMTP_PASSWORD": smtpPassword,
		"MAIL_FROM": "msgpulse <no-reply@msgpulse.test>", "SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": vendor.URL,
		"SMS_WEBHOOK_SECRET": webhookSecret, "CALLBACK_SECRET": callbackSecret, "RETRY_BACKOFF": "100ms,200ms",
		"METRICS_ADDR": "off", "CONSUMER_ID": "security-c1",
	}
	apiCfg, l := config.LoadAPI(envconf.FromMap(env))
	require.NoError(t, l.Err())
	conCfg, l := config.LoadConsumer(envconf.FromMap(env))
	require.NoError(t, l.Err())
	model, err := topology.Build(apiCfg.Model, "")
	require.NoError(t, err)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	require.NoError(t, broker.Declare(conn, model))
	require.NoError(t, conn.Close())

	logs := &testenv.SyncBuffer{}
	obsCore, observed := observer.New(zapcore.InfoLevel)
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	logger := zap.New(zapcore.NewTee(zapcore.NewCore(enc, logs, zapcore.DebugLevel), obsCore))

	ctx, cancel := context.WithCancel(context.Background())
	apiDone, conDone := make(chan error, 1), make(chan error, 1)
	go func() { apiDone <- api.Run(ctx, apiCfg, logger.Named("api")) }()
	go func() {
		conDone <- dispatch.Run(ctx, conCfg, logger.Named("consumer"), dispatch.WithOutput(io.Discard))
	}()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		require.NoError(t, <-apiDone)
		require.NoError(t, <-conDone)
	}
	t.Cleanup(stop)

	var base string
	testenv.WaitFor(t, 15*time.Second, "api listening", func() bool {
		for _, e := range observed.FilterMessage("api listening").All() {
			if addr, ok := e.ContextMap()["addr"].(string); ok {
				base = "http://" + addr
				return true
			}
		}
		return false
	})
	call := func(method, path string, body any) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			data, err := json.Marshal(body)
			require.NoError(t, err)
			rd = bytes.NewReader(data)
		}
		req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), method, base+path, rd)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", apiKey)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	testenv.WaitFor(t, 15*time.Second, "api ready", func() bool {
		status, _ := call("GET", "/readyz", nil)
		return status == http.StatusOK
	})
	// accept posts until the API accepts. A 503 keeps nothing and is safe
	// to retry; the shared broker may be busy (another suite's memory alarm).
	accept := func(path string, body any) string {
		t.Helper()
		var task string
		testenv.WaitFor(t, 30*time.Second, "202 for "+path, func() bool {
			status, out := call("POST", path, body)
			if status == http.StatusServiceUnavailable {
				return false
			}
			require.Equal(t, http.StatusAccepted, status, out)
			task = out["data"].(map[string]any)["taskId"].(string)
			return true
		})
		return task
	}
	tasks := []string{
		accept("/api/verification-codes", map[string]any{"channel": "email", "recipient": mailCode, "purpose": "login", "clientIp": "203.0.113.9"}),
		accept("/api/verification-codes", map[string]any{"channel": "sms", "recipient": smsCode, "purpose": "login", "clientIp": "203.0.113.9"}),
		accept("/api/messages/send", map[string]any{"messageType": "EMAIL", "templateCode": "notice", "recipient": mailNotice,
			"variables": map[string]string{"title": "Invoice", "content": "private content"}, "callbackUrl": callbackSrv.URL + "/cb"}),
		accept("/api/messages/send", map[string]any{"messageType": "SMS", "templateCode": "notice", "recipient": smsNotice,
			"variables": map[string]string{"title": "Notice", "content": "private content"}}),
	}
	// Refused input is logged too (the API's request line names the error).
	status, _ := call("POST", "/api/verification-codes", map[string]any{"channel": "email", "recipient": "carol.secret@@example.com", "purpose": "login"})
	require.Equal(t, http.StatusBadRequest, status)

	for _, id := range tasks {
		testenv.WaitFor(t, 20*time.Second, "task "+id+" sent", func() bool {
			_, out := call("GET", "/api/messages/"+id, nil)
			data, _ := out["data"].(map[string]any)
			return data != nil && data["status"] == "sent"
		})
	}
	var codeByMail string
	for _, m := range cat.Messages() {
		if len(m.To) == 1 && m.To[0] == mailCode {
			codeByMail = sixDigits.FindString(m.Text)
		}
	}
	codeBySMS := sixDigits.FindString(hook.text(smsCode))
	require.NotEmpty(t, codeByMail, "the mailed code")
	require.NotEmpty(t, codeBySMS, "the texted code")
	wrong := "000000"
	if wrong == codeByMail {
		wrong = "111111"
	}
	status, out := call("POST", "/api/verification-codes/verify", map[string]any{"channel": "email", "recipient": mailCode, "purpose": "login", "code": wrong})
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, false, out["data"].(map[string]any)["valid"])
	for _, c := range []struct{ channel, rcpt, code string }{{"email", mailCode, codeByMail}, {"sms", smsCode, codeBySMS}} {
		status, out := call("POST", "/api/verification-codes/verify", map[string]any{"channel": c.channel, "recipient": c.rcpt, "purpose": "login", "code": c.code})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, true, out["data"].(map[string]any)["valid"], c.channel)
	}
	stop() // flush: both programs log their shutdown

	captured := logs.String()
	lines := strings.Count(captured, "\n")
	// Controls: the run logged its work, its failures, and recipients masked.
	require.GreaterOrEqual(t, strings.Count(captured, `"msg":"sent"`), 4, "one line per sent message")
	require.GreaterOrEqual(t, strings.Count(captured, "retry scheduled"), 4, "the failed first attempts were logged")
	require.Contains(t, captured, `"a***e@example.com"`, "recipients are logged, masked")
	require.Contains(t, captured, "+86*******5678", "numbers are logged, masked")

	type forbidden struct{ what, value string }
	var never []forbidden
	for _, c := range []string{codeByMail, codeBySMS} {
		never = append(never, forbidden{"a verification code", c})
	}
	for _, rcpt := range []string{mailCode, mailNotice, smsCode, smsNotice} {
		never = append(never, forbidden{"a full recipient", rcpt})
		never = append(never, forbidden{"a recipient's identifying part", strings.TrimPrefix(strings.Split(rcpt, "@")[0], "+86")})
	}
	never = append(never, forbidden{"a refused recipient", "carol.secret"})
	for _, s := range []string{codeSecret, apiKey, smtpPassword, webhookSecret, callbackSecret} {
		never = append(never, forbidden{"a secret", s})
	}
	for _, f := range never {
		re := tokenRE(f.value)
		for _, line := range strings.Split(captured, "\n") {
			if re.MatchString(line) {
				t.Errorf("%s (%q) in a log line:\n%s", f.what, f.value, line)
			}
		}
	}
	t.Logf("scanned %d log lines for %d forbidden values", lines, len(never))

	// At rest, after the whole path (claims, sent marks, status records
	// with the providers' errors): no code in Redis either.
	for _, c := range []string{codeByMail, codeBySMS} {
		require.Empty(t, scanRedis(t, r, tokenRE(c)), "code %s stored in clear", c)
	}
	require.NotEmpty(t, scanRedis(t, r, tokenRE(tasks[0])), "control: the scan sees stored values")
}

// tokenRE matches s on its own, not inside a longer run of letters and
// digits (a timestamp, a hex digest), which is how a leaked code would be
// written: as a value, a field, a key segment, or a word in a message.
func tokenRE(s string) *regexp.Regexp {
	return regexp.MustCompile(`(^|[^0-9A-Za-z])` + regexp.QuoteMeta(s) + `([^0-9A-Za-z]|$)`)
}

// scanRedis returns where re matches under the test's prefix: key names
// and the values of every type.
func scanRedis(t *testing.T, r *testenv.Redis, re *regexp.Regexp) []string {
	t.Helper()
	ctx := context.Background()
	c := r.Client
	var hits []string
	check := func(key, where, v string) {
		if re.MatchString(v) {
			hits = append(hits, fmt.Sprintf("%s: %s = %q", key, where, v))
		}
	}
	iter := c.Scan(ctx, 0, r.Prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		check(k, "key name", k)
		typ, err := c.Type(ctx, k).Result()
		require.NoError(t, err)
		var vals []string
		switch typ {
		case "none": // expired since the scan listed it (rate-limit logs are short-lived)
		case "string":
			v, err := c.Get(ctx, k).Result()
			if errors.Is(err, redis.Nil) {
				continue
			}
			require.NoError(t, err)
			vals = []string{v}
		case "hash":
			v, err := c.HGetAll(ctx, k).Result()
			require.NoError(t, err)
			for f, x := range v {
				vals = append(vals, f, x)
			}
		case "list":
			vals, err = c.LRange(ctx, k, 0, -1).Result()
			require.NoError(t, err)
		case "set":
			vals, err = c.SMembers(ctx, k).Result()
			require.NoError(t, err)
		case "zset":
			vals, err = c.ZRange(ctx, k, 0, -1).Result()
			require.NoError(t, err)
		case "stream":
			v, err := c.XRange(ctx, k, "-", "+").Result()
			require.NoError(t, err)
			for _, m := range v {
				vals = append(vals, fmt.Sprint(m.Values))
			}
		default:
			t.Fatalf("key %s of type %s: teach the scan to read it", k, typ)
		}
		for _, v := range vals {
			check(k, typ, v)
		}
	}
	require.NoError(t, iter.Err())
	return hits
}
