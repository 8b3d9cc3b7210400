package mail

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	netmail "net/mail"
	"net/textproto"
	"strconv"
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

	c, reused := m.take()
	for {
		if c == nil {
			var err error
			if c, err = m.dial(ctx); err != nil {
				return provider.Receipt{}, m.fail(ctx, err, rcpt)
			}
			reused = false
		}
		resp, keep, err := m.deliver(ctx, c, msg, rcpt)
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
		return provider.Receipt{}, m.fail(ctx, err, rcpt)
	}
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

// SMTP stages, for error messages and for deciding what a failure means.
const (
	stageWait    = "waiting for a connection"
	stageConnect = "connect"
	stageMail    = "MAIL FROM"
	stageRcpt    = "RCPT TO"
	stageData    = "DATA"
	stageReset   = "RSET"
)

type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// step runs one SMTP command with its own deadline.
func (m *Mailer) step(ctx context.Context, c *conn, stage string, f func() error) error {
	if err := c.nc.SetDeadline(time.Now().Add(m.cfg.Timeout)); err != nil {
		return &stageError{stage, err}
	}
	// Checked after the deadline was extended: a cancellation from now on
	// moves the deadline back into the past; an earlier one shows here.
	if err := ctx.Err(); err != nil {
		return &stageError{stage, err}
	}
	if err := f(); err != nil {
		return &stageError{stage, err}
	}
	return nil
}

// deliver runs one mail transaction on c. keep says whether c is in a
// known, clean state and may be reused.
func (m *Mailer) deliver(ctx context.Context, c *conn, msg *gomail.Msg, rcpt string) (resp string, keep bool, err error) {
	stop := context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false // the abort spoiled the socket's deadline
		}
	}()
	from := "<" + m.from.Address + ">"
	if m.cfg.Pipelining && m.cfg.Chunking && c.pipelining && c.chunking {
		return m.deliverChunked(ctx, c, msg, from, rcpt)
	}
	var w io.WriteCloser
	if m.cfg.Pipelining && c.pipelining {
		w, keep, err = m.openPipelined(ctx, c, from, rcpt)
	} else {
		w, keep, err = m.open(ctx, c, from, rcpt)
	}
	if err != nil {
		return "", keep, err
	}
	if err := m.step(ctx, c, stageData, func() error { _, err := msg.WriteTo(w); return err }); err != nil {
		return "", false, err // cut off mid-message: nothing about the session is known
	}
	if err := m.step(ctx, c, stageData, w.Close); err != nil {
		return "", m.recover(ctx, c, err), err
	}
	if r, ok := w.(interface{ ServerResponse() string }); ok {
		resp = r.ServerResponse()
	}
	// No RSET after it: the reply to the final dot completes the
	// transaction and clears the session's state (RFC 5321 §4.1.1.4), so the
	// next MAIL FROM starts afresh. An RSET here would cost every message
	// a round trip.
	return resp, true, nil
}

// open starts a transaction one command at a time: MAIL FROM, RCPT TO,
// DATA, each waiting for its reply.
func (m *Mailer) open(ctx context.Context, c *conn, from, rcpt string) (io.WriteCloser, bool, error) {
	if err := m.step(ctx, c, stageMail, func() error { return c.sc.Mail(from) }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	if err := m.step(ctx, c, stageRcpt, func() error { return c.sc.Rcpt(rcpt) }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	var w io.WriteCloser
	if err := m.step(ctx, c, stageData, func() (err error) { w, err = c.sc.Data(); return err }); err != nil {
		return nil, m.recover(ctx, c, err), err
	}
	return w, true, nil
}

// deliverChunked runs a whole transaction in one write (RFC 3030 with RFC
// 2920): MAIL FROM, RCPT TO and "BDAT <size> LAST" followed by the message,
// then the three replies in order. DATA must wait for its 354 before the
// message goes; BDAT carries its size instead, so nothing waits, and the
// message costs one round trip instead of two. The message is rendered
// before anything is sent, so a message that cannot be rendered leaves
// the connection untouched.
//
// Refusals are read as in openPipelined. A server that refused MAIL FROM
// or RCPT TO still reads the chunk and refuses BDAT (RFC 3030 §3), so the
// session stays in step; the reply to BDAT LAST ends the transaction
// either way, and the connection is kept if it then accepts RSET. The
// reply to BDAT LAST is the server's acceptance, as the reply to the final
// dot is.
func (m *Mailer) deliverChunked(ctx context.Context, c *conn, msg *gomail.Msg, from, rcpt string) (string, bool, error) {
	if err := addressBreak(from, rcpt); err != nil {
		return "", true, err
	}
	var body bytes.Buffer
	if _, err := msg.WriteTo(&body); err != nil {
		return "", true, &stageError{stage: stageData, err: err}
	}
	// BDAT sends the bytes as they are; DATA's dot writer would have made
	// a bare line feed a line end, so this does too.
	data := crlf(body.Bytes())
	res := m.pipeline(ctx, c, []command{
		{stageMail, "MAIL FROM:" + from + c.mailParams, 250},
		{stageRcpt, "RCPT TO:" + rcpt, 25},
		{stageData, "BDAT " + strconv.Itoa(len(data)) + " LAST", 250},
	}, data)
	switch {
	case res.lost:
		return "", false, res.refused
	case res.refused != nil:
		return "", m.recover(ctx, c, res.refused), res.refused
	}
	return res.last, true, nil
}

// crlf returns b with every line feed not after a carriage return made
// CRLF, as textproto's dot writer does for DATA; b itself when it has none
// (go-mail writes CRLF).
func crlf(b []byte) []byte {
	bare := 0
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			bare++
		}
	}
	if bare == 0 {
		return b
	}
	out := make([]byte, 0, len(b)+bare)
	for i, c := range b {
		if c == '\n' && (i == 0 || b[i-1] != '\r') {
			out = append(out, '\r')
		}
		out = append(out, c)
	}
	return out
}

// openPipelined starts a transaction as RFC 2920 allows: MAIL FROM, RCPT
// TO and DATA in one write, then their three replies in order (pipeline).
func (m *Mailer) openPipelined(ctx context.Context, c *conn, from, rcpt string) (io.WriteCloser, bool, error) {
	if err := addressBreak(from, rcpt); err != nil {
		return nil, true, err
	}
	res := m.pipeline(ctx, c, []command{
		{stageMail, "MAIL FROM:" + from + c.mailParams, 250},
		{stageRcpt, "RCPT TO:" + rcpt, 25},
		{stageData, "DATA", 354},
	}, nil)
	switch {
	case res.lost:
		return nil, false, res.refused
	case res.refused == nil:
	case res.lastOK:
		// A server that refused MAIL or RCPT must refuse DATA too (RFC
		// 2920); one that answered 354 anyway waits for a message, and
		// only dropping the connection ends that without sending one.
		return nil, false, res.refused
	default:
		return nil, m.recover(ctx, c, res.refused), res.refused
	}
	return &dataWriter{c: c, w: c.sc.Text.DotWriter()}, true, nil
}

// addressBreak refuses an address with a line break, which would end its
// command early in a pipelined write. go-mail's Mail and Rcpt refuse these
// too; build never lets one through.
func addressBreak(from, rcpt string) error {
	if strings.ContainsAny(from+rcpt, "\r\n") {
		return &stageError{stage: stageMail, err: errors.New("smtp: a line break in an address")}
	}
	return nil
}

// command is one pipelined SMTP command and the reply it expects.
type command struct {
	stage, line string
	code        int // as go-mail expects them: 25 is any 25x
}

// pipelined is what the replies to a pipelined write said.
type pipelined struct {
	// refused is the first refusal, at its command's stage, as if the
	// commands had gone one by one; when lost, the connection's failure,
	// or a refusal read before it (still the server's word on the
	// message).
	refused error
	lost    bool   // the connection failed: drop it
	lastOK  bool   // the last command was accepted
	last    string // the last reply's text
}

// pipeline writes cmds, then tail, in one write, and reads every reply in
// order whatever the one before said, so the session stays in step.
func (m *Mailer) pipeline(ctx context.Context, c *conn, cmds []command, tail []byte) pipelined {
	if err := m.step(ctx, c, stageMail, func() error {
		for _, cmd := range cmds {
			_, _ = c.sc.Text.W.WriteString(cmd.line)
			_, _ = c.sc.Text.W.WriteString("\r\n")
		}
		_, _ = c.sc.Text.W.Write(tail)
		return c.sc.Text.W.Flush()
	}); err != nil {
		return pipelined{refused: err, lost: true} // cut off mid-write: nothing about the session is known
	}
	var res pipelined
	for _, cmd := range cmds {
		var msg string
		err := m.step(ctx, c, cmd.stage, func() (err error) { _, msg, err = c.sc.Text.ReadResponse(cmd.code); return err })
		res.lastOK, res.last = err == nil, msg
		var te *textproto.Error
		switch {
		case err == nil:
		case !errors.As(err, &te):
			if res.refused == nil {
				res.refused = err
			}
			res.lost = true
			return res
		case res.refused == nil:
			res.refused = err
		}
	}
	return res
}

// mailParams are the MAIL FROM parameters go-mail's Client.Mail adds for
// the server's extensions (see conn.mailParams).
func mailParams(sc *gosmtp.Client) string {
	var p string
	if ok, _ := sc.Extension("8BITMIME"); ok {
		p += " BODY=8BITMIME"
	}
	if ok, _ := sc.Extension("SMTPUTF8"); ok {
		p += " SMTPUTF8"
	}
	return p
}

// dataWriter is the message body of a pipelined transaction: a dot-stuffing
// writer whose Close sends the final dot and reads the reply, as go-mail's
// DataCloser does for Client.Data.
type dataWriter struct {
	c    *conn
	w    io.WriteCloser
	resp string
}

func (d *dataWriter) Write(p []byte) (int, error) { return d.w.Write(p) }

func (d *dataWriter) Close() error {
	if err := d.w.Close(); err != nil {
		return err
	}
	_, resp, err := d.c.sc.Text.ReadResponse(250)
	d.resp = resp
	return err
}

// ServerResponse is the reply to the final dot, once Close returned.
func (d *dataWriter) ServerResponse() string { return d.resp }

// recover returns whether c may be reused after err: only when the server
// answered (the session is in step), did not announce it is closing (421),
// and accepts RSET.
func (m *Mailer) recover(ctx context.Context, c *conn, err error) bool {
	var te *textproto.Error
	if !errors.As(err, &te) || te.Code == 421 {
		return false
	}
	return m.step(ctx, c, stageReset, c.sc.Reset) == nil
}

// isStale: the failure is what a connection the server closed while idle
// looks like on its first command.
func isStale(err error) bool {
	var se *stageError
	if !errors.As(err, &se) || se.stage != stageMail {
		return false
	}
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code == 421
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false // a hung server: redialling would double the wait
	}
	return true
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

func rcptAddr(rcpt string) string { return strings.TrimSuffix(strings.TrimPrefix(rcpt, "<"), ">") }
