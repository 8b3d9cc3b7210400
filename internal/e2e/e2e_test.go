package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

func TestCodeThroughTheAPIArrivesByMailOnceAndVerifies(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	s.consumer("c1")
	ctx := testenv.Context(t, 30*time.Second)
	vc, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: "alice@example.com", Purpose: "login"})
	require.NoError(t, err)
	testenv.WaitFor(t, 15*time.Second, "the mail", func() bool { return s.mailsTo("alice@example.com") == 1 })
	m := s.mail.Messages()[0]
	code := strings.TrimSpace(m.Subject[strings.LastIndex(m.Subject, " "):])
	require.Regexp(t, `^[0-9]{6}$`, code)
	testenv.WaitFor(t, 5*time.Second, "status sent", func() bool {
		msg, err := c.GetMessage(ctx, vc.TaskID)
		require.NoError(t, err)
		return msg.Status == client.Status("sent")
	})
	res, err := c.VerifyCode(ctx, client.VerifyRequest{Channel: client.ChannelEmail, Recipient: "alice@example.com", Purpose: "login", Code: code})
	require.NoError(t, err)
	require.True(t, res.Valid)
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: "alice@example.com", Purpose: "login"})
	wait, limited := client.IsRateLimited(err)
	require.True(t, limited)
	require.Greater(t, wait, 50*time.Second)
	require.Equal(t, 1, s.mailsTo("alice@example.com"), "still exactly one mail")
}

// A consumer killed (SIGKILL) while the SMTP server is receiving its
// message loses nothing and sends nothing twice: the message goes back to
// the queue, waits out the dead consumer's lease, and another consumer
// sends it once.
func TestConsumerKilledMidSendLosesAndDuplicatesNothing(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	entered := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData && e.To[0] == "victim@example.com" {
			once.Do(func() { close(entered) })
			<-release
			return mailcatcher.Reject(421, "4.4.2 connection lost")
		}
		return nil
	})
	a := s.consumer("victim-consumer", "CLAIM_LEASE=1s")
	ctx := testenv.Context(t, 60*time.Second)
	res, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: "victim@example.com",
		Variables: map[string]string{"title": "crash", "content": "mid-send"}})
	require.NoError(t, err)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the send never reached the SMTP server")
	}
	a.Kill(t) // crash mid-send: no ack, no release, no sent mark
	close(release)
	s.mail.SetHook(nil)
	s.consumer("survivor")
	testenv.WaitFor(t, 30*time.Second, "mailed by the survivor", func() bool { return s.mailsTo("victim@example.com") == 1 })
	testenv.WaitFor(t, 5*time.Second, "status sent", func() bool {
		msg, err := c.GetMessage(ctx, res.TaskID)
		require.NoError(t, err)
		return msg.Status == client.Status("sent")
	})
	require.Equal(t, map[string]int{"survivor": 1}, s.sentBy())
	// Every copy of the message is gone from the broker (the redelivery and
	// the snoozed copy it waited in), and the claim says sent: no second
	// send can follow.
	testenv.WaitFor(t, 15*time.Second, "queues empty", func() bool { return s.queued() == 0 })
	require.Equal(t, 1, s.mailsTo("victim@example.com"))
}

func send(t *testing.T, c *client.Client, n int, prefix string) {
	t.Helper()
	ctx := testenv.Context(t, 60*time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice",
				Recipient: fmt.Sprintf("%s%d@example.com", prefix, i), Variables: map[string]string{"title": "t", "content": "c"}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

func TestTwoConsumerProcessesSplitTheLoad(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	// Slow the SMTP server a little so both consumers get busy.
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData {
			time.Sleep(5 * time.Millisecond) // simulates a slow server, not waiting for an outcome
		}
		return nil
	})
	s.consumer("one", "CONCURRENCY=4")
	s.consumer("two", "CONCURRENCY=4")
	const n = 200
	send(t, c, n, "load")
	testenv.WaitFor(t, 60*time.Second, "all mailed", func() bool { return s.mail.Count() == n })
	for i := range n {
		require.Equal(t, 1, s.mailsTo(fmt.Sprintf("load%d@example.com", i)), i)
	}
	by := s.sentBy()
	t.Logf("sent by consumer: %v", by)
	require.Len(t, by, 2)
	require.Greater(t, by["one"], n/10)
	require.Greater(t, by["two"], n/10)
}

// Rolling restart: each consumer gets SIGTERM while messages are flowing and
// in flight; nothing is lost and nothing is sent twice.
func TestRollingRestartLosesAndDuplicatesNothing(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData {
			time.Sleep(20 * time.Millisecond) // slow server: sends are in flight at SIGTERM
		}
		return nil
	})
	a := s.consumer("a1", "CONCURRENCY=4")
	b := s.consumer("b1", "CONCURRENCY=4")
	const n = 150
	done := make(chan struct{})
	go func() { defer close(done); send(t, c, n, "roll") }()
	testenv.WaitFor(t, 30*time.Second, "sending under way", func() bool { return s.mail.Count() >= 20 })
	a.Term(t)
	s.consumer("a2", "CONCURRENCY=4")
	testenv.WaitFor(t, 30*time.Second, "more sent", func() bool { return s.mail.Count() >= 60 })
	b.Term(t)
	s.consumer("b2", "CONCURRENCY=4")
	<-done
	testenv.WaitFor(t, 60*time.Second, "all mailed", func() bool { return s.mail.Count() >= n })
	for i := range n {
		require.Equal(t, 1, s.mailsTo(fmt.Sprintf("roll%d@example.com", i)), "roll%d", i)
	}
	require.Equal(t, n, s.mail.Count())
}

func TestCommandsExitCodesAndHelp(t *testing.T) {
	s := newSystem(t)
	for _, tc := range []struct {
		name  string
		env   []string
		args  []string
		code  int
		wants string
	}{
		{"api help", nil, []string{"-h"}, 0, "VERIFY_MAX_PER_HOUR"},
		{"consumer help", nil, []string{"-h"}, 0, "SHUTDOWN_TIMEOUT"},
		{"topology help", nil, []string{"-h"}, 0, "MAIL_QUEUE_TTL"},
		{"api bad value", []string{"CODE_TTL=soon"}, nil, 2, `CODE_TTL="soon": not a duration`},
		{"api no keys", []string{"API_KEYS="}, nil, 2, "API_KEYS"},
		{"api malformed digest", []string{"API_KEYS=shopA:SHA256=abcd"}, nil, 2, "sha256= needs 64 hex digits"},
		{"api callback secret equal to CODE_SECRET", []string{"CODE_SECRET=e2e-code-secret-0123456789abcdefghabcdef0123", "CALLBACK_SECRET=e2e-code-secret-0123456789abcdefghabcdef0123"}, nil, 2, "CALLBACK_SECRET: must differ from CODE_SECRET"},
		{"api callback-key derived", []string{"CALLBACK_SECRET=e2e-callback-secret-0123"}, []string{"callback-key", "-tenant", "shopA"}, 0, callbackkey.Derive("e2e-callback-secret-0123", "shopA")},
		{"api callback-key explicit", []string{"CALLBACK_SECRETS=shopA=e2e-shopA-callback-0123"}, []string{"callback-key", "-tenant", "shopA"}, 0, "e2e-shopA-callback-0123"},
		{"api callback-key without a secret", nil, []string{"callback-key", "-tenant", "shopA"}, 1, "CALLBACK_SECRETS"},
		{"api unknown command", nil, []string{"serve"}, 2, "unknown command"},
		{"consumer bad channel", []string{"CHANNELS=mail,push"}, nil, 2, "CHANNELS"},
		{"consumer bad log format", []string{"LOG_FORMAT=xml"}, nil, 2, "LOG_FORMAT"},
		{"topology bad queue type", []string{"QUEUE_TYPE=stream"}, []string{"declare"}, 2, "QUEUE_TYPE"},
		{"topology declare again is a no-op", nil, []string{"declare"}, 0, "nothing changed"},
		{"topology plan in sync", nil, []string{"plan"}, 0, "0 to create, 0 in conflict"},
		{"topology other ttl is a conflict", []string{"MAIL_QUEUE_TTL=30s"}, []string{"declare"}, 1, "set MAIL_QUEUE_TTL=1m"},
		{"topology plan sees it", []string{"MAIL_QUEUE_TTL=30s"}, []string{"plan"}, 2, "x-message-ttl is 60000 on the broker, the model wants 30000"},
	} {
		name := strings.Fields(tc.name)[0]
		code, out := s.runEnv(tc.env, name, tc.args...)
		require.Equal(t, tc.code, code, "%s:\n%s", tc.name, out)
		require.Contains(t, out, tc.wants, tc.name)
	}
	_ = context.Background
}

// dlq and topology print nothing on stderr when all went well; -v brings
// their info lines back (a replay's session logs "broker connected").
func TestToolsAreQuietUnlessAskedWithV(t *testing.T) {
	s := newSystem(t)
	run := func(name string, args ...string) (stdout, stderr string) {
		t.Helper()
		var out, errOut bytes.Buffer
		cmd := exec.Command(filepath.Join(binDir, name), args...) //nolint:gosec // the binaries this test built
		cmd.Env, cmd.Stdout, cmd.Stderr = s.env, &out, &errOut
		require.NoError(t, cmd.Run(), "%s %v: %s", name, args, errOut.String())
		return out.String(), errOut.String()
	}
	replay := []string{"replay", "--channel", "mail", "--all"}
	for _, tc := range [][]string{{"topology", "declare"}, {"topology", "plan"}, {"dlq", "stats"}, append([]string{"dlq"}, replay...)} {
		out, errOut := run(tc[0], tc[1:]...)
		require.Empty(t, errOut, "%v: stderr of a run that went well", tc)
		require.NotEmpty(t, out, "%v: the answer is on stdout", tc)
	}
	_, errOut := run("dlq", append(replay, "-v")...)
	require.Contains(t, errOut, "broker connected", "-v, even after the command's own flags")
	_, errOut = run("topology", "-v", "declare")
	require.NotContains(t, errOut, "error")
}

// The API binary serves the console at /console, and what a consumer
// process sends reaches the console's chart (the consumer's timeline
// sampler flushes on a graceful stop).
func TestConsoleServedByTheAPIChartsTheConsumersSends(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	cons := s.consumer("c1")
	ctx := testenv.Context(t, 30*time.Second)
	_, err := c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: "carol@example.com", Purpose: "login"})
	require.NoError(t, err)
	testenv.WaitFor(t, 15*time.Second, "the mail", func() bool { return s.mailsTo("carol@example.com") == 1 })
	cons.Term(t)

	hc := s.consoleLogin(t, "e2e", apiKey)
	page := get(t, hc, s.apiURL+"/console/queues") // the login redirected here too
	require.Contains(t, page, `id="queues"`)
	require.Contains(t, page, "key: e2e")
	require.Contains(t, page, "1 sent, 0 failed")
	require.NotContains(t, page, "carol@example.com")
	// queue.mail's in/out rates come from the management API, which
	// publishes its statistics every few seconds.
	testenv.WaitFor(t, 30*time.Second, "queue.mail's rates from the management API", func() bool {
		page := get(t, hc, s.apiURL+"/console/queues")
		_, row, _ := strings.Cut(page, `data-queue="queue.mail"`)
		row, _, _ = strings.Cut(row, "</tr>")
		return strings.Contains(row, "in ") && strings.Contains(row, " out ")
	})
}

// consoleLogin logs in to the last API's console with the login form, as
// a person would, and returns the client holding the session.
func (s *system) consoleLogin(t *testing.T, name, key string) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	hc := &http.Client{Jar: jar, Timeout: 10 * time.Second}
	login := get(t, hc, s.apiURL+"/console/login")
	nonce := regexp.MustCompile(`name="nonce" value="([^"]+)"`).FindStringSubmatch(login)
	require.Len(t, nonce, 2, login)
	resp, err := hc.PostForm(s.apiURL+"/console/login", url.Values{"nonce": {nonce[1]}, "name": {name}, "key": {key}})
	require.NoError(t, err)
	_ = resp.Body.Close()
	return hc
}

func get(t *testing.T, hc *http.Client, u string) string {
	t.Helper()
	resp, err := hc.Get(u)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	return string(b)
}
