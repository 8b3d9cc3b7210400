package bounce

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/verp"
)

// Config configures a Server. Zero bounds take DefaultConfig's.
type Config struct {
	// Addr is host:port to listen on (BOUNCE_SMTP_ADDR); port 0 picks one.
	Addr string
	// Signer verifies the VERP addresses and names the bounce domain, the
	// only domain the server takes mail for.
	Signer *verp.Signer
	// Applier stores what a report says. Required: a receiver that
	// cannot store must not answer 250.
	Applier receipt.Applier
	Log     *zap.Logger
	// Hostname is the name in the greeting; "" = the bounce domain.
	Hostname string
	// MaxMessageBytes bounds a mail (SIZE); larger ones get 552. A DSN
	// carries at most the original's headers or a capped copy (Postfix's
	// bounce_size_limit is 50 kB), an ARF report the whole message.
	MaxMessageBytes int64
	// MaxRecipients bounds RCPT TO per mail.
	MaxRecipients int
	// MaxConnections bounds the connections served at once; one more is
	// answered 421 and closed, and its MTA tries again later.
	MaxConnections int
	// Timeout bounds each read and write on a connection.
	Timeout time.Duration
	// ApplyTimeout bounds one Apply; past it the mail gets 451.
	ApplyTimeout time.Duration
}

// DefaultConfig's bounds.
func DefaultConfig() Config {
	return Config{MaxMessageBytes: 2 << 20, MaxRecipients: 20, MaxConnections: 100,
		Timeout: time.Minute, ApplyTimeout: 10 * time.Second}
}

// ErrNoApplier: New was given no Applier. The receiver refuses to start
// rather than take bounces it cannot store.
var ErrNoApplier = errors.New("bounce: no receipt Applier: the receiver would answer 250 and store nothing")

// Server is a running bounce receiver.
type Server struct {
	cfg    Config
	log    *zap.Logger
	smtp   *smtp.Server
	ln     *capListener
	served chan struct{}

	mu      sync.Mutex
	closing bool
	// inflight counts mails from DATA until their answer is written to
	// the socket (capConn.Write), so Close never cuts a 250 off.
	inflight sync.WaitGroup

	closeOnce sync.Once
	closeErr  error
}

// New listens on cfg.Addr and serves until Close.
func New(cfg Config) (*Server, error) {
	d := DefaultConfig()
	switch {
	case cfg.Applier == nil:
		return nil, ErrNoApplier
	case cfg.Signer == nil:
		return nil, errors.New("bounce: no VERP signer (MAIL_BOUNCE_DOMAIN, RECEIPT_SECRET)")
	case cfg.Addr == "":
		return nil, errors.New("bounce: no address to listen on (BOUNCE_SMTP_ADDR)")
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = d.MaxMessageBytes
	}
	if cfg.MaxRecipients <= 0 {
		cfg.MaxRecipients = d.MaxRecipients
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = d.MaxConnections
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = d.Timeout
	}
	if cfg.ApplyTimeout <= 0 {
		cfg.ApplyTimeout = d.ApplyTimeout
	}
	if cfg.Hostname == "" {
		cfg.Hostname = cfg.Signer.Domain()
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("BOUNCE_SMTP_ADDR: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Log, ln: newCapListener(l, cfg.MaxConnections, cfg.Timeout), served: make(chan struct{})}
	srv := smtp.NewServer(backend{s})
	srv.Domain = cfg.Hostname
	srv.MaxMessageBytes = cfg.MaxMessageBytes
	srv.MaxRecipients = cfg.MaxRecipients
	srv.ReadTimeout = cfg.Timeout
	srv.WriteTimeout = cfg.Timeout
	// Clients that hang up mid-session are the internet's normal; they
	// are not worth a log line each.
	srv.ErrorLog = discardLogger{}
	s.smtp = srv
	go func() {
		defer close(s.served)
		_ = srv.Serve(s.ln) // returns once Close closes the listener
	}()
	s.log.Info("bounce receiver listening", zap.String("addr", s.Addr()), zap.String("domain", cfg.Signer.Domain()))
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops taking connections and mails, lets the mails being read
// or applied finish until ctx ends, then closes every connection. A mail
// cut off by ctx was not answered 250, so its MTA sends it again.
func (s *Server) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closing = true // no inflight.Add from here on
		s.mu.Unlock()
		if err := s.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			s.closeErr = err
		}
		<-s.served
		done := make(chan struct{})
		go func() { s.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.log.Warn("bounce receiver: closing with mails still being applied; their MTAs will send them again", zap.Error(ctx.Err()))
		}
		// Idle sessions and any left over: nothing of theirs was promised.
		_ = s.smtp.Close()
		s.ln.closeConns()
		<-done
	})
	return s.closeErr
}

// begin counts a mail in until its answer is written on cc; false when
// the server is closing.
func (s *Server) begin(cc *capConn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.inflight.Add(1)
	if cc == nil || !cc.answering.CompareAndSwap(false, true) {
		s.inflight.Done() // no socket to watch, or one mail on it already counted
	}
	return true
}

var (
	errClosing = &smtp.SMTPError{Code: 421, EnhancedCode: smtp.EnhancedCode{4, 3, 2}, Message: "Shutting down, try again later"}
	errDomain  = &smtp.SMTPError{Code: 550, EnhancedCode: smtp.EnhancedCode{5, 7, 1}, Message: "Relay access denied: this server takes mail for its bounce domain only"}
	errRetry   = &smtp.SMTPError{Code: 451, EnhancedCode: smtp.EnhancedCode{4, 3, 0}, Message: "Cannot store the report now, try again later"}
	errSyntax  = &smtp.SMTPError{Code: 501, EnhancedCode: smtp.EnhancedCode{5, 1, 3}, Message: "Bad recipient address syntax"}
)

type backend struct{ s *Server }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	cc, _ := c.Conn().(*capConn)
	if cc != nil {
		cc.done = b.s.inflight.Done // before any DATA on it: set once
	}
	return &session{s: b.s, cc: cc}, nil
}

type session struct {
	s     *Server
	cc    *capConn
	rcpts []string // lower-case, as given
}

func (x *session) Reset()        { x.rcpts = x.rcpts[:0] }
func (x *session) Logout() error { return nil }

func (x *session) Mail(string, *smtp.MailOptions) error {
	x.s.mu.Lock()
	closing := x.s.closing
	x.s.mu.Unlock()
	if closing {
		return errClosing
	}
	return nil
}

// Rcpt takes any local part at the bounce domain: a DSN comes to the
// VERP address, but a feedback loop sends its reports to a fixed one
// (fbl@, abuse@), and a forged local part is found out, and discarded,
// once the mail is read, with the same 250 a real one gets.
func (x *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	to = strings.ToLower(strings.TrimSpace(to))
	at := strings.LastIndexByte(to, '@')
	if at < 1 {
		return errSyntax
	}
	if strings.TrimSuffix(to[at+1:], ".") != x.s.cfg.Signer.Domain() {
		return errDomain
	}
	x.rcpts = append(x.rcpts, to)
	return nil
}

func (x *session) Data(r io.Reader) error {
	if !x.s.begin(x.cc) {
		return errClosing
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(r); err != nil {
		return err // go-smtp's 552 for a mail over MaxMessageBytes, or the connection's failure
	}
	return x.s.handle(x.rcpts, buf.Bytes())
}

// handle reads one mail and applies what it says: nil (250) once every
// receipt was applied or named an unknown message, errRetry (451) when
// one could not be stored.
func (s *Server) handle(rcpts []string, msg []byte) error {
	rep, err := Parse(bytes.NewReader(msg))
	if err != nil {
		s.log.Info("bounce receiver: mail discarded: not a report it reads", zap.Error(err), zap.Int("bytes", len(msg)))
		return nil
	}
	var rs []receipt.Receipt
	switch rep.Type {
	case TypeDSN:
		// Only the envelope recipient names the message: a DSN carries
		// the original's headers, but whoever sends one to a made-up
		// address could put anything there.
		for _, taskID := range s.tasks(rcpts) {
			rs = append(rs, DSNReceipts(rep, taskID)...)
		}
	case TypeARF:
		// A complaint names the message through the original headers it
		// carries (the Return-Path is our signed address), or the
		// report's Original-Mail-From; a feedback loop set up to send to
		// the VERP address itself names it by the envelope too.
		cands := []string{rep.Feedback.ReturnPath, rep.Feedback.OriginalMailFrom}
		tasks := s.tasks(append(cands, rcpts...))
		if len(tasks) > 0 {
			if r, ok := ARFReceipt(rep, tasks[0]); ok {
				rs = append(rs, r)
			}
		}
	}
	if len(rs) == 0 {
		s.log.Info("bounce receiver: report discarded: it names no message of ours, or nothing to apply", zap.String("type", rep.Type))
		return nil
	}
	for _, r := range rs {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.ApplyTimeout)
		err := s.cfg.Applier.Apply(ctx, r)
		cancel()
		switch {
		case err == nil:
			s.log.Info("bounce receiver: receipt applied", zap.String("task_id", r.TaskID), zap.String("kind", string(r.Kind)),
				zap.String("code", r.Code), zap.String("source", r.Source))
		case errors.Is(err, receipt.ErrUnknownMessage):
			s.log.Info("bounce receiver: receipt names no message the store knows", zap.String("task_id", r.TaskID), zap.String("kind", string(r.Kind)))
		case errors.Is(err, receipt.ErrInvalid):
			// Sending it again cannot make it valid.
			s.log.Warn("bounce receiver: receipt refused as invalid", zap.String("task_id", r.TaskID), zap.Error(err))
		default:
			s.log.Warn("bounce receiver: receipt not stored; answering 451 so the MTA sends it again", zap.String("task_id", r.TaskID), zap.Error(err))
			return errRetry
		}
	}
	return nil
}

// tasks are the task ids the addresses name, each once, in order; an
// address that does not verify names none.
func (s *Server) tasks(addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if a == "" {
			continue
		}
		id, err := s.cfg.Signer.TaskID(a)
		if err != nil {
			continue
		}
		dup := false
		for _, o := range out {
			dup = dup || o == id
		}
		if !dup {
			out = append(out, id)
		}
	}
	return out
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
func (discardLogger) Println(...any)        {}

// capListener hands out at most max connections at a time; one more is
// told 421 and closed at once, so a flood costs a write, not a goroutine
// held until its timeout.
type capListener struct {
	net.Listener
	timeout time.Duration
	slots   chan struct{}

	mu    sync.Mutex
	conns map[*capConn]struct{}
}

func newCapListener(l net.Listener, max int, timeout time.Duration) *capListener {
	return &capListener{Listener: l, timeout: timeout, slots: make(chan struct{}, max), conns: map[*capConn]struct{}{}}
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.slots <- struct{}{}:
			cc := &capConn{Conn: c, l: l}
			l.mu.Lock()
			l.conns[cc] = struct{}{}
			l.mu.Unlock()
			return cc, nil
		default:
			_ = c.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = io.WriteString(c, "421 4.7.0 Too many connections, try again later\r\n")
			_ = c.Close()
		}
	}
}

// closeConns closes every connection still open.
func (l *capListener) closeConns() {
	l.mu.Lock()
	cs := make([]*capConn, 0, len(l.conns))
	for c := range l.conns {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

type capConn struct {
	net.Conn
	l    *capListener
	once sync.Once
	// answering is set from DATA until the next write, the answer to it;
	// done (Server.inflight.Done) is called then.
	answering atomic.Bool
	done      func()
}

func (c *capConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.answering.CompareAndSwap(true, false) {
		c.done()
	}
	return n, err
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	if c.answering.CompareAndSwap(true, false) {
		c.done() // closed before it answered: nothing was promised
	}
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
		<-c.l.slots
	})
	return err
}
