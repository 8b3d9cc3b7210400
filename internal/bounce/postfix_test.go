package bounce_test

import (
	"bytes"
	"context"
	"fmt"
	"net/smtp"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

// The tests' own Postfix (scripts/postfix.sh): SMTP on 127.0.0.1:25250,
// the test domain mx.msgpulse.test (any RCPT taken, local delivery to an
// unknown user bounces 5.1.1), and one bounce domain per test routed to
// that test's receiver, so the tests run side by side.
const (
	postfixPort = 25250
	testDomain  = "mx.msgpulse.test"
	postfixBase = "/tmp/msgpulse-postfix-25250"
)

// postfixRoutes: bounce domain → receiver port (25251-25259 are this
// package's).
var postfixRoutes = map[string]int{
	"b1.h45b.test": 25251,
	"b2.h45b.test": 25252,
	"b3.h45b.test": 25253,
	"b4.h45b.test": 25254,
}

var (
	postfixOnce    sync.Once
	postfixStarted bool
	postfixSkip    string
	errPostfix     error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if postfixStarted {
		if out, err := postfixScript("stop").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "postfix stop: %v\n%s", err, out)
			code = 1
		}
	}
	os.Exit(code)
}

func postfixScript(arg string) *exec.Cmd {
	script, _ := filepath.Abs(filepath.Join("..", "..", "scripts", "postfix.sh"))
	var routes []string
	for d, p := range postfixRoutes {
		routes = append(routes, d+"=127.0.0.1:"+strconv.Itoa(p))
	}
	cmd := exec.Command(script, arg)
	cmd.Env = append(os.Environ(), "POSTFIX_PORT="+strconv.Itoa(postfixPort), "POSTFIX_BASE="+postfixBase,
		"POSTFIX_DOMAIN="+testDomain, "POSTFIX_BOUNCE_ROUTES="+strings.Join(routes, ","))
	return cmd
}

// startPostfix starts the package's Postfix once; a test that needs it
// is skipped, saying why, only when the package cannot be installed.
func startPostfix(t *testing.T) {
	t.Helper()
	postfixOnce.Do(func() {
		if out, err := postfixScript("install").CombinedOutput(); err != nil {
			postfixSkip = fmt.Sprintf("postfix cannot be installed (scripts/postfix.sh install: %v): %s", err, out)
			return
		}
		if out, err := postfixScript("start").CombinedOutput(); err != nil {
			errPostfix = fmt.Errorf("scripts/postfix.sh start: %w: %s", err, out)
			return
		}
		postfixStarted = true
	})
	if postfixSkip != "" {
		t.Skip(postfixSkip)
	}
	require.NoError(t, errPostfix)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(postfixBase, "maillog"))
			lines := strings.Split(string(b), "\n")
			t.Logf("Postfix's log, the last lines:\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
}

// maillog is the Postfix log so far.
func maillog(t *testing.T) string {
	b, err := os.ReadFile(filepath.Join(postfixBase, "maillog"))
	require.NoError(t, err)
	return string(b)
}

// fixedPath is a ReturnPath that hands out one address, signed or not.
type fixedPath string

func (p fixedPath) Address(string) (string, error) { return string(p), nil }

// mailer is msgpulse's mail provider sending through the Postfix with
// envelope senders from rp.
func mailer(t *testing.T, rp mail.ReturnPath) *mail.Mailer {
	t.Helper()
	cfg := mail.DefaultConfig()
	cfg.Host, cfg.Port, cfg.From, cfg.Timeout, cfg.ReturnPath = "127.0.0.1", postfixPort, "msgpulse <no-reply@msgpulse.test>", 10*time.Second, rp
	m, err := mail.New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

// sendUnknown mails an unknown user of the test domain as task taskID;
// Postfix takes it and then writes its DSN to the envelope sender.
func sendUnknown(t *testing.T, m *mail.Mailer, taskID string) string {
	t.Helper()
	to := "nobody-" + strings.ReplaceAll(uuid.NewString()[:8], "-", "") + "@" + testDomain
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := m.SendMail(ctx, provider.Mail{To: to, Subject: "Your code", Text: "Your code is 482913.", TaskID: taskID})
	require.NoError(t, err)
	return to
}

func receiverFor(t *testing.T, domain string, rec *recorder) *receiver {
	t.Helper()
	return startReceiver(t, domain, "127.0.0.1:"+strconv.Itoa(postfixRoutes[domain]), rec, nil)
}

// A mail to an address Postfix does not know bounces: Postfix writes its
// own DSN to the VERP sender, routes it to the receiver, and the receiver
// makes it a Bounced receipt with 5.1.1 for the right task.
func TestPostfixBounceReachesReceiver(t *testing.T) {
	t.Parallel()
	startPostfix(t)
	rec := &recorder{}
	r := receiverFor(t, "b1.h45b.test", rec)
	taskID := uuid.Must(uuid.NewV7()).String()
	to := sendUnknown(t, mailer(t, r.signer), taskID)
	eventually(t, 30*time.Second, "the DSN applied", func() bool { return len(rec.Applied()) > 0 })
	got := rec.Applied()
	require.Len(t, got, 1)
	require.Equal(t, receipt.Receipt{TaskID: taskID, Channel: "email", Kind: receipt.Bounced, Code: "5.1.1",
		Detail: fmt.Sprintf("unknown user: %q", strings.Split(to, "@")[0]), Source: "dsn", Recipient: to,
		Suppress: receipt.SuppressHardBounce}, got[0])
}

// A DSN to a return path with one character of its token changed, and
// one to a made-up address at the bounce domain, are read and thrown
// away: no receipt.
func TestPostfixForgedBouncesChangeNothing(t *testing.T) {
	t.Parallel()
	startPostfix(t)
	rec := &recorder{}
	r := receiverFor(t, "b2.h45b.test", rec)
	real, err := r.signer.Address(uuid.Must(uuid.NewV7()).String())
	require.NoError(t, err)
	local, domain, _ := strings.Cut(real, "@")
	i := len(local) - 3 // a character of the mac
	c := byte('a')
	if local[i] == 'a' {
		c = 'b'
	}
	changed := local[:i] + string(c) + local[i+1:] + "@" + domain
	for _, from := range []string{changed, "made-up-sender@" + domain} {
		sendUnknown(t, mailer(t, fixedPath(from)), uuid.NewString())
	}
	eventually(t, 30*time.Second, "both DSNs read and discarded", func() bool { return r.discarded() == 2 })
	require.Empty(t, rec.Calls())
}

// While the store fails the receiver answers 451 and Postfix keeps the
// DSNs and tries again; with the receiver stopped they wait in Postfix's
// queue; a restarted receiver with a working store gets every one.
func TestPostfixRetriesUntilStoredAcrossRestart(t *testing.T) {
	t.Parallel()
	startPostfix(t)
	const domain = "b3.h45b.test"
	down := &recorder{}
	down.setFail(func(receipt.Receipt) error { return errRedisDown })
	r1 := receiverFor(t, domain, down)
	m := mailer(t, r1.signer)
	tasks := map[string]bool{}
	for range 3 {
		id := uuid.Must(uuid.NewV7()).String()
		tasks[id] = true
		sendUnknown(t, m, id)
	}
	eventually(t, 30*time.Second, "every DSN refused with 451 and one tried again", func() bool {
		seen := map[string]int{}
		again := false
		for _, c := range down.Calls() {
			seen[c.TaskID]++
			again = again || seen[c.TaskID] > 1
		}
		return len(seen) == 3 && again
	})
	require.Empty(t, down.Applied())

	// Refusals logged before this one (an earlier -count round) do not count.
	refused := "127.0.0.1[127.0.0.1]:" + strconv.Itoa(postfixRoutes[domain]) + ": Connection refused"
	before := strings.Count(maillog(t), refused)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, r1.Close(ctx))
	eventually(t, 30*time.Second, "Postfix finds the receiver gone and keeps the DSNs", func() bool {
		return strings.Count(maillog(t), refused) > before
	})

	up := &recorder{}
	receiverFor(t, domain, up)
	eventually(t, 30*time.Second, "every DSN applied after the restart", func() bool { return len(up.Applied()) >= 3 })
	got := map[string]bool{}
	for _, a := range up.Applied() {
		require.Equal(t, receipt.Bounced, a.Kind)
		require.Equal(t, "5.1.1", a.Code)
		got[a.TaskID] = true
	}
	require.Equal(t, tasks, got)
}

// An ARF report mailed (through Postfix) to the feedback address at the
// bounce domain names its message by the original's Return-Path: a
// Complained receipt.
func TestPostfixARFIsAComplaint(t *testing.T) {
	t.Parallel()
	startPostfix(t)
	const domain = "b4.h45b.test"
	rec := &recorder{}
	r := receiverFor(t, domain, rec)
	taskID := uuid.Must(uuid.NewV7()).String()
	rp, err := r.signer.Address(taskID)
	require.NoError(t, err)
	raw, err := os.ReadFile(filepath.Join("testdata", "arf-abuse.eml"))
	require.NoError(t, err)
	raw = bytes.ReplaceAll(raw, []byte("bu-aaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb@bounce.example.com"), []byte(rp))
	raw = bytes.ReplaceAll(bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n")), []byte("\n"), []byte("\r\n"))
	require.NoError(t, smtp.SendMail("127.0.0.1:"+strconv.Itoa(postfixPort), nil, "feedback@isp.example", []string{"fbl@" + domain}, raw))
	eventually(t, 30*time.Second, "the complaint applied", func() bool { return len(rec.Applied()) > 0 })
	got := rec.Applied()
	require.Len(t, got, 1)
	require.Equal(t, taskID, got[0].TaskID)
	require.Equal(t, receipt.Complained, got[0].Kind)
	require.Equal(t, receipt.SuppressComplaint, got[0].Suppress)
	require.Equal(t, "dave@isp.example", got[0].Recipient)
}
