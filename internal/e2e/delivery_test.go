package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/smtp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt/verp"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// What comes back after sent, through the real binaries and a real
// Postfix (issue 45). Ports 25255-25256: the bounce package's tests use
// 25250-25254.
const (
	e2ePostfixPort   = 25255
	e2eBounceAddr    = "127.0.0.1:25256"
	e2eMailDomain    = "mx-e2e.msgpulse.test"
	e2eBounceDomain  = "bounce-e2e.msgpulse.test"
	e2eReceiptSecret = "e2e-receipt-secret-0123456789abcdef"
)

// statusSink is a tenant's callbackUrl: it keeps each status it is told.
type statusSink struct {
	*httptest.Server
	mu   sync.Mutex
	seen map[string][]string // taskId → statuses, in order
}

func newStatusSink(t *testing.T) *statusSink {
	s := &statusSink{seen: map[string][]string{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ TaskID, Status string }
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &p) == nil {
			s.mu.Lock()
			s.seen[p.TaskID] = append(s.seen[p.TaskID], p.Status)
			s.mu.Unlock()
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *statusSink) told(taskID, status string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.seen[taskID] {
		if st == status {
			return true
		}
	}
	return false
}

// bounceSystem is a system whose mail goes through a Postfix of its own,
// with VERP return paths at a bounce domain the API receives for.
func bounceSystem(t *testing.T) (*system, *client.Client) {
	t.Helper()
	if testing.Short() {
		t.Skip("e2e: runs the binaries and a Postfix")
	}
	testenv.StartPostfix(t, e2ePostfixPort, e2eMailDomain, map[string]string{e2eBounceDomain: e2eBounceAddr})
	s := newSystem(t, "SMTP_HOST=127.0.0.1", fmt.Sprintf("SMTP_PORT=%d", e2ePostfixPort), "SMTP_FROM=msgpulse <no-reply@msgpulse.test>",
		"RECEIPT_SECRET="+e2eReceiptSecret, "MAIL_BOUNCE_DOMAIN="+e2eBounceDomain,
		"CALLBACK_SECRET=e2e-callback-secret-0123", "CALLBACK_ALLOW_PRIVATE=true")
	_, c := s.api("BOUNCE_SMTP_ADDR="+e2eBounceAddr, "CALLBACK_ALLOW_HTTP=true")
	s.consumer("c1")
	return s, c
}

func notice(ctx context.Context, c *client.Client, to, callbackURL string) (*client.SendResult, error) {
	return c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: to,
		Variables: map[string]string{"title": "t", "content": "c"}, CallbackURL: callbackURL})
}

func statusOf(ctx context.Context, c *client.Client, taskID string) client.Status {
	m, err := c.GetMessage(ctx, taskID)
	if err != nil {
		return ""
	}
	return m.Status
}

// refusedAs asserts err is the API's 422 naming the suppression.
func refusedAs(t *testing.T, err error, want string) {
	t.Helper()
	var ae *client.APIError
	require.True(t, errors.As(err, &ae), "want a 422, got %v", err)
	require.Equal(t, http.StatusUnprocessableEntity, ae.StatusCode, ae.Msg)
	require.Contains(t, ae.Msg, want)
}

// A notice to an address Postfix does not know: Postfix writes its own
// DSN to the message's VERP return path, which routes it to the API's
// bounce receiver. The message becomes bounced with 5.1.1, its callback
// says so, and the address gets neither notices nor codes until its
// suppression is deleted. Forged DSNs change nothing; an ARF report
// marks its message complained.
func TestBounceFromPostfixSuppressesTheAddress(t *testing.T) {
	s, c := bounceSystem(t)
	cb := newStatusSink(t)
	ctx := testenv.Context(t, 3*time.Minute)
	to := "nobody-" + uuid.NewString()[:8] + "@" + e2eMailDomain

	res, err := notice(ctx, c, to, cb.URL)
	require.NoError(t, err)
	start := time.Now()
	testenv.WaitFor(t, 30*time.Second, "the notice bounced", func() bool { return statusOf(ctx, c, res.TaskID) == client.StatusBounced })
	t.Logf("bounced %s after the 202", time.Since(start).Round(time.Millisecond))
	m, err := c.GetMessage(ctx, res.TaskID)
	require.NoError(t, err)
	require.Equal(t, "5.1.1", m.ReceiptCode)
	require.Equal(t, "dsn", m.ReceiptSource)
	testenv.WaitFor(t, 20*time.Second, "the callback told bounced", func() bool { return cb.told(res.TaskID, "bounced") })

	_, err = notice(ctx, c, to, "")
	refusedAs(t, err, "recipient is suppressed: hard bounce 5.1.1")
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: to, Purpose: "login"})
	refusedAs(t, err, "recipient is suppressed: hard bounce 5.1.1")

	require.NoError(t, c.DeleteSuppression(ctx, "email", to, ""))
	_, err = notice(ctx, c, to, "")
	require.NoError(t, err, "after DELETE /api/suppressions/email/<address> the next notice is accepted")

	// A message that was delivered (root is a local user of Postfix's),
	// and reports about it that do not verify: nothing changes.
	ok, err := notice(ctx, c, "root@"+e2eMailDomain, "")
	require.NoError(t, err)
	testenv.WaitFor(t, 30*time.Second, "delivered to root", func() bool { return statusOf(ctx, c, ok.TaskID) == client.StatusSent })
	signer, err := verp.New(e2eReceiptSecret, e2eBounceDomain)
	require.NoError(t, err)
	rp, err := signer.Address(ok.TaskID)
	require.NoError(t, err)
	forged := oneCharChanged(rp)
	require.NoError(t, mailTo(forged, dsn(forged, "root@"+e2eMailDomain)), "a forged bounce is taken and dropped")
	require.NoError(t, mailTo("made-up@"+e2eBounceDomain, dsn("made-up@"+e2eBounceDomain, "root@"+e2eMailDomain)))
	page, err := c.ListSuppressions(ctx, client.SuppressionFilter{Recipient: "root@" + e2eMailDomain})
	require.NoError(t, err)
	require.Empty(t, page.Entries, "a forged bounce suppresses nobody")
	require.Equal(t, client.StatusSent, statusOf(ctx, c, ok.TaskID), "a forged bounce changes no status")

	// The reader marks it as spam: the ISP's ARF report carries the
	// message's headers, its signed Return-Path among them.
	require.NoError(t, mailTo("fbl@"+e2eBounceDomain, arf(rp, "root@"+e2eMailDomain)))
	testenv.WaitFor(t, 20*time.Second, "the complaint applied", func() bool { return statusOf(ctx, c, ok.TaskID) == client.StatusComplained })
	_, err = notice(ctx, c, "root@"+e2eMailDomain, "")
	refusedAs(t, err, "recipient is suppressed: complaint")
	_ = s
}

// oneCharChanged changes the first character of a's local part after its
// "bu-" prefix.
func oneCharChanged(a string) string {
	b := []byte(a)
	i := strings.Index(a, "-") + 1
	if b[i] == 'a' {
		b[i] = 'b'
	} else {
		b[i] = 'a'
	}
	return string(b)
}

// mailTo mails msg to rcpt at the bounce receiver, as an MTA would.
func mailTo(rcpt, msg string) error {
	return smtp.SendMail(e2eBounceAddr, nil, "", []string{rcpt}, []byte(strings.ReplaceAll(msg, "\n", "\r\n")))
}

// dsn is a Postfix-style delivery status notification: to failed 5.1.1.
func dsn(rcpt, failed string) string {
	return `From: MAILER-DAEMON@` + e2eMailDomain + `
To: ` + rcpt + `
Subject: Undelivered Mail Returned to Sender
MIME-Version: 1.0
Content-Type: multipart/report; report-type=delivery-status; boundary="b1"

--b1
Content-Type: text/plain

The mail could not be delivered.

--b1
Content-Type: message/delivery-status

Reporting-MTA: dns; ` + e2eMailDomain + `

Final-Recipient: rfc822; ` + failed + `
Action: failed
Status: 5.1.1
Diagnostic-Code: X-Postfix; unknown user

--b1--
`
}

// arf is an abuse report (RFC 5965) about the message sent to rcpt with
// return path rp.
func arf(rp, rcpt string) string {
	return `From: abuse@isp.example
To: fbl@` + e2eBounceDomain + `
Subject: FW: notice
MIME-Version: 1.0
Content-Type: multipart/report; report-type=feedback-report; boundary="b2"

--b2
Content-Type: text/plain

This is an email abuse report.

--b2
Content-Type: message/feedback-report

Feedback-Type: abuse
User-Agent: e2e/1.0
Version: 1
Original-Rcpt-To: <` + rcpt + `>

--b2
Content-Type: text/rfc822-headers

Return-Path: <` + rp + `>
From: msgpulse <no-reply@msgpulse.test>
To: <` + rcpt + `>
Subject: notice

--b2--
`
}

// mailsWith returns the mails that reached rcpt, in arrival order.
func (s *system) mailsWith(rcpt string) []map[string][]string {
	var out []map[string][]string
	for _, m := range s.mail.Messages() {
		for _, to := range m.To {
			if to == rcpt {
				out = append(out, m.Headers)
			}
		}
	}
	return out
}

// One-click unsubscribe (RFC 8058) with every setting at its default but
// the public URL: a low notice carries the signed link; opening it (as a
// mail client's prefetch does) unsubscribes nobody; a forged one is
// refused; the one-click POST stops notices, and codes still go, without
// the link.
func TestOneClickUnsubscribeStopsNoticesNotCodes(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e: runs the binaries")
	}
	addr := testenv.FreeAddr(t)
	s := newSystem(t, "RECEIPT_SECRET="+e2eReceiptSecret, "PUBLIC_BASE_URL=http://"+addr)
	_, c := s.api("HTTP_ADDR=" + addr)
	s.consumer("c1")
	ctx := testenv.Context(t, 2*time.Minute)
	to := "reader-" + uuid.NewString()[:8] + "@example.com"
	arrived := func(n int) []map[string][]string {
		t.Helper()
		testenv.WaitFor(t, 20*time.Second, fmt.Sprintf("mail %d to %s", n, to), func() bool { return len(s.mailsWith(to)) >= n })
		return s.mailsWith(to)
	}

	_, err := c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: to,
		Variables: map[string]string{"title": "t", "content": "c"}, Level: client.LevelLow})
	require.NoError(t, err)
	low := arrived(1)[0]
	require.Len(t, low["List-Unsubscribe"], 1, "a low notice carries List-Unsubscribe")
	require.Equal(t, []string{"List-Unsubscribe=One-Click"}, low["List-Unsubscribe-Post"])
	link := strings.Trim(low["List-Unsubscribe"][0], "<>")
	require.True(t, strings.HasPrefix(link, "http://"+addr+"/unsubscribe/"), link)

	for range 2 { // a scanner's prefetch, then the reader's look
		resp, err := http.Get(link)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	}
	page, err := c.ListSuppressions(ctx, client.SuppressionFilter{Recipient: to})
	require.NoError(t, err)
	require.Empty(t, page.Entries, "a GET unsubscribes nobody")

	forged := link[:len(link)-1] + map[bool]string{true: "A", false: "B"}[!strings.HasSuffix(link, "A")]
	resp, err := http.Post(forged, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.GreaterOrEqual(t, resp.StatusCode, 400, "a forged token is refused")
	require.Less(t, resp.StatusCode, 500)

	resp, err = http.Post(link, "application/x-www-form-urlencoded", strings.NewReader("List-Unsubscribe=One-Click"))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	page, err = c.ListSuppressions(ctx, client.SuppressionFilter{Recipient: to})
	require.NoError(t, err)
	require.Len(t, page.Entries, 1)
	require.Equal(t, "unsubscribe", page.Entries[0].Reason)

	_, err = c.SendMessage(ctx, client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: to,
		Variables: map[string]string{"title": "t", "content": "c"}, Level: client.LevelLow})
	refusedAs(t, err, "recipient is suppressed: unsubscribed")
	_, err = c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: to, Purpose: "login"})
	require.NoError(t, err, "an unsubscribe stops notices only")
	code := arrived(2)[1]
	require.Empty(t, code["List-Unsubscribe"], "a code carries no List-Unsubscribe")
	require.Empty(t, code["List-Unsubscribe-Post"])
}
