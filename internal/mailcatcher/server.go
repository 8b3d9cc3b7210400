package mailcatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// Config configures a Server. Zero fields take the defaults of
// DefaultConfig.
type Config struct {
	// SMTPAddr is host:port to listen on; port 0 picks a free port (tests).
	SMTPAddr string
	// Max is how many messages are kept; the oldest go first.
	Max int
	// Domain is the name the server greets with.
	Domain string
	// Username and Password, when Username is set, make AUTH PLAIN
	// mandatory before MAIL FROM. Plain-text AUTH is allowed without TLS:
	// this is a loopback development server.
	Username string
	Password string
	// MaxMessageBytes is the largest message accepted (SIZE).
	MaxMessageBytes int64
	// Timeout bounds each read and write on a connection, so an abandoned
	// client cannot hold a goroutine forever.
	Timeout time.Duration
	// OnMessage, if set, is called with each accepted message on the
	// connection's goroutine before the client gets its 250; it must return
	// promptly.
	OnMessage func(Message)
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		SMTPAddr:        "127.0.0.1:1025",
		Max:             1000,
		Domain:          "mailcatcher.local",
		MaxMessageBytes: 10 << 20,
		Timeout:         time.Minute,
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	c.SMTPAddr = cmp.Or(c.SMTPAddr, d.SMTPAddr)
	c.Max = cmp.Or(c.Max, d.Max)
	c.Domain = cmp.Or(c.Domain, d.Domain)
	c.MaxMessageBytes = cmp.Or(c.MaxMessageBytes, d.MaxMessageBytes)
	c.Timeout = cmp.Or(c.Timeout, d.Timeout)
	return c
}

// Validate reports the first invalid field.
func (c Config) Validate() error {
	switch {
	case c.SMTPAddr == "":
		return errors.New("mailcatcher: SMTPAddr is empty")
	case c.Max < 1:
		return fmt.Errorf("mailcatcher: Max %d: must be at least 1", c.Max)
	case c.MaxMessageBytes < 1:
		return fmt.Errorf("mailcatcher: MaxMessageBytes %d: must be positive", c.MaxMessageBytes)
	case c.Timeout <= 0:
		return fmt.Errorf("mailcatcher: Timeout %s: must be positive", c.Timeout)
	case c.Username == "" && c.Password != "":
		return errors.New("mailcatcher: Password is set but Username is empty")
	}
	if _, _, err := net.SplitHostPort(c.SMTPAddr); err != nil {
		return fmt.Errorf("mailcatcher: SMTPAddr %q: %w", c.SMTPAddr, err)
	}
	return nil
}

// Stage is the SMTP command a hook is consulted for.
type Stage string

// Stages at which a hook runs.
const (
	// StageRcpt: once per RCPT TO; Envelope.To holds the recipients accepted
	// so far plus the one being asked about (last).
	StageRcpt Stage = "rcpt"
	// StageData: after the message was read, before it is stored.
	StageData Stage = "data"
)

// Envelope is what a hook sees.
type Envelope struct {
	Stage      Stage
	From       string
	To         []string
	Username   string // authenticated user, if any
	RemoteAddr string
	Data       []byte // the raw message, at StageData only
}

// Reject returns the error a hook returns to make the server answer with
// code (4xx: try again later, 5xx: give up) and msg. An enhanced status
// code at the start of msg ("5.1.1 unknown user") is sent as such;
// otherwise the server adds a generic one (5.0.0).
func Reject(code int, msg string) error {
	e := &smtp.SMTPError{Code: code, EnhancedCode: smtp.EnhancedCodeNotSet, Message: msg}
	if m := enhancedRE.FindStringSubmatch(msg); m != nil {
		for i := range 3 {
			e.EnhancedCode[i], _ = strconv.Atoi(m[i+1])
		}
		e.Message = m[4]
	}
	return e
}

var enhancedRE = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3}) (.*)$`)

// Server is a running mail catcher.
type Server struct {
	cfg  Config
	smtp *smtp.Server
	ln   *trackingListener

	serveDone chan struct{} // closed when the accept loop has returned
	closeOnce sync.Once
	closeErr  error

	mu         sync.Mutex
	msgs       []Message // oldest first
	nextID     int
	rejected   int
	hook       func(Envelope) error
	failNext   int
	failAlways bool
	failErr    error
}

// New listens on cfg.SMTPAddr and starts serving; Close stops it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", cfg.SMTPAddr)
	if err != nil {
		return nil, fmt.Errorf("mailcatcher: listen on %s: %w", cfg.SMTPAddr, err)
	}
	s := &Server{cfg: cfg, ln: newTrackingListener(l), serveDone: make(chan struct{}), nextID: 1}
	srv := smtp.NewServer(backend{s})
	srv.Domain = cfg.Domain
	srv.MaxMessageBytes = cfg.MaxMessageBytes
	srv.MaxRecipients = 100
	srv.ReadTimeout = cfg.Timeout
	srv.WriteTimeout = cfg.Timeout
	srv.AllowInsecureAuth = true
	// go-smtp logs every client that hangs up uncleanly; for a catcher fed
	// by tests that deliberately break connections this is noise.
	srv.ErrorLog = discardLogger{}
	s.smtp = srv
	go func() {
		defer close(s.serveDone)
		// Serve returns when Close closes the listener; that error is the
		// expected way out, so it is not reported.
		_ = srv.Serve(s.ln)
	}()
	return s, nil
}

// Addr is the address the server listens on (with the real port when
// SMTPAddr asked for port 0).
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, closes every open connection and waits until no
// connection goroutine is left. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.ln.Close()
		<-s.serveDone // no connection can be added after the accept loop ended
		s.ln.closeConns()
		// Shutdown waits for go-smtp's connection goroutines, which end now
		// that their sockets are closed; the bound is a guard against a hook
		// that never returns.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.smtp.Shutdown(ctx); err != nil && !errors.Is(err, smtp.ErrServerClosed) && s.closeErr == nil {
			s.closeErr = err
		}
		if errors.Is(s.closeErr, net.ErrClosed) {
			s.closeErr = nil
		}
	})
	return s.closeErr
}

// Messages returns a copy of the stored messages, oldest first.
func (s *Server) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, len(s.msgs))
	for i, m := range s.msgs {
		out[i] = m.clone()
	}
	return out
}

// Message returns the stored message with this ID.
func (s *Server) Message(id int) (Message, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.msgs {
		if m.ID == id {
			return m.clone(), true
		}
	}
	return Message{}, false
}

// Count is how many messages are stored.
func (s *Server) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.msgs)
}

// Rejected is how many RCPT or DATA commands a hook (or FailNext /
// FailAlways) has refused since the last Reset.
func (s *Server) Rejected() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rejected
}

// Connections is how many SMTP connections have been accepted since start.
// Reset does not clear it: it is how a test sees connection reuse.
func (s *Server) Connections() int { return s.ln.accepted() }

// CloseConnections drops every open client connection without a word, as
// a server does to clients that idle too long; it keeps listening. Tests
// use it to check that a pooled client notices and redials.
func (s *Server) CloseConnections() { s.ln.closeConns() }

// Reset forgets every message, the rejected count and all fault injection.
// Message IDs keep increasing, so a web page open on an old message never
// shows a different one.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.msgs = nil
	s.rejected = 0
	s.hook = nil
	s.failNext, s.failAlways, s.failErr = 0, false, nil
}

// SetHook installs f, called at every RCPT and DATA; a non-nil error
// (use Reject) refuses the command with that reply. nil removes the hook.
func (s *Server) SetHook(f func(Envelope) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = f
}

// FailNext makes the next n messages be refused at DATA with code and msg;
// the one after is accepted (unless FailAlways or a hook says otherwise).
func (s *Server) FailNext(n int, code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failAlways, s.failErr = n, false, Reject(code, msg)
}

// FailAlways makes every message be refused at DATA with code and msg,
// until Reset.
func (s *Server) FailAlways(code int, msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failNext, s.failAlways, s.failErr = 0, true, Reject(code, msg)
}

// check runs fault injection and the hook for e; it counts a refusal.
func (s *Server) check(e Envelope) error {
	s.mu.Lock()
	var err error
	if e.Stage == StageData {
		switch {
		case s.failAlways:
			err = s.failErr
		case s.failNext > 0:
			s.failNext--
			err = s.failErr
		}
	}
	hook := s.hook
	s.mu.Unlock()
	// The hook runs unlocked so it may call back into the Server (Count,
	// FailNext) without deadlocking.
	if err == nil && hook != nil {
		err = hook(e)
	}
	if err != nil {
		s.mu.Lock()
		s.rejected++
		s.mu.Unlock()
	}
	return err
}

func (s *Server) store(m Message) Message {
	s.mu.Lock()
	m.ID = s.nextID
	s.nextID++
	s.msgs = append(s.msgs, m)
	if over := len(s.msgs) - s.cfg.Max; over > 0 {
		s.msgs = slices.Delete(s.msgs, 0, over)
	}
	s.mu.Unlock()
	return m
}

type backend struct{ s *Server }

func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	return &session{s: b.s, remote: c.Conn().RemoteAddr().String()}, nil
}

// session is one SMTP connection's state; go-smtp calls it from that
// connection's goroutine only.
type session struct {
	s      *Server
	remote string
	user   string
	from   string
	to     []string
}

var _ smtp.AuthSession = (*session)(nil)

func (ss *session) AuthMechanisms() []string {
	if ss.s.cfg.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

func (ss *session) Auth(mech string) (sasl.Server, error) {
	if ss.s.cfg.Username == "" || mech != sasl.Plain {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		if identity != "" && identity != username {
			return smtp.ErrAuthFailed
		}
		if username != ss.s.cfg.Username || password != ss.s.cfg.Password {
			return smtp.ErrAuthFailed
		}
		ss.user = username
		return nil
	}), nil
}

func (ss *session) Mail(from string, _ *smtp.MailOptions) error {
	if ss.s.cfg.Username != "" && ss.user == "" {
		return smtp.ErrAuthRequired
	}
	ss.from = from
	return nil
}

func (ss *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	e := ss.envelope(StageRcpt)
	e.To = append(e.To, to)
	if err := ss.s.check(e); err != nil {
		return err
	}
	ss.to = append(ss.to, to)
	return nil
}

func (ss *session) Data(r io.Reader) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	e := ss.envelope(StageData)
	e.Data = raw
	if err := ss.s.check(e); err != nil {
		return err
	}
	m := parseMessage(raw)
	m.From = ss.from
	m.To = slices.Clone(ss.to)
	m.ReceivedAt = time.Now()
	m = ss.s.store(m)
	if f := ss.s.cfg.OnMessage; f != nil {
		f(m.clone())
	}
	return nil
}

func (ss *session) envelope(st Stage) Envelope {
	return Envelope{Stage: st, From: ss.from, To: slices.Clone(ss.to), Username: ss.user, RemoteAddr: ss.remote}
}

func (ss *session) Reset() {
	ss.from = ""
	ss.to = nil
}

func (ss *session) Logout() error { return nil }

// trackingListener counts accepted connections and remembers the open ones
// so Close can end them: go-smtp's Shutdown waits for idle connections
// (a pooled SMTP client keeps one open) and its Close does not wait at all.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	n     int
	conns map[*trackedConn]struct{}
}

func newTrackingListener(l net.Listener) *trackingListener {
	return &trackingListener{Listener: l, conns: map[*trackedConn]struct{}{}}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.n++
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

func (l *trackingListener) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

func (l *trackingListener) closeConns() {
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

type discardLogger struct{}

func (discardLogger) Printf(string, ...any) {}
func (discardLogger) Println(...any)        {}
