package mail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// setup starts a mail catcher and a Mailer pointed at it; both are closed
// when t ends. mutate adjusts the Mailer's Config.
func setup(t *testing.T, catcher mailcatcher.Config, mutate func(*Config)) (*Mailer, *mailcatcher.Server) {
	t.Helper()
	catcher.SMTPAddr = "127.0.0.1:0"
	srv, err := mailcatcher.New(catcher)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Close()) })
	return newMailer(t, srv.Addr(), mutate), srv
}

func newMailer(t *testing.T, addr string, mutate func(*Config)) *Mailer {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Host = host
	cfg.Port, err = strconv.Atoi(port)
	require.NoError(t, err)
	cfg.Timeout = 5 * time.Second
	if mutate != nil {
		mutate(&cfg)
	}
	m, err := New(cfg, zaptest.NewLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func mail(i int) provider.Mail {
	return provider.Mail{
		To:      fmt.Sprintf("user%d@example.com", i),
		Subject: fmt.Sprintf("message %d", i),
		Text:    "text",
		HTML:    "<p>html</p>",
		TaskID:  fmt.Sprintf("task-%d", i),
	}
}

func TestSendMailDelivers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		mail        provider.Mail
		contentType string
		messageID   string
	}{
		{
			name: "text and html",
			mail: provider.Mail{
				To: "Alice <alice@example.com>", Subject: "您的验证码是 482913 — <ok>",
				Text: "Your code is 482913.\nLine two, long enough to need quoted-printable soft line breaks when encoded, surely.\n",
				HTML: "<p>Your code is <b>482913</b> — 验证码</p>", TaskID: "0b9c5a9e-3f7d-4c1e-9a55-2f1d1a7e0c11",
			},
			contentType: "multipart/alternative",
			messageID:   "0b9c5a9e-3f7d-4c1e-9a55-2f1d1a7e0c11@msgpulse.local",
		},
		{
			name:        "text only",
			mail:        provider.Mail{To: "alice@example.com", Subject: "s", Text: "just text\n", TaskID: "t1"},
			contentType: "text/plain",
			messageID:   "t1@msgpulse.local",
		},
		{
			name:        "html only, odd task id",
			mail:        provider.Mail{To: "alice@example.com", Subject: "s", HTML: "<p>x</p>", TaskID: "a b<c>@d"},
			contentType: "text/html",
			messageID:   "a_b_c__d@msgpulse.local",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, srv := setup(t, mailcatcher.Config{}, nil)
			require.Equal(t, "smtp", m.Name())
			rec, err := m.SendMail(ctx(t), tc.mail)
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: "smtp", MessageID: tc.messageID}, rec)

			require.Equal(t, 1, srv.Count())
			got := srv.Messages()[0]
			require.Empty(t, got.ParseError)
			require.Equal(t, "no-reply@msgpulse.local", got.From)
			require.Equal(t, []string{"alice@example.com"}, got.To)
			require.Equal(t, tc.mail.Subject, got.Subject)
			// A single-part body gains the line end that closes it.
			require.Equal(t, strings.TrimSuffix(tc.mail.Text, "\n"), strings.TrimSuffix(got.Text, "\n"))
			require.Equal(t, tc.mail.HTML, strings.TrimSuffix(got.HTML, "\n"))
			require.Equal(t, "<"+tc.messageID+">", got.Header("Message-ID"))
			require.Equal(t, tc.mail.TaskID, got.Header("X-Msgpulse-Task-Id"))
			require.Contains(t, got.Header("From"), "<no-reply@msgpulse.local>")
			require.Contains(t, got.Header("From"), "msgpulse")
			require.Contains(t, got.Header("To"), "<alice@example.com>")
			require.True(t, strings.HasPrefix(got.Header("Content-Type"), tc.contentType), got.Header("Content-Type"))
			require.NotEmpty(t, got.Header("Date"))
		})
	}
}

func TestConnectionReuse(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, nil)
	for i := range 10 {
		_, err := m.SendMail(ctx(t), mail(i))
		require.NoError(t, err)
	}
	require.Equal(t, 10, srv.Count())
	require.Equal(t, 1, srv.Connections(), "sequential sends share one connection")
	for i, got := range srv.Messages() {
		require.Equal(t, []string{fmt.Sprintf("user%d@example.com", i)}, got.To, "a completed transaction leaves nothing behind: no recipient leaks into the next")
	}
}

func TestConcurrentSendsUseAtMostPoolSizeConnections(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, func(c *Config) { c.PoolSize = 3 })
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := m.SendMail(ctx(t), mail(i))
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, n, srv.Count())
	require.LessOrEqual(t, srv.Connections(), 3)
	seen := map[string]bool{}
	for _, got := range srv.Messages() {
		require.Len(t, got.To, 1)
		require.False(t, seen[got.To[0]], "each message exactly once")
		seen[got.To[0]] = true
	}
}

func TestRetriedSendSucceedsAndKeepsConnection(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, nil)
	srv.FailNext(2, 451, "4.3.0 try again later")
	for i, want := range []provider.Class{provider.Transient, provider.Transient, ""} {
		_, err := m.SendMail(ctx(t), mail(1))
		if want == "" {
			require.NoError(t, err, "attempt %d", i+1)
			continue
		}
		require.Equal(t, want, provider.Classify(err), "attempt %d", i+1)
	}
	require.Equal(t, 1, srv.Count())
	require.Equal(t, 2, srv.Rejected())
	require.Equal(t, 1, srv.Connections(), "a 4xx reply leaves the session usable after RSET")
}

func TestStaleConnectionIsRedialled(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, nil)
	_, err := m.SendMail(ctx(t), mail(1))
	require.NoError(t, err)
	srv.CloseConnections() // the server drops the idle pooled connection
	_, err = m.SendMail(ctx(t), mail(2))
	require.NoError(t, err)
	require.Equal(t, 2, srv.Count())
	require.Equal(t, 2, srv.Connections())
}

func TestFailureClassification(t *testing.T) {
	t.Parallel()
	refused := func(t *testing.T) string { // a port nobody listens on
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close())
		return addr
	}
	for _, tc := range []struct {
		name string
		// target returns the Mailer to use.
		target    func(t *testing.T) *Mailer
		mail      provider.Mail
		class     provider.Class
		code      string
		inMessage string
		inError   string
		notInErr  string
	}{
		{
			name: "451 at DATA",
			target: func(t *testing.T) *Mailer {
				m, srv := setup(t, mailcatcher.Config{}, nil)
				srv.FailAlways(451, "4.3.0 mailbox busy")
				return m
			},
			class: provider.Transient, code: "451", inMessage: "mailbox busy",
		},
		{
			name: "421 at DATA",
			target: func(t *testing.T) *Mailer {
				m, srv := setup(t, mailcatcher.Config{}, nil)
				srv.FailAlways(421, "4.4.2 closing")
				return m
			},
			class: provider.Transient, code: "421",
		},
		{
			name: "452 rate limit is throttled",
			target: func(t *testing.T) *Mailer {
				m, srv := setup(t, mailcatcher.Config{}, nil)
				srv.FailAlways(452, "4.5.3 Too many messages, slow down")
				return m
			},
			class: provider.Throttled, code: "452",
		},
		{
			name: "550 at DATA, recipient masked",
			target: func(t *testing.T) *Mailer {
				m, srv := setup(t, mailcatcher.Config{}, nil)
				srv.FailAlways(550, "5.1.1 <User1@Example.com>: mailbox unavailable")
				return m
			},
			class: provider.Permanent, code: "550", inMessage: "<u***1@example.com>: mailbox unavailable", notInErr: "user1@example.com",
		},
		{
			name: "553 at RCPT",
			target: func(t *testing.T) *Mailer {
				m, srv := setup(t, mailcatcher.Config{}, nil)
				srv.SetHook(func(e mailcatcher.Envelope) error {
					if e.Stage == mailcatcher.StageRcpt {
						return mailcatcher.Reject(553, "5.1.3 bad address syntax")
					}
					return nil
				})
				return m
			},
			class: provider.Permanent, code: "553", inMessage: "5.1.3 bad address syntax", inError: "RCPT TO",
		},
		{
			name: "wrong password",
			target: func(t *testing.T) *Mailer {
				m, _ := setup(t, mailcatcher.Config{Username: "u", Password: "right"},
					func(c *Config) { c.Username, c.Password = "u", "wrong" })
				return m
			},
			class: provider.Permanent, code: "535", notInErr: "wrong",
		},
		{
			name: "AUTH not offered",
			target: func(t *testing.T) *Mailer {
				m, _ := setup(t, mailcatcher.Config{}, func(c *Config) { c.Username, c.Password = "u", "p" })
				return m
			},
			class: provider.Permanent, inError: "does not support SMTP AUTH",
		},
		{
			name: "STARTTLS required but not offered",
			target: func(t *testing.T) *Mailer {
				m, _ := setup(t, mailcatcher.Config{}, func(c *Config) { c.TLS = TLSStartTLS })
				return m
			},
			class: provider.Permanent, inError: "does not support STARTTLS",
		},
		{
			name: "implicit TLS against a plain-text server",
			target: func(t *testing.T) *Mailer {
				m, _ := setup(t, mailcatcher.Config{}, func(c *Config) { c.TLS = TLSImplicit })
				return m
			},
			class: provider.Permanent, inError: "tls",
		},
		{
			name: "untrusted certificate",
			target: func(t *testing.T) *Mailer {
				ts := httptest.NewUnstartedServer(http.NotFoundHandler())
				ts.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is the point
				ts.StartTLS()
				t.Cleanup(ts.Close)
				return newMailer(t, ts.Listener.Addr().String(), func(c *Config) { c.TLS = TLSImplicit })
			},
			class: provider.Permanent, inError: "certificate",
		},
		{
			name: "TLS handshake cut short",
			target: func(t *testing.T) *Mailer {
				return newMailer(t, rudeServer(t, 0), func(c *Config) { c.TLS = TLSImplicit })
			},
			class: provider.Transient,
		},
		{
			name:   "server not listening",
			target: func(t *testing.T) *Mailer { return newMailer(t, refused(t), nil) },
			class:  provider.Transient, inError: "connect",
		},
		{
			name: "server closes before greeting",
			target: func(t *testing.T) *Mailer {
				return newMailer(t, rudeServer(t, 0), nil)
			},
			class: provider.Transient,
		},
		{
			name: "server never greets: timeout",
			target: func(t *testing.T) *Mailer {
				return newMailer(t, rudeServer(t, time.Minute), func(c *Config) { c.Timeout = 300 * time.Millisecond })
			},
			class: provider.Transient, inError: "timeout",
		},
		{
			name:   "invalid recipient",
			target: func(t *testing.T) *Mailer { m, _ := setup(t, mailcatcher.Config{}, nil); return m },
			mail:   provider.Mail{To: "not an address", Subject: "s", Text: "t"},
			class:  provider.Permanent, inMessage: "recipient",
		},
		{
			name:   "header injection in subject",
			target: func(t *testing.T) *Mailer { m, _ := setup(t, mailcatcher.Config{}, nil); return m },
			mail:   provider.Mail{To: "a@example.com", Subject: "hi\r\nBcc: x@example.com", Text: "t"},
			class:  provider.Permanent, inMessage: "subject",
		},
		{
			name:   "no body",
			target: func(t *testing.T) *Mailer { m, _ := setup(t, mailcatcher.Config{}, nil); return m },
			mail:   provider.Mail{To: "a@example.com", Subject: "s"},
			class:  provider.Permanent, inMessage: "body",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := tc.target(t)
			msg := tc.mail
			if msg.To == "" {
				msg = mail(1)
			}
			_, err := m.SendMail(ctx(t), msg)
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, "smtp", pe.Provider)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.code, pe.Code)
			require.Contains(t, pe.Message, tc.inMessage)
			// The stage and the underlying error are in the wrapped error.
			require.NotNil(t, pe.Err)
			require.Contains(t, strings.ToLower(pe.Err.Error()), strings.ToLower(tc.inError))
			if tc.notInErr != "" {
				require.NotContains(t, err.Error(), tc.notInErr)
				require.NotContains(t, pe.Message, tc.notInErr)
			}
			switch tc.class {
			case provider.Permanent:
				require.ErrorIs(t, err, provider.ErrPermanent)
			default:
				require.ErrorIs(t, err, provider.ErrTransient)
			}
		})
	}
}

// rudeServer accepts TCP connections and, after hold, closes them without
// a word (hold 0: at once). It stops when the test ends.
func rudeServer(t *testing.T, hold time.Duration) string {
	t.Helper()
	return serveTCP(t, func(_ net.Conn, stop <-chan struct{}) {
		select {
		case <-time.After(hold):
		case <-stop:
		}
	})
}

// serveTCP listens on loopback and runs handle for each connection, in its
// own goroutine, closing the connection when handle returns. When the test
// ends it stops accepting, closes stop and every open connection (a
// handler blocked in a read returns), and waits for the handlers.
func serveTCP(t *testing.T, handle func(c net.Conn, stop <-chan struct{})) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var open sync.Map // net.Conn → struct{}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return // listener closed: the test is over
			}
			open.Store(c, struct{}{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer open.Delete(c)
				defer func() { _ = c.Close() }()
				handle(c, stop)
			}()
		}
	}()
	t.Cleanup(func() {
		close(stop)
		_ = l.Close()
		open.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	return l.Addr().String()
}

func TestContextEndsASlowSend(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, nil)
	release := make(chan struct{})
	// Registered after setup, so it runs before the catcher's Close, which
	// waits for the blocked hook.
	t.Cleanup(func() { close(release) })
	srv.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData {
			<-release
		}
		return nil
	})
	c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := m.SendMail(c, mail(1))
	require.Less(t, time.Since(start), 3*time.Second, "the 5s command timeout was not waited out")
	require.ErrorIs(t, err, provider.ErrTransient)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestSendAfterCloseOrCancel(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, m *Mailer) context.Context
		want  error
	}{
		{"closed", func(t *testing.T, m *Mailer) context.Context {
			require.NoError(t, m.Close())
			return context.Background()
		}, ErrClosed},
		{"cancelled", func(*testing.T, *Mailer) context.Context {
			c, cancel := context.WithCancel(context.Background())
			cancel()
			return c
		}, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, srv := setup(t, mailcatcher.Config{}, nil)
			_, err := m.SendMail(tc.setup(t, m), mail(1))
			require.ErrorIs(t, err, tc.want)
			require.ErrorIs(t, err, provider.ErrTransient)
			require.Equal(t, 0, srv.Count())
		})
	}
}

func TestWaitingForAConnectionHonoursContext(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, func(c *Config) { c.PoolSize = 1 })
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	t.Cleanup(func() { close(release) })
	srv.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData {
			entered <- struct{}{}
			<-release
		}
		return nil
	})
	first := make(chan error, 1)
	go func() { _, err := m.SendMail(ctx(t), mail(1)); first <- err }()
	<-entered // the only connection is now busy

	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := m.SendMail(c, mail(2))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "waiting for a connection")
	require.Equal(t, 1, srv.Connections(), "the pool never opened a second connection")

	srv.SetHook(nil)
	release <- struct{}{}
	require.NoError(t, <-first)
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mutate func(*Config)
		field  string
	}{
		{"defaults", func(*Config) {}, ""},
		{"no host", func(c *Config) { c.Host = "" }, "Host"},
		{"bad host", func(c *Config) { c.Host = "smtp example" }, "Host"},
		{"port 0", func(c *Config) { c.Port = 0 }, "Port"},
		{"port too big", func(c *Config) { c.Port = 70000 }, "Port"},
		{"bad tls", func(c *Config) { c.TLS = "ssl" }, "TLS"},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "Timeout"},
		{"no pool", func(c *Config) { c.PoolSize = 0 }, "PoolSize"},
		{"bad from", func(c *Config) { c.From = "msgpulse" }, "From"},
		{"empty from", func(c *Config) { c.From = "" }, "From"},
		{"from without domain", func(c *Config) { c.From = "a@" }, "From"},
		{"password without user", func(c *Config) { c.Password = "p" }, "Username"},
		{"user without password", func(c *Config) { c.Username = "u" }, "Password"},
		{"password in clear to a remote host", func(c *Config) { c.Host, c.Username, c.Password = "smtp.example.com", "u", "p" }, "TLS"},
		{"password in clear to localhost is fine", func(c *Config) { c.Host, c.Username, c.Password = "localhost", "u", "p" }, ""},
		{"password over starttls", func(c *Config) {
			c.Host, c.Username, c.Password, c.TLS = "smtp.example.com", "u", "p", TLSStartTLS
		}, ""},
		{"helo with space", func(c *Config) { c.HeloName = "a b" }, "HeloName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := DefaultConfig()
			tc.mutate(&cfg)
			err := cfg.Validate()
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			var fe *FieldError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.field, fe.Field)
			_, err = New(cfg, nil)
			require.ErrorAs(t, err, &fe, "New validates too")
		})
	}
}

func TestMessageID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ task, want string }{
		{"0b9c5a9e-3f7d-4c1e", "0b9c5a9e-3f7d-4c1e@d.example"},
		{"a.b", "a_b@d.example"},
		{"ünï<>", "_n___@d.example"},
	} {
		require.Equal(t, tc.want, messageID(tc.task, "d.example"), tc.task)
	}
	a, b := messageID("", "d.example"), messageID("", "d.example")
	require.NotEqual(t, a, b, "no task id: a random one")
	require.True(t, strings.HasSuffix(a, "@d.example"))
}

func TestClassifyContextAndUnknown(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		err   error
		class provider.Class
		is    error
	}{
		{"unknown error is transient", context.Background(), errors.New("weird"), provider.Transient, nil},
		{"cancelled context names the cause", cancelled, errors.New("i/o timeout"), provider.Transient, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pe := classify(tc.ctx, tc.err, "<a@b.c>")
			require.Equal(t, tc.class, pe.Class)
			if tc.is != nil {
				require.ErrorIs(t, pe, tc.is)
			}
		})
	}
}
