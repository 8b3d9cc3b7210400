package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/console"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/timeline"
	"github.com/msgpulse/msgpulse/internal/topology"
)

const (
	testName = "oncall"
	testKey  = "oncall-key-0123456789abcdefgh" // admin: may use the console
	sendKey  = "backend-key-0123456789abcdefgh"
)

// keys are the API_KEYS of the tests: an on-call key with the admin scope,
// and a backend's key that may only send.
var keys = []apikey.Key{apikey.New(testName, testKey, apikey.Scopes(apikey.Admin)), apikey.New("backend", sendKey, apikey.Scopes(apikey.Send))}

// harness is a whole msgpulse stack (vhost, Redis prefix, SMTP catcher,
// consumers on demand) with the console served over HTTP.
type harness struct {
	stack *dispatchtest.Stack
	cfg   topology.Config
	con   *console.Console
	http  *httptest.Server
	mail  topology.ChannelTopology
	// checks counts the keys the console checked (Authenticate calls).
	checks *atomic.Int64
	// accounts is Deps.Accounts of the consoles serve builds (nil: none).
	accounts func(ctx context.Context) ([]accountstate.State, error)
	// fraud is Deps.Fraud of the consoles serve builds (nil: none).
	fraud console.Fraud
	// suppressions is Deps.Suppressions of the consoles serve builds
	// (nil: none).
	suppressions console.Suppressions
}

func setup(t *testing.T) *harness { t.Helper(); return setupModel(t, nil) }

// setupModel is setup with the topology adjusted (nil: the defaults).
func setupModel(t *testing.T, model func(*topology.Config)) *harness {
	t.Helper()
	if testing.Short() {
		t.Skip("needs RabbitMQ and Redis")
	}
	s := dispatchtest.New(t, dispatchtest.Options{Model: model})
	cfg := testenv.Topology()
	if model != nil {
		model(&cfg)
	}
	mail, err := s.Model.Channel(topology.Mail)
	require.NoError(t, err)
	h := &harness{stack: s, cfg: cfg, mail: mail, checks: &atomic.Int64{}}
	h.con, h.http = h.serve(t, keys, nil)
	return h
}

// serve builds a console with these API_KEYS on the harness's broker and
// Redis, as an API replica (or the API after a restart) would, and serves
// it over HTTP. adjust changes its Config (nil: none).
func (h *harness) serve(t *testing.T, apiKeys []apikey.Key, adjust func(*console.Config)) (*console.Console, *httptest.Server) {
	t.Helper()
	s := h.stack
	set, err := apikey.NewSet(apiKeys)
	require.NoError(t, err)
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	cfg := console.Config{Refresh: 5 * time.Second, DLQ: config.DLQ{
		Common: config.Common{AMQPURL: s.Broker.URL, RedisURL: s.Redis.URL, RedisPrefix: s.Redis.Prefix},
		Model:  h.cfg, ConfirmTimeout: 10 * time.Second, ScanMax: 10_000, StatusTimeout: 2 * time.Second,
	}}
	if adjust != nil {
		adjust(&cfg)
	}
	con, err := console.New(cfg, console.Deps{
		Log: log, Model: s.Model, Status: s.Status, Redis: s.Redis.Client, Conn: s.Session.Conn, Timeline: timeline.NewReader(s.Redis.Client, s.Redis.Prefix),
		Inspect: func(ctx context.Context, names []string) ([]broker.QueueState, error) {
			conn, err := s.Session.Conn(ctx)
			if err != nil {
				return nil, err
			}
			return broker.Inspect(conn, names)
		},
		Authenticate: func(key string) (apikey.Key, bool) { h.checks.Add(1); return set.Lookup(key) },
		Lookup:       set.ByName,
		Accounts:     h.accounts,
		Fraud:        h.fraud,
		Suppressions: h.suppressions,
	})
	require.NoError(t, err)
	t.Cleanup(con.Close)
	srv := httptest.NewServer(con)
	t.Cleanup(srv.Close)
	return con, srv
}

// deadLetter publishes a notice to mail and rejects it from the main queue
// (no consumer is running), so the broker dead-letters it as rejected.
func (h *harness) deadLetter(t *testing.T, rcpt, title string) string {
	t.Helper()
	return h.deadLetterMore(t, rcpt, title, 1)
}

// deadLetterMore is deadLetter for the n-th dead letter of a test.
func (h *harness) deadLetterMore(t *testing.T, rcpt, title string, n int) string {
	t.Helper()
	id := h.stack.Notice(topology.Mail, rcpt, title, nil)
	h.rejectHead(t, id, n)
	return id
}

// rejectHead rejects message id from the head of the mail queue and waits
// for it to be the n-th dead letter.
func (h *harness) rejectHead(t *testing.T, id string, n int) {
	t.Helper()
	h.rejectHeadOf(t, h.mail, id, n)
}

// rejectHeadOf is rejectHead on channel ch's queue.
func (h *harness) rejectHeadOf(t *testing.T, ch topology.ChannelTopology, id string, n int) {
	t.Helper()
	testenv.WaitFor(t, 20*time.Second, "the notice in "+ch.Queue, func() bool {
		d, ok, err := h.stack.Ch.Get(ch.Queue, false)
		require.NoError(t, err)
		if ok {
			require.Equal(t, id, d.MessageId)
			require.NoError(t, d.Nack(false, false))
		}
		return ok
	})
	testenv.WaitFor(t, 20*time.Second, "the dead letter in "+ch.DeadLetterQueue, func() bool { return h.stack.Depth(ch.DeadLetterQueue) == n })
}

// client is a logged-in HTTP client (cookies kept), with the CSRF token of
// its session.
func (h *harness) client(t *testing.T, login bool) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if login {
		resp := h.login(t, c, testName, testKey)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	}
	return c
}

// login fills in the login form as a browser would: the form's nonce, the
// key's name and the key.
func (h *harness) login(t *testing.T, c *http.Client, name, key string) *http.Response {
	t.Helper()
	return loginAt(t, h.http.URL, c, name, key)
}

// loginAt is login on the console served at base.
func loginAt(t *testing.T, base string, c *http.Client, name, key string) *http.Response {
	t.Helper()
	resp, err := c.Get(base + "/console/login")
	require.NoError(t, err)
	nonce := between(readBody(t, resp), `name="nonce" value="`, `"`)
	require.NotEmpty(t, nonce)
	resp, err = c.PostForm(base+"/console/login", url.Values{"nonce": {nonce}, "name": {name}, "key": {key}})
	require.NoError(t, err)
	_ = readBody(t, resp)
	return resp
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(b)
}

func between(s, from, to string) string {
	_, rest, ok := strings.Cut(s, from)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, to)
	return v
}

// The console refuses what it must: no session, a wrong key, a POST
// without the session's CSRF token; and it sets its protective headers.
func TestAuthAndCSRF(t *testing.T) {
	h := setup(t)
	anon := h.client(t, false)
	in := h.client(t, true)
	dlqURL := h.http.URL + "/console/dlq/" + h.mail.DeadLetterQueue

	resp, err := in.Get(h.http.URL + "/console/queues")
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	csrf := between(page, `name="csrf" value="`, `"`)
	require.NotEmpty(t, csrf)
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.NotContains(t, page, "<script", "the console runs no script")
	require.NotContains(t, page, testKey, "the key never comes back")

	cases := []struct {
		name   string
		c      *http.Client
		method string
		url    string
		form   url.Values
		want   int
	}{
		{"a page without a session goes to the login", anon, http.MethodGet, h.http.URL + "/console/queues", nil, http.StatusSeeOther},
		{"an action without a session is refused", anon, http.MethodPost, dlqURL + "/replay", url.Values{"reason": {"rejected"}}, http.StatusUnauthorized},
		{"an action without a CSRF token is refused", in, http.MethodPost, dlqURL + "/replay", url.Values{"reason": {"rejected"}}, http.StatusForbidden},
		{"an action with another token is refused", in, http.MethodPost, dlqURL + "/replay", url.Values{"reason": {"rejected"}, "csrf": {csrf + "x"}}, http.StatusForbidden},
		{"an action with the token is shown its confirmation", in, http.MethodPost, dlqURL + "/replay", url.Values{"reason": {"rejected"}, "csrf": {csrf}}, http.StatusOK},
		{"a queue outside the model is not read", in, http.MethodGet, h.http.URL + "/console/dlq/queue.mail", nil, http.StatusNotFound},
		{"a login without the form's nonce is refused", anon, http.MethodPost, h.http.URL + "/console/login", url.Values{"key": {testKey}}, http.StatusForbidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			var err error
			if tc.method == http.MethodGet {
				resp, err = tc.c.Get(tc.url)
			} else {
				resp, err = tc.c.PostForm(tc.url, tc.form)
			}
			require.NoError(t, err)
			body := readBody(t, resp)
			require.Equal(t, tc.want, resp.StatusCode, body)
		})
	}

	t.Run("a wrong key does not log in", func(t *testing.T) {
		resp := h.login(t, h.client(t, false), testName, "not-"+testKey)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		for _, ck := range resp.Cookies() {
			require.NotEqual(t, "msgpulse_console", ck.Name, "no session for a wrong key")
		}
	})

	t.Run("a key without the admin scope does not log in", func(t *testing.T) {
		resp := h.login(t, h.client(t, false), "backend", sendKey)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		for _, ck := range resp.Cookies() {
			require.NotEqual(t, "msgpulse_console", ck.Name, "no session for a key that may only send")
		}
	})

	t.Run("the session cookie is HttpOnly, SameSite=Strict and holds no key", func(t *testing.T) {
		resp := h.login(t, h.client(t, false), testName, testKey)
		var found bool
		for _, ck := range resp.Cookies() {
			if ck.Name == "msgpulse_console" && ck.Value != "" {
				found = true
				require.True(t, ck.HttpOnly)
				require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
				require.NotContains(t, ck.Value, testKey)
			}
		}
		require.True(t, found, "a session cookie was set")
	})

	t.Run("cookies are Secure when the browser came over HTTPS", func(t *testing.T) {
		for proto, want := range map[string]bool{"https": true, "": false} {
			req, err := http.NewRequest(http.MethodGet, h.http.URL+"/console/login", nil)
			require.NoError(t, err)
			if proto != "" {
				req.Header.Set("X-Forwarded-Proto", proto)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = readBody(t, resp)
			require.Len(t, resp.Cookies(), 1)
			require.Equal(t, want, resp.Cookies()[0].Secure, "X-Forwarded-Proto %q", proto)
		}
	})

	// Last: it blocks this address for the rest of the test.
	t.Run("guessing keys is stopped after ten failures a minute", func(t *testing.T) {
		c := h.client(t, false)
		refused := 0
		for range 12 {
			if h.login(t, c, "guess-"+testenv.ID(), "guess-"+testenv.ID()).StatusCode == http.StatusTooManyRequests {
				break
			}
			refused++
		}
		// Two failures above (a wrong key, a send-only key), eight here,
		// then 429: the window is fixed from the first failure, and the
		// successful logins gave their counts back.
		require.Equal(t, 8, refused)
		require.Equal(t, http.StatusTooManyRequests, h.login(t, c, testName, testKey).StatusCode, "the right key waits too")
	})
}

// The queue page shows every queue of the model, with a bounded queue's
// fill, flagged once past the warning threshold.
func TestQueuePageFlagsAFullQueue(t *testing.T) {
	h := setupModel(t, func(c *topology.Config) {
		mail := c.Channels[topology.Mail]
		mail.MaxLength = 10
		c.Channels[topology.Mail] = mail
	})
	c := h.client(t, true)
	row := func() string {
		resp, err := c.Get(h.http.URL + "/console/queues")
		require.NoError(t, err)
		page := readBody(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		for _, q := range h.stack.Model.Queues {
			require.Contains(t, page, `data-queue="`+q.Name+`"`, "every queue of the model is shown")
		}
		_, r, _ := strings.Cut(page, `data-queue="`+h.mail.Queue+`"`)
		r, _, _ = strings.Cut(r, "</tr>")
		return r
	}
	require.Contains(t, row(), "0%")
	for i := range 9 {
		h.stack.Notice(topology.Mail, "fill-"+strconv.Itoa(i)+"@example.com", "fill", nil)
	}
	testenv.WaitFor(t, 20*time.Second, "nine in "+h.mail.Queue, func() bool { return h.stack.Depth(h.mail.Queue) == 9 })
	r := row()
	require.Contains(t, r, "90%")
	require.Contains(t, r, `class="badge warning"`, "past the threshold of 80%")
}

// The queue page shows the WeCom accounts as /api/queues/stats does, one
// of them down, and reading them changes nothing in Redis. Without
// accounts there is no table.
func TestQueuePageShowsWeComAccounts(t *testing.T) {
	h := setup(t)
	c := h.client(t, true)
	page := func(base string, c *http.Client) string {
		resp, err := c.Get(base + "/console/queues")
		require.NoError(t, err)
		p := readBody(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
		return p
	}
	require.NotContains(t, page(h.http.URL, c), "WeCom accounts", "no account configured: no table")

	rdb := h.stack.Redis
	store, err := accountstate.New(rdb.Client, accountstate.Config{Prefix: rdb.Prefix, DownFor: time.Hour})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, store.Account("team-b").MarkDown(ctx, "wecom 40001: invalid credential"))
	require.NoError(t, store.Account("team-a").Record(ctx, true))
	require.NoError(t, store.Account("team-a").NoteRate(ctx, 12.5))
	// As api.Server.WeComAccountStates reads them (Store.Get per account).
	h.accounts = func(ctx context.Context) ([]accountstate.State, error) {
		var out []accountstate.State
		for _, name := range []string{"team-a", "team-b"} {
			st, err := store.Get(ctx, name)
			if err != nil {
				return nil, err
			}
			out = append(out, st)
		}
		out[0].Tenants = []string{"shop"}
		return out, nil
	}
	_, srv := h.serve(t, keys, nil)
	c = h.client(t, false)
	require.Equal(t, http.StatusSeeOther, loginAt(t, srv.URL, c, testName, testKey).StatusCode)

	// What the store holds, read through its own API (cluster-safe: no
	// key names typed here).
	snapshot := func() []accountstate.State {
		out, err := h.accounts(ctx)
		require.NoError(t, err)
		return out
	}
	before := snapshot()
	p := page(srv.URL, c)
	require.Contains(t, p, "<h2>WeCom accounts</h2>")
	row := func(name string) string {
		_, r, ok := strings.Cut(p, `data-account="`+name+`"`)
		require.True(t, ok, "a row for "+name)
		r, _, _ = strings.Cut(r, "</tr>")
		return r
	}
	a, b := row("team-a"), row("team-b")
	require.Contains(t, a, `class="badge ok">up<`)
	require.Contains(t, a, "100%")
	require.Contains(t, a, "12.50")
	require.Contains(t, a, "shop")
	require.Contains(t, b, `class="badge warning">down<`)
	require.Contains(t, b, "wecom 40001: invalid credential")
	require.Regexp(t, `until \d\d:\d\d:\d\d UTC`, b)
	require.Contains(t, b, "every tenant")
	after := snapshot()
	require.NotNil(t, before[1].DownUntil)
	require.WithinDuration(t, *before[1].DownUntil, *after[1].DownUntil, 50*time.Millisecond, "the down mark's expiry is untouched")
	before[1].DownUntil, after[1].DownUntil = nil, nil
	require.Equal(t, before, after, "reading the accounts changes nothing")
	why, err := store.Account("team-b").Down(ctx)
	require.NoError(t, err)
	require.Contains(t, why, "40001", "still down after the page was read")
}

// What a dead letter carries is escaped, and its recipient masked, in the
// list and the detail page.
func TestDeadLetterPagesEscapeAndMask(t *testing.T) {
	h := setup(t)
	rcpt := "victim-" + testenv.ID() + "@example.com"
	id := h.deadLetter(t, rcpt, `<script>alert(1)</script>`)
	c := h.client(t, true)
	for _, path := range []string{"/console/dlq/" + h.mail.DeadLetterQueue, "/console/dlq/" + h.mail.DeadLetterQueue + "/message/" + id, "/console/dlq"} {
		resp, err := c.Get(h.http.URL + path)
		require.NoError(t, err)
		page := readBody(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.NotContains(t, page, rcpt, path+": the full recipient is never shown")
		require.NotContains(t, page, "<script>", path)
	}
	resp, err := c.Get(h.http.URL + "/console/dlq/" + h.mail.DeadLetterQueue + "/message/" + id)
	require.NoError(t, err)
	page := readBody(t, resp)
	// Variables are masked like recipients (they may hold one); what is
	// left of the title is escaped.
	require.Contains(t, page, "&#34;title&#34;: &#34;&lt;sc", "the title is shown masked, escaped")
	require.Contains(t, page, "v***", "the recipient is shown masked")
	require.Equal(t, 1, h.stack.Depth(h.mail.DeadLetterQueue), "reading gave the dead letter back")

	t.Run("a verification code is never shown, sealed or open", func(t *testing.T) {
		var sealed, digest string
		vid, code := h.stack.Verification("code-"+testenv.ID()+"@example.com", "login", func(m *envelope.Message) {
			sealed, digest = m.SealedCode, m.CodeDigest
		})
		h.rejectHead(t, vid, 2)
		resp, err := c.Get(h.http.URL + "/console/dlq/" + h.mail.DeadLetterQueue + "/message/" + vid)
		require.NoError(t, err)
		page := readBody(t, resp)
		require.Equal(t, http.StatusOK, resp.StatusCode, page)
		require.Contains(t, page, "sealedCode", "the body is shown")
		for what, secret := range map[string]string{"code": code, "sealed code": sealed, "digest": digest} {
			require.NotEmpty(t, secret)
			require.NotContains(t, page, secret, what)
		}
	})
}

// The Done-when of the console: a real headless Chromium logs in, finds
// the dead letter the test made, replays it through the page, and sees the
// mail arrive once and the DLQ count fall; it saves screenshots.
func TestBrowserReplaysADeadLetter(t *testing.T) {
	h := setup(t)
	rcpt := "replay-" + testenv.ID() + "@example.com"
	id := h.deadLetter(t, rcpt, "console replay")
	// The chart's source, as cmd/consumer runs it (flushed by hand here).
	sampler, err := timeline.NewSampler(h.stack.Redis.Client, h.stack.Redis.Prefix,
		timeline.Sources{Sent: h.stack.Metrics.Sent, Failed: h.stack.Metrics.DeadLettered, Accuracy: h.stack.DelayMet.Accuracy}, time.Hour, nil)
	require.NoError(t, err)
	h.stack.StartConsumer("c1", 2)

	// Screenshots go to the test's temp dir, or to MSGPULSE_CONSOLE_SHOTS
	// to keep them.
	shots := t.TempDir()
	if dir := os.Getenv("MSGPULSE_CONSOLE_SHOTS"); dir != "" {
		require.NoError(t, os.MkdirAll(dir, 0o755))
		shots = dir
	}
	b := newBrowser(t)
	b.login(h.http.URL)
	b.waitVisible("#queues")
	require.Equal(t, "1", b.text(`#queues tr[data-queue="`+h.mail.DeadLetterQueue+`"] td.depth`))
	b.screenshot(filepath.Join(shots, "1-queues.png"))

	b.open(h.http.URL + "/console/dlq")
	b.waitVisible("#dlqs")
	require.Equal(t, "1", b.text(`#dlqs tr[data-queue="`+h.mail.DeadLetterQueue+`"] td.total`))
	b.screenshot(filepath.Join(shots, "2-dlq.png"))

	b.click(`#dlqs tr[data-queue="` + h.mail.DeadLetterQueue + `"] a`)
	row := `#deadletters tr[data-id="` + id + `"]`
	b.waitVisible(row)
	require.Contains(t, b.text(row), "r***", "the list shows the recipient masked")
	require.NotContains(t, b.text("body"), rcpt)
	b.screenshot(filepath.Join(shots, "3-list.png"))
	if out := os.Getenv("MSGPULSE_CONSOLE_SCREENSHOT"); out != "" {
		b.screenshot(out) // docs/console.png, for the README
	}

	b.click(row + " button.replay-one")
	b.waitVisible("#confirm-replay")
	require.Contains(t, b.text("#dry-run"), "1 would be replayed")
	b.screenshot(filepath.Join(shots, "4-confirm.png"))
	require.Equal(t, 0, h.stack.MailsTo(rcpt), "nothing is sent before the confirmation")
	b.click("#confirm-replay")
	b.waitVisible("#job-done")
	require.Contains(t, b.text("#job-done"), "replayed 1")
	b.screenshot(filepath.Join(shots, "5-done.png"))

	testenv.WaitFor(t, 20*time.Second, "the replayed mail", func() bool { return h.stack.MailsTo(rcpt) >= 1 })
	testenv.WaitFor(t, 20*time.Second, "the task to be sent", func() bool { return h.stack.StatusOf(id).Status == "sent" })
	require.Equal(t, 0, h.stack.Depth(h.mail.Queue))
	require.Equal(t, 1, h.stack.MailsTo(rcpt), "the mail arrived once")

	require.NoError(t, sampler.Flush(testenv.Context(t, 5*time.Second)))
	b.open(h.http.URL + "/console/queues")
	b.waitVisible("#chart-counts")
	require.Contains(t, b.text("#chart-caption"), "1 sent, 0 failed", "the chart counts the replayed send")

	b.open(h.http.URL + "/console/dlq")
	b.waitVisible("#dlqs")
	require.Equal(t, "0", b.text(`#dlqs tr[data-queue="`+h.mail.DeadLetterQueue+`"] td.total`), "the DLQ count fell")
	require.Equal(t, 0, h.stack.Depth(h.mail.DeadLetterQueue))
	b.screenshot(filepath.Join(shots, "6-dlq-after.png"))

	b.open(h.http.URL + "/console/messages?taskId=" + id)
	b.waitVisible("#record")
	require.Contains(t, b.text("#record"), "sent")
	b.screenshot(filepath.Join(shots, "7-lookup.png"))
	t.Logf("screenshots in %s", shots)
}

// csrfOf logs-in client c's token, read from any page.
func (h *harness) csrfOf(t *testing.T, c *http.Client) string {
	t.Helper()
	resp, err := c.Get(h.http.URL + "/console/messages")
	require.NoError(t, err)
	tok := between(readBody(t, resp), `name="csrf" value="`, `"`)
	require.NotEmpty(t, tok)
	return tok
}

// Purge deletes exactly the messages its confirmation page listed, and
// only after the export step: one that dead-letters meanwhile stays.
func TestExportThenPurge(t *testing.T) {
	h := setup(t)
	c := h.client(t, true)
	csrf := h.csrfOf(t, c)
	a := h.deadLetter(t, "a-"+testenv.ID()+"@example.com", "a")
	base := h.http.URL + "/console/dlq/" + h.mail.DeadLetterQueue

	resp, err := c.Get(base + "/purge?reason=rejected")
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	ids := between(page, `name="ids" value="`, `"`)
	require.Equal(t, a, ids)

	// Dead-lettered after the page was drawn: not in its list.
	late := h.stack.Notice(topology.Mail, "late-"+testenv.ID()+"@example.com", "late", nil)
	d, ok, err := h.stack.Ch.Get(h.mail.Queue, false)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, late, d.MessageId)
	require.NoError(t, d.Nack(false, false))
	testenv.WaitFor(t, 20*time.Second, "two dead letters", func() bool { return h.stack.Depth(h.mail.DeadLetterQueue) == 2 })

	resp, err = c.PostForm(base+"/export", url.Values{"csrf": {csrf}, "ids": {ids}})
	require.NoError(t, err)
	export := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, export)
	require.Contains(t, resp.Header.Get("Content-Disposition"), "attachment")
	lines := strings.Split(strings.TrimSpace(export), "\n")
	require.Len(t, lines, 1)
	require.Contains(t, lines[0], `"id":"`+a+`"`)
	require.Equal(t, 2, h.stack.Depth(h.mail.DeadLetterQueue), "export deletes nothing")

	resp, err = c.PostForm(base+"/purge", url.Values{"csrf": {csrf}, "ids": {ids}, "confirmed": {"yes"}})
	require.NoError(t, err)
	_ = readBody(t, resp)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no purge without the export box ticked")
	require.Equal(t, 2, h.stack.Depth(h.mail.DeadLetterQueue))

	resp, err = c.PostForm(base+"/purge", url.Values{"csrf": {csrf}, "ids": {ids}, "confirmed": {"yes"}, "exported": {"yes"}})
	require.NoError(t, err)
	page = readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	require.Contains(t, page, "Deleted 1 of 1 selected")
	require.Equal(t, 1, h.stack.Depth(h.mail.DeadLetterQueue), "the late dead letter stays")
}

// Replay by reason asks first (a dry run changes nothing), then runs in
// the background at the given rate and reports on its own page.
func TestReplayByReason(t *testing.T) {
	h := setup(t)
	c := h.client(t, true)
	csrf := h.csrfOf(t, c)
	var rcpts []string
	for i := range 3 {
		r := "r" + strconv.Itoa(i) + "-" + testenv.ID() + "@example.com"
		rcpts = append(rcpts, r)
		h.deadLetterMore(t, r, "bulk", i+1)
	}
	h.stack.StartConsumer("c1", 2)
	base := h.http.URL + "/console/dlq/" + h.mail.DeadLetterQueue

	resp, err := c.PostForm(base+"/replay", url.Values{"csrf": {csrf}, "reason": {"rejected"}, "rate": {"20"}})
	require.NoError(t, err)
	page := readBody(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode, page)
	require.Contains(t, page, "3 would be replayed")
	require.Equal(t, 3, h.stack.Depth(h.mail.DeadLetterQueue), "the confirmation step changes nothing")

	resp, err = c.PostForm(base+"/replay", url.Values{"csrf": {csrf}, "reason": {"rejected"}, "rate": {"20"}, "confirmed": {"yes"}})
	require.NoError(t, err)
	_ = readBody(t, resp)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	job := h.http.URL + resp.Header.Get("Location")
	testenv.WaitFor(t, 20*time.Second, "the replay job to end", func() bool {
		resp, err := c.Get(job)
		require.NoError(t, err)
		page = readBody(t, resp)
		return strings.Contains(page, `id="job-done"`)
	})
	require.Contains(t, page, "replayed 3, skipped 0")
	for _, r := range rcpts {
		testenv.WaitFor(t, 20*time.Second, "mail to "+r, func() bool { return h.stack.MailsTo(r) == 1 })
	}
	require.Equal(t, 0, h.stack.Depth(h.mail.DeadLetterQueue))
}

// A batch is looked up by its batchId: counts by state, and a link to
// each task's own lookup.
func TestLookupByBatchID(t *testing.T) {
	h := setup(t)
	ctx := t.Context()
	sent := h.stack.Notice(topology.Mail, "b1-"+testenv.ID()+"@example.com", "batch", nil)
	queued := h.stack.Notice(topology.Mail, "b2-"+testenv.ID()+"@example.com", "batch", nil)
	_, err := h.stack.Status.Update(ctx, sent, status.Update{Status: status.Sent})
	require.NoError(t, err)
	batchID := "batch-" + testenv.ID()
	require.NoError(t, h.stack.Status.CreateBatch(ctx, batchID, []string{sent, queued}))
	c := h.client(t, true)

	for _, tc := range []struct {
		name, query string
		want        []string
	}{
		{"a batch", "batchId=" + batchID, []string{"2 tasks", "<th>sent</th><td>1</td>", "<th>queued</th><td>1</td>",
			`href="/console/messages?taskId=` + sent + `"`, `href="/console/messages?taskId=` + queued + `"`}},
		{"an unknown batch", "batchId=nope-" + testenv.ID(), []string{"No batch nope-"}},
		{"a task of the batch", "taskId=" + sent, []string{`id="record"`, sent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := c.Get(h.http.URL + "/console/messages?" + tc.query)
			require.NoError(t, err)
			page := readBody(t, resp)
			require.Equal(t, http.StatusOK, resp.StatusCode, page)
			for _, w := range tc.want {
				require.Contains(t, page, w)
			}
		})
	}
}

// A console form is read up to 64 KiB: a megabyte of it, with a right key
// inside, is refused before anything is counted or checked (issue 43:
// ParseForm alone reads 10 MB before any login).
func TestConsoleReadsAtMostASmallForm(t *testing.T) {
	h := setup(t)
	c := h.client(t, false)
	resp, err := c.Get(h.http.URL + "/console/login")
	require.NoError(t, err)
	nonce := between(readBody(t, resp), `name="nonce" value="`, `"`)
	form := url.Values{"nonce": {nonce}, "name": {testName}, "key": {testKey}, "pad": {strings.Repeat("x", 1<<20)}}
	resp, err = c.PostForm(h.http.URL+"/console/login", form)
	require.NoError(t, err)
	_ = readBody(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "refused unread")
	require.Equal(t, http.StatusSeeOther, h.login(t, c, testName, testKey).StatusCode, "the same login, small, goes in")
}
