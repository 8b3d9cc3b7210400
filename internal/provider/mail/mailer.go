package mail

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	netmail "net/mail"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode"

	gomail "github.com/wneessen/go-mail"
	gosmtp "github.com/wneessen/go-mail/smtp"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider"
)

// ProviderName is what Name returns and what every *provider.Error and
// Receipt carries.
const ProviderName = "smtp"

// TaskHeader carries provider.Mail.TaskID, so a message found in a mailbox
// or an MTA log leads back to its task.
const TaskHeader = "X-Msgpulse-Task-Id"

// The one-click unsubscribe headers (RFC 2369, RFC 8058) a notice carries
// when provider.Mail.ListUnsubscribe is set.
const (
	ListUnsubscribe     gomail.Header = "List-Unsubscribe"
	ListUnsubscribePost gomail.Header = "List-Unsubscribe-Post"
)

// maxIdle: a pooled connection idle for longer is closed instead of
// reused. Servers drop idle clients after a while (often well under the
// 5 minutes RFC 5321 asks for); a fresh dial costs less than finding out.
const maxIdle = 30 * time.Second

// Causes (errors.Is) of failures that happen before any SMTP exchange.
var (
	// ErrClosed: the send came after Close.
	ErrClosed = errors.New("smtp mailer is closed")
	// ErrInvalidMail: the message itself cannot be sent (bad recipient,
	// line break in the subject, no body); it is permanent.
	ErrInvalidMail = errors.New("invalid mail")
)

// Mailer sends email over SMTP. It is safe for concurrent use; each
// concurrent SendMail uses its own connection.
type Mailer struct {
	cfg    Config
	log    *zap.Logger
	client *gomail.Client // settings shared by every dial; holds no connection
	from   *netmail.Address
	domain string

	// slots holds one token per connection in use, so at most PoolSize
	// connections are ever open (in use + idle never exceeds it: a new
	// connection is dialled only when no idle one is left).
	slots chan struct{}

	mu     sync.Mutex
	idle   []*conn // most recently used last
	closed bool
}

type conn struct {
	sc       *gosmtp.Client
	nc       net.Conn // the socket under sc, for deadlines and aborts
	lastUsed time.Time
	// pipelining: the server offered PIPELINING in its EHLO reply.
	pipelining bool
	// chunking: the server offers CHUNKING (RFC 3030), BDAT.
	chunking bool
	// mailParams are the MAIL FROM parameters go-mail's Client.Mail adds
	// for the server's extensions, read once from its EHLO reply, so a
	// pipelined MAIL FROM says the same.
	mailParams string
}

var _ provider.Mailer = (*Mailer)(nil)
var _ provider.Closer = (*Mailer)(nil)

// New checks cfg and returns a Mailer; it does not connect until the first
// SendMail, so a mail server that is down does not stop the consumer from
// starting (its messages are retried instead).
func New(cfg Config, log *zap.Logger) (*Mailer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	from, domain, err := parseFrom(cfg.From)
	if err != nil {
		return nil, &FieldError{Field: "From", Msg: err.Error()}
	}
	tlsConf := &tls.Config{ServerName: cfg.Host, MinVersion: tls.VersionTLS12}
	if cfg.TLSConfig != nil {
		tlsConf = cfg.TLSConfig.Clone()
		if tlsConf.ServerName == "" {
			tlsConf.ServerName = cfg.Host
		}
	}
	m := &Mailer{
		cfg:    cfg,
		log:    log.With(zap.String("provider", ProviderName), zap.String("smtp_host", cfg.Host)),
		from:   from,
		domain: domain,
		slots:  make(chan struct{}, cfg.PoolSize),
	}
	opts := []gomail.Option{
		gomail.WithPort(cfg.Port),
		gomail.WithTimeout(cfg.Timeout),
		gomail.WithTLSConfig(tlsConf),
		gomail.WithDialContextFunc(dialer(tlsConf, cfg.TLS == TLSImplicit)),
	}
	if cfg.TLS == TLSStartTLS {
		opts = append(opts, gomail.WithTLSPolicy(gomail.TLSMandatory))
	} else {
		// For TLSImplicit the dialer already speaks TLS; STARTTLS on top
		// would be refused.
		opts = append(opts, gomail.WithTLSPolicy(gomail.NoTLS))
	}
	if cfg.HeloName != "" {
		opts = append(opts, gomail.WithHELO(cfg.HeloName))
	}
	if cfg.Username != "" {
		// PLAIN is what every submission server offers. go-mail sends it
		// only over TLS or to localhost, so a misconfiguration cannot leak
		// the password (Validate already refuses it).
		opts = append(opts, gomail.WithSMTPAuth(gomail.SMTPAuthPlain),
			gomail.WithUsername(cfg.Username), gomail.WithPassword(cfg.Password))
	}
	c, err := gomail.NewClient(cfg.Host, opts...)
	if err != nil {
		return nil, fmt.Errorf("smtp: %w", err)
	}
	m.client = c
	return m, nil
}

// Name is "smtp".
func (m *Mailer) Name() string { return ProviderName }

// SendMail sends one message; a failure is a *provider.Error.
func (m *Mailer) SendMail(ctx context.Context, mail provider.Mail) (provider.Receipt, error) {
	msg, rcpt, id, perr := m.build(mail)
	if perr != nil {
		return provider.Receipt{}, perr
	}
	if err := ctx.Err(); err != nil {
		// Before taking a pooled connection: a send that is over already
		// must not spoil one.
		return provider.Receipt{}, classify(ctx, &stageError{stage: stageWait, err: err}, rcpt)
	}
	if err := m.acquire(ctx); err != nil {
		return provider.Receipt{}, classify(ctx, &stageError{stage: stageWait, err: err}, rcpt)
	}
	defer m.release()
	from := m.envelopeFrom(mail.TaskID)

	c, reused := m.take()
	for {
		if c == nil {
			var err error
			if c, err = m.dial(ctx); err != nil {
				return provider.Receipt{}, m.fail(ctx, err, rcpt)
			}
			reused = false
		}
		resp, keep, err := m.deliver(ctx, c, msg, from, rcpt)
		if keep {
			m.put(c)
		} else {
			_ = c.nc.Close() // state unknown: no QUIT, just drop it
		}
		if err == nil {
			// Check first: the masking below is not free, and this runs
			// for every mail sent.
			if ce := m.log.Check(zap.DebugLevel, "mail accepted"); ce != nil {
				ce.Write(zap.String("to", logging.Mask(rcptAddr(rcpt))),
					zap.String("message_id", id), zap.String("server_response", trimReply(resp, rcpt)))
			}
			return provider.Receipt{Provider: ProviderName, MessageID: id}, nil
		}
		if reused && isStale(err) && ctx.Err() == nil {
			// The server closed the pooled connection while it sat idle,
			// and refused nothing of this message: one redial is the
			// transport retry the provider contract allows.
			m.log.Debug("pooled SMTP connection was closed by the server; redialling", zap.Error(err))
			c = nil
			continue
		}
		return provider.Receipt{}, refused(m.fail(ctx, err, rcpt), err, rcpt)
	}
}

// envelopeFrom is the MAIL FROM of the mail of taskID: its signed VERP
// address when Config.ReturnPath is set, so that a bounce names its
// message; SMTP_FROM's address otherwise, or when the id does not fit in
// one (logged: its bounces cannot be read).
func (m *Mailer) envelopeFrom(taskID string) string {
	if m.cfg.ReturnPath != nil && taskID != "" {
		addr, err := m.cfg.ReturnPath.Address(taskID)
		if err == nil {
			return "<" + addr + ">"
		}
		m.log.Warn("mail keeps SMTP_FROM as its envelope sender: no VERP address for its task id; its bounces will not be read", zap.Error(err))
	}
	return "<" + m.from.Address + ">"
}

func (m *Mailer) fail(ctx context.Context, err error, rcpt string) error {
	pe := classify(ctx, err, rcpt)
	m.log.Debug("mail failed", zap.String("to", logging.Mask(rcptAddr(rcpt))),
		zap.String("class", string(pe.Class)), zap.String("code", pe.Code), zap.Error(pe))
	return pe
}

// Close quits the idle connections. Connections in use are closed by their
// SendMail when it returns; later sends fail with ErrClosed (transient: the
// message belongs to whichever consumer runs next).
func (m *Mailer) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	idle := m.idle
	m.idle = nil
	m.mu.Unlock()
	for _, c := range idle {
		m.quit(c)
	}
	return nil
}

func (m *Mailer) acquire(ctx context.Context) error {
	select {
	case m.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		m.release()
		return ErrClosed
	}
	return nil
}

func (m *Mailer) release() { <-m.slots }

// take returns the most recently used idle connection (the likeliest to
// still be open), closing any that idled too long.
func (m *Mailer) take() (*conn, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for len(m.idle) > 0 {
		c := m.idle[len(m.idle)-1]
		m.idle = m.idle[:len(m.idle)-1]
		if time.Since(c.lastUsed) > maxIdle {
			_ = c.nc.Close()
			continue
		}
		return c, true
	}
	return nil, false
}

func (m *Mailer) put(c *conn) {
	c.lastUsed = time.Now()
	m.mu.Lock()
	if !m.closed {
		m.idle = append(m.idle, c)
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.quit(c)
}

func (m *Mailer) quit(c *conn) {
	_ = c.nc.SetDeadline(time.Now().Add(min(m.cfg.Timeout, 2*time.Second)))
	_ = c.sc.Quit()
	_ = c.nc.Close()
}

type dialSlotKey struct{}

// dialSlot lets dial learn the socket go-mail dials, which go-mail keeps to
// itself: dial needs it to abort on cancellation and to close it when the
// session setup fails (go-mail leaves it open then).
type dialSlot struct {
	ctx  context.Context
	nc   net.Conn
	stop func() bool
}

func dialer(tlsConf *tls.Config, implicitTLS bool) gomail.DialContextFunc {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		var d net.Dialer
		var nc net.Conn
		var err error
		if implicitTLS {
			nc, err = (&tls.Dialer{NetDialer: &d, Config: tlsConf}).DialContext(ctx, network, addr)
		} else {
			nc, err = d.DialContext(ctx, network, addr)
		}
		if err != nil {
			return nil, err
		}
		if s, ok := ctx.Value(dialSlotKey{}).(*dialSlot); ok {
			s.nc = nc
			// go-mail's context covers the dial only; greeting, EHLO,
			// STARTTLS and AUTH must also end when the caller gives up.
			s.stop = context.AfterFunc(s.ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
		}
		return nc, nil
	}
}

func (m *Mailer) dial(ctx context.Context) (*conn, error) {
	slot := &dialSlot{ctx: ctx}
	sc, err := m.client.DialToSMTPClientWithContext(context.WithValue(ctx, dialSlotKey{}, slot))
	if slot.stop != nil && !slot.stop() && err == nil {
		err = ctx.Err() // cancelled just as the setup finished: the socket's deadline is spoiled
	}
	if err != nil {
		if slot.nc != nil {
			_ = slot.nc.Close()
		}
		return nil, &stageError{stage: stageConnect, err: err}
	}
	pipelining, _ := sc.Extension("PIPELINING")
	chunking, _ := sc.Extension("CHUNKING")
	m.log.Debug("SMTP connection opened", zap.Bool("pipelining", pipelining), zap.Bool("chunking", chunking))
	return &conn{sc: sc, nc: slot.nc, lastUsed: time.Now(), pipelining: pipelining, chunking: chunking, mailParams: mailParams(sc)}, nil
}

// build turns m into a go-mail message; bad input is a permanent error,
// since sending it again cannot make it valid.
func (m *Mailer) build(mail provider.Mail) (*gomail.Msg, string, string, error) {
	to, err := netmail.ParseAddress(mail.To)
	if err != nil {
		return nil, "", "", invalid("recipient is not a valid email address")
	}
	switch {
	case hasControl(mail.Subject):
		return nil, "", "", invalid("subject contains a line break or control character")
	case hasControl(mail.TaskID):
		return nil, "", "", invalid("task id contains a line break or control character")
	case mail.Text == "" && mail.HTML == "":
		return nil, "", "", invalid("message has neither a text nor an HTML body")
	case mail.ListUnsubscribe != "" && !oneClickURL(mail.ListUnsubscribe):
		return nil, "", "", invalid("unsubscribe link is not an http(s) URL")
	}
	msg := gomail.NewMsg(gomail.WithNoDefaultUserAgent())
	from := *m.from
	msg.FromMailAddress(&from)
	msg.ToMailAddress(to)
	msg.Subject(mail.Subject)
	msg.SetDate()
	id := messageID(mail.TaskID, m.domain)
	msg.SetMessageIDWithValue(id)
	if mail.TaskID != "" {
		msg.SetGenHeader(gomail.Header(TaskHeader), mail.TaskID)
	}
	msg.SetUserAgent("msgpulse")
	if mail.ListUnsubscribe != "" {
		// RFC 8058: the link, and the POST body a mail client sends to it
		// when the reader presses the client's own unsubscribe button.
		msg.SetGenHeader(ListUnsubscribe, "<"+mail.ListUnsubscribe+">")
		msg.SetGenHeader(ListUnsubscribePost, "List-Unsubscribe=One-Click")
	}
	if m.cfg.DKIM != nil {
		msg.SetDKIM(m.cfg.DKIM.signer())
	}
	switch {
	case mail.Text != "" && mail.HTML != "":
		// Text first: multipart/alternative lists parts from plainest to
		// richest, and a client shows the last one it can render.
		msg.SetBodyString(gomail.TypeTextPlain, mail.Text)
		msg.AddAlternativeString(gomail.TypeTextHTML, mail.HTML)
	case mail.Text != "":
		msg.SetBodyString(gomail.TypeTextPlain, mail.Text)
	default:
		msg.SetBodyString(gomail.TypeTextHTML, mail.HTML)
	}
	return msg, "<" + to.Address + ">", id, nil
}

func invalid(msg string) *provider.Error {
	return &provider.Error{Provider: ProviderName, Class: provider.Permanent, Message: msg,
		Err: fmt.Errorf("%w: %s", ErrInvalidMail, msg)}
}

func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) >= 0
}

// messageID is "<taskID>@<domain of From>" (without the brackets go-mail
// adds), with characters a Message-ID may not hold replaced, so a receiver
// sees the same id for a retried task and can drop the duplicate.
func messageID(taskID, domain string) string {
	left := strings.Map(func(r rune) rune {
		switch {
		case r < 128 && (unicode.IsLetter(r) || unicode.IsDigit(r)), strings.ContainsRune("!#$%&'*+/=?^_`{|}~-", r):
			return r
		}
		return '_'
	}, taskID)
	if len(left) > 128 {
		left = left[:128]
	}
	if left == "" {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		left = hex.EncodeToString(b)
	}
	return left + "@" + domain
}

// oneClickURL: u may stand between the angle brackets of List-Unsubscribe
// (RFC 2369): an absolute http(s) URL with nothing that would end the
// header or the bracket early.
func oneClickURL(u string) bool {
	if hasControl(u) || strings.ContainsAny(u, "<> ,") {
		return false
	}
	p, err := url.Parse(u)
	return err == nil && (p.Scheme == "https" || p.Scheme == "http") && p.Host != ""
}

func rcptAddr(rcpt string) string { return strings.TrimSuffix(strings.TrimPrefix(rcpt, "<"), ">") }
