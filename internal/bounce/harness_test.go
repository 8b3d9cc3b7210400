package bounce_test

import (
	"bytes"
	"context"
	"errors"
	"net/smtp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/bounce"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/verp"
)

const testSecret = "h45b-test-secret-0123456789abcdef0123"

// recorder is a receipt.Applier that records what it is given; fail, when
// set, is what Apply returns (nil: applied).
type recorder struct {
	mu      sync.Mutex
	calls   []receipt.Receipt // every Apply
	applied []receipt.Receipt // those that returned nil
	fail    func(receipt.Receipt) error
	block   chan struct{} // when set, Apply waits for it to close
}

func (r *recorder) Apply(ctx context.Context, rc receipt.Receipt) error {
	if err := rc.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	r.calls = append(r.calls, rc)
	fail, block := r.fail, r.block
	r.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		if err := fail(rc); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.applied = append(r.applied, rc)
	return nil
}

func (r *recorder) setFail(f func(receipt.Receipt) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = f
}

func (r *recorder) Applied() []receipt.Receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt.Receipt(nil), r.applied...)
}

func (r *recorder) Calls() []receipt.Receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt.Receipt(nil), r.calls...)
}

var errRedisDown = errors.New("redis: connection refused")

// receiver is a running bounce.Server with its signer and its log.
type receiver struct {
	*bounce.Server
	signer *verp.Signer
	rec    *recorder
	logs   *observer.ObservedLogs
}

// startReceiver starts a bounce receiver for domain on addr
// ("127.0.0.1:0" for any port); it is closed when t ends.
func startReceiver(t *testing.T, domain, addr string, rec *recorder, mutate func(*bounce.Config)) *receiver {
	t.Helper()
	signer, err := verp.New(testSecret, domain)
	require.NoError(t, err)
	core, logs := observer.New(zapcore.DebugLevel)
	cfg := bounce.Config{Addr: addr, Signer: signer, Applier: rec, Log: zap.New(core), Timeout: 10 * time.Second}
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := bounce.New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, srv.Close(ctx))
	})
	return &receiver{Server: srv, signer: signer, rec: rec, logs: logs}
}

// discarded is how many mails the receiver read and threw away.
func (r *receiver) discarded() int {
	return r.logs.FilterMessageSnippet("discarded").Len()
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond) // polling with a deadline, not waiting for an outcome
	}
}

// send speaks SMTP to addr: MAIL FROM from, RCPT TO each of to, DATA msg.
// It returns the first refusal.
func send(addr, from string, to []string, msg string) error {
	c, err := smtp.Dial(addr)
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	if err := c.Hello("test.example"); err != nil {
		return err
	}
	if err := c.Mail(from); err != nil {
		return err
	}
	for _, rc := range to {
		if err := c.Rcpt(rc); err != nil {
			return err
		}
	}
	w, err := c.Data()
	if err != nil {
		return err
	}
	if _, err := w.Write([]byte(strings.ReplaceAll(msg, "\n", "\r\n"))); err != nil {
		return err
	}
	if err := w.Close(); err != nil {
		return err
	}
	_ = c.Quit() // the 250 to the final dot delivered it; what follows is manners
	return nil
}

// dsn is a minimal RFC 3464 report for recipient with status.
func dsn(to, recipient, status string) string {
	var b bytes.Buffer
	b.WriteString("From: MAILER-DAEMON@mx.example.org\nTo: " + to + "\nSubject: Undelivered Mail Returned to Sender\n" +
		"MIME-Version: 1.0\nContent-Type: multipart/report; report-type=delivery-status; boundary=\"B\"\n\n" +
		"--B\nContent-Type: text/plain\n\nIt bounced.\n\n--B\nContent-Type: message/delivery-status\n\n" +
		"Reporting-MTA: dns; mx.example.org\n\nFinal-Recipient: rfc822; " + recipient + "\nAction: failed\nStatus: " + status +
		"\nDiagnostic-Code: smtp; 550 " + status + " no such user\n\n--B--\n")
	return b.String()
}
