package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
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

// logLines decodes every JSON line a process wrote with a decoder that
// refuses a key given twice (encoding/json keeps the last and says
// nothing), and fails the test on the first such line.
func logLines(t *testing.T, name, out string) []map[string]any {
	t.Helper()
	lines, _, err := testenv.LogLines(out)
	require.NoError(t, err, "%s wrote a line a log pipeline would refuse", name)
	for _, l := range lines {
		for k := range l {
			// logging.Unique keeps a repeated key from reaching the line
			// as key_2: the code wrote it twice all the same.
			require.NotRegexp(t, `_[0-9]+$`, k, "%s wrote a key twice (renamed by logging.Unique): %v", name, l)
		}
	}
	return lines
}

// find returns the lines whose msg is msg.
func find(lines []map[string]any, msg string) []map[string]any {
	var out []map[string]any
	for _, l := range lines {
		if l["msg"] == msg {
			out = append(out, l)
		}
	}
	return out
}

// Issue 38, "Done when" 1: codes, notices, a batch, a retry, a dead
// letter and refused requests through the real binaries, at debug level
// so that every line they can write on these paths is written. Every
// line of the API and the consumer decodes without a duplicate key (the
// API's request lines carried "caller" twice, the consumer's lines
// "queue"), and the fields docs/running.md's table names are there.
func TestEveryLogLineHasEachKeyOnce(t *testing.T) {
	s := newSystem(t, "LOG_LEVEL=debug")
	api, c := s.api()
	// The SMTP server: "retry@" is refused once for now (451), "dead@"
	// for good (550 5.7.1: a policy refusal, dead-lettered; a 5.1.x one
	// would be a hard bounce, acked and suppressed).
	var retried atomic.Bool
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage != mailcatcher.StageRcpt {
			return nil
		}
		switch e.To[len(e.To)-1] {
		case "retry@example.com":
			if retried.CompareAndSwap(false, true) {
				return mailcatcher.Reject(451, "4.3.0 try again later")
			}
		case "dead@example.com":
			return mailcatcher.Reject(550, "5.7.1 refused by policy")
		}
		return nil
	})
	cons := s.consumer("c1")
	ctx := testenv.Context(t, time.Minute)
	notice := func(rcpt string) client.SendRequest {
		return client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: rcpt,
			Variables: map[string]string{"title": "t", "content": "c"}}
	}
	_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: "code@example.com", Purpose: "login"})
	require.NoError(t, err)
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelSMS, Recipient: "+8613900001234", Purpose: "login"})
	require.NoError(t, err)
	var ae *client.APIError
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: "code@example.com", Purpose: "login"})
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusTooManyRequests, ae.StatusCode, "the resend cooldown")
	_, err = c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "nope", Recipient: "x@example.com"})
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusBadRequest, ae.StatusCode)
	for _, rcpt := range []string{"notice@example.com", "retry@example.com", "dead@example.com"} {
		_, err = c.SendMessage(ctx, notice(rcpt))
		require.NoError(t, err, rcpt)
	}
	_, err = c.SendBatch(ctx, client.BatchRequest{MessageType: client.MessageEmail, TemplateCode: "notice",
		Recipients: []string{"b1@example.com", "b2@example.com", "b3@example.com"}, Variables: map[string]string{"title": "t", "content": "c"}})
	require.NoError(t, err)
	stats, err := http.NewRequestWithContext(ctx, http.MethodGet, s.apiURL+"/api/queues/stats", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(stats) // no key: a 401
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	testenv.WaitFor(t, 30*time.Second, "every mail but the dead letter's", func() bool {
		return s.mail.Count() == 6 && s.depth("queue.mail.dlq") == 1
	})
	code, out := s.run("dlq", "stats", "-v") // its lines too
	require.Equal(t, 0, code, out)
	cons.Term(t)
	api.Term(t)

	apiLines := logLines(t, "api", api.Output())
	consLines := logLines(t, "consumer", cons.Output())
	logLines(t, "dlq", out)
	t.Logf("decoded %d api lines and %d consumer lines", len(apiLines), len(consLines))

	// The scenario wrote what it was meant to: the request lines with the
	// key's name under api_key, and the consumer's retry, dead letter and
	// per-queue lines.
	statuses := map[string]string{}
	var ready []string
	for _, l := range find(apiLines, "request") {
		for _, k := range []string{"method", "route", "status", "took", "api_key", "tenant", "ip", "caller", "ts", "level"} {
			require.Contains(t, l, k, "a request line: %v", l)
		}
		if l["route"] == "/readyz" {
			// The harness polls /readyz until the API is up: it may
			// answer 503 while the broker connection is being made.
			require.Equal(t, "", fmt.Sprint(l["api_key"]), "a /readyz line: %v", l)
			ready = append(ready, fmt.Sprint(l["status"]))
			continue
		}
		statuses[fmt.Sprint(l["status"])] = fmt.Sprint(l["api_key"])
	}
	require.Equal(t, map[string]string{"202": "e2e", "429": "e2e", "400": "e2e", "401": ""}, statuses, "the status of each request line and its api_key (none for the 401)")
	require.NotEmpty(t, ready, "the harness's /readyz lines")
	require.Equal(t, "200", ready[len(ready)-1], "/readyz answered 200 once the API was up: %v", ready)
	for _, st := range ready {
		require.Contains(t, []string{"200", "503"}, st, "/readyz answers: %v", ready)
	}
	for _, msg := range []string{"send failed; retry scheduled", "dead-lettering", "sent", "consuming"} {
		require.NotEmpty(t, find(consLines, msg), "the consumer's %q line", msg)
	}
	for _, l := range find(consLines, "consuming") {
		require.Contains(t, l, "queue")
	}
	for _, l := range append(find(consLines, "dead-lettering"), find(consLines, "send failed; retry scheduled")...) {
		for _, k := range []string{"task_id", "channel", "provider", "recipient", "attempt", "class", "error"} {
			require.Contains(t, l, k, "a message line: %v", l)
		}
	}
}

// Issue 38, "Done when" 2: 20,000 requests refused by admission (the
// normal queue nearly full, no consumer) against the API binary with its
// log settings at their defaults. Before, each wrote an error line with a
// stack trace and a warn line (39,839 lines for 19,920 refusals). Now the
// whole run writes at most 200 lines, none at level error, and
// msgpulse_http_requests_total counts every refusal.
func TestRefusalsUnderOverloadWriteBoundedLogs(t *testing.T) {
	const refusals = 20_000
	s := newSystem(t, "MAIL_NORMAL_QUEUE_MAX_LENGTH=10", "LIMIT_EMAIL_PER_SECOND=0", "LIMIT_PER_API_KEY_PER_MINUTE=0")
	api, c := s.api()
	fill := burst(testenv.Context(t, time.Minute), c, 20, 1, "fill") // one at a time: 202s, then admission's 503s
	require.NoError(t, fill.err)
	require.Positive(t, fill.refused, "the queue is nearly full")
	before := s.requestsTotal(t, "503")

	body := []byte(`{"messageType":"EMAIL","templateCode":"notice","recipient":"over@example.com","variables":{"title":"t","content":"c"}}`)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 30 * time.Second}
	var next, refused atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	started := time.Now()
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= refusals {
				req, err := http.NewRequest(http.MethodPost, s.apiURL+"/api/messages/send", bytes.NewReader(body))
				if err != nil {
					errs <- err
					return
				}
				req.Header.Set("X-API-Key", apiKey)
				req.Header.Set("Content-Type", "application/json")
				resp, err := hc.Do(req)
				if err != nil {
					errs <- err
					return
				}
				msg, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusServiceUnavailable || !queueFull(string(msg)) {
					errs <- fmt.Errorf("%d %s", resp.StatusCode, msg)
					return
				}
				refused.Add(1)
			}
		}()
	}
	wg.Wait()
	took := time.Since(started)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.EqualValues(t, refusals, refused.Load())
	t.Logf("%d refusals in %s (%.0f/s)", refusals, took.Round(time.Millisecond), refusals/took.Seconds())
	require.Equal(t, refusals, s.requestsTotal(t, "503")-before, "msgpulse_http_requests_total counts every refusal")

	// What was held back is summed up when the interval ends, or at the
	// latest when the API stops.
	linesBefore := strings.Count(api.Output(), "\n")
	api.Term(t)
	lines := logLines(t, "api", api.Output())
	held := 0
	for _, l := range lines {
		require.NotEqual(t, "error", l["level"], "no line at level error: %v", l)
		require.NotContains(t, l, "stacktrace", "no stack trace: %v", l)
		if l["msg"] == "log lines held back" {
			n, err := strconv.Atoi(fmt.Sprint(l["held_back"]))
			require.NoError(t, err)
			held += n
		}
	}
	t.Logf("the api wrote %d lines in all (%d before it stopped); %d request lines held back", len(lines), linesBefore, held)
	require.LessOrEqual(t, len(lines), 200, "the whole run's lines")
	require.Greater(t, held, refusals-200, "the summaries count what they held back")
}

// requestsTotal reads msgpulse_http_requests_total for POST
// /api/messages/send answered with code.
func (s *system) requestsTotal(t *testing.T, code string) int {
	t.Helper()
	resp, err := http.Get(s.apiURL + "/metrics")
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	m := regexp.MustCompile(`msgpulse_http_requests_total\{code="` + code + `",method="POST",route="/api/messages/send"\} (\d+)`).FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, err := strconv.Atoi(string(m[1]))
	require.NoError(t, err)
	return n
}

// Issue 38, "Done when" 7: what `make run` prints is all a newcomer needs
// to log in to the console. The banner comes from scripts/run-env.sh, as
// make run prints it; the API runs with the API_KEYS make run gives it,
// and the console's login form takes the key name and key the banner
// shows. It used to say "log in with the key dev-key-change-me", and the
// form asks for the key's name too.
func TestMakeRunBannerLogsInToTheConsole(t *testing.T) {
	sh := func(script string) string {
		t.Helper()
		cmd := exec.CommandContext(testenv.Context(t, 30*time.Second), "bash", "-c", ". scripts/run-env.sh && "+script) //nolint:gosec // the test's own script
		cmd.Dir = "../.."
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")} // make run's defaults, none of the test's
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	banner := sh("banner")
	keys := strings.TrimSpace(sh(`printf '%s' "$API_KEYS"`))
	t.Logf("make run prints:\n%s", banner)
	name := regexp.MustCompile(`key name: (\S+)`).FindStringSubmatch(banner)
	key := regexp.MustCompile(`key:\s+(\S+)`).FindStringSubmatch(banner)
	require.Len(t, name, 2, "the banner names the console's key")
	require.Len(t, key, 2, "the banner shows the console's key")

	s := newSystem(t)
	s.api("API_KEYS=" + keys)
	page := get(t, s.consoleLogin(t, name[1], key[1]), s.apiURL+"/console/queues")
	require.Contains(t, page, `id="queues"`, "logged in with what the banner printed")
	require.Contains(t, page, "key: "+name[1])
}
