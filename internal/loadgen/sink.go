package loadgen

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emersion/go-smtp"

	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
)

// Arrivals records which task ids a sink received, and when first.
type Arrivals struct {
	mu    sync.Mutex
	first map[string]time.Time
	dups  int64
	noID  int64
	n     atomic.Int64 // unique arrivals, readable without the lock
}

// NewArrivals returns an empty record.
func NewArrivals() *Arrivals { return &Arrivals{first: map[string]time.Time{}} }

// Add records one arrival of id at at.
func (a *Arrivals) Add(id string, at time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if id == "" {
		a.noID++
		return
	}
	if _, ok := a.first[id]; ok {
		a.dups++
		return
	}
	a.first[id] = at
	a.n.Add(1)
}

// At returns when id first arrived.
func (a *Arrivals) At(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.first[id]
	return t, ok
}

// Count is the number of distinct ids received.
func (a *Arrivals) Count() int { return int(a.n.Load()) }

// Take returns the arrivals so far and forgets them.
func (a *Arrivals) Take() (first map[string]time.Time, dups, noID int64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first, dups, noID = a.first, a.dups, a.noID
	a.first, a.dups, a.noID = map[string]time.Time{}, 0, 0
	a.n.Store(0)
	return first, dups, noID
}

// SMTPSink is a lean SMTP server that keeps nothing but the task id header
// of each message and its arrival time: a mail catcher that parses MIME
// would measure itself.
type SMTPSink struct {
	srv     *smtp.Server
	ln      net.Listener
	arr     *Arrivals
	done    chan struct{}
	latency atomic.Int64 // ns each DATA takes after its arrival is recorded
}

// SetLatency makes every mail take d after it arrived, like a slow SMTP
// server: the sender's connection is busy for that long.
func (s *SMTPSink) SetLatency(d time.Duration) { s.latency.Store(int64(d)) }

// NewSMTPSink listens on a free loopback port.
func NewSMTPSink(arr *Arrivals) (*SMTPSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	return newSMTPSink(ln, arr), nil
}

// newSMTPSink serves on ln, grouping each connection's replies.
func newSMTPSink(ln net.Listener, arr *Arrivals) *SMTPSink {
	s := &SMTPSink{ln: ln, arr: arr, done: make(chan struct{})}
	ln = groupingListener{ln}
	s.srv = smtp.NewServer(smtp.BackendFunc(func(*smtp.Conn) (smtp.Session, error) { return &sinkSession{arr: arr, latency: &s.latency}, nil }))
	s.srv.Domain = "loadgen.sink"
	s.srv.ReadTimeout, s.srv.WriteTimeout = time.Minute, time.Minute
	s.srv.MaxRecipients = 10
	s.srv.ErrorLog = quietLog{}
	go func() { defer close(s.done); _ = s.srv.Serve(ln) }()
	return s
}

// Addr is host:port.
func (s *SMTPSink) Addr() string { return s.ln.Addr().String() }

// Close stops the server and its connections.
func (s *SMTPSink) Close() {
	_ = s.srv.Close()
	<-s.done
}

// groupingListener's connections group the server's replies the way
// RFC 2920 (PIPELINING, section 3.2) allows and Postfix's smtpd does:
// replies wait while commands the client sent together are still being
// read, and all go out together as soon as the server waits for more
// input. go-smtp flushes every reply line on its own, so without this a
// pipelined mail (MAIL, RCPT and BDAT LAST in one write) is answered with
// three writes here and up to three reads in the consumer: work a real
// server does not make the machine do, charged to the system measured.
type groupingListener struct{ net.Listener }

func (l groupingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &groupingConn{Conn: c}, nil
}

// groupingConn holds what is written until the next Read or Close, or
// until groupingMax bytes wait. The server reads only when the commands it
// already has are answered (go-smtp reads through a bufio.Reader, which
// reads the connection only once it is empty), so a held reply waits for
// no one: RFC 2920's "send all pending responses immediately whenever the
// local TCP input buffer is emptied".
type groupingConn struct {
	net.Conn
	mu  sync.Mutex
	out []byte
}

const groupingMax = 32 << 10

func (c *groupingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, p...)
	if len(c.out) >= groupingMax {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (c *groupingConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	err := c.flushLocked()
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Read(p)
}

func (c *groupingConn) Close() error {
	c.mu.Lock()
	_ = c.flushLocked() // the last reply (221) still goes out; a dead peer is no error here
	c.mu.Unlock()
	return c.Conn.Close()
}

// flushLocked writes what is held. A write error is returned to whichever
// call flushed (go-smtp's next read or write then ends the session), as a
// failed write would have been.
func (c *groupingConn) flushLocked() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.out)
	c.out = c.out[:0]
	return err
}

type sinkSession struct {
	arr     *Arrivals
	latency *atomic.Int64
}

func (*sinkSession) Reset()                               {}
func (*sinkSession) Logout() error                        { return nil }
func (*sinkSession) Mail(string, *smtp.MailOptions) error { return nil }
func (*sinkSession) Rcpt(string, *smtp.RcptOptions) error { return nil }

func (ss *sinkSession) Data(r io.Reader) error {
	br := bufio.NewReader(r)
	h, err := textproto.NewReader(br).ReadMIMEHeader()
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	ss.arr.Add(h.Get(mail.TaskHeader), time.Now())
	_, err = io.Copy(io.Discard, br)
	if d := time.Duration(ss.latency.Load()); d > 0 {
		time.Sleep(d) // a slow server answering DATA, not waiting for an outcome
	}
	return err
}

type quietLog struct{}

func (quietLog) Printf(string, ...any) {}
func (quietLog) Println(...any)        {}

// WebhookSink receives what the SMS webhook provider posts, checks its
// signature, and answers 200 after Latency, as a vendor API would.
type WebhookSink struct {
	Secret  string
	latency time.Duration
	arr     *Arrivals
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}
	badSig  atomic.Int64
}

// NewWebhookSink listens on a free loopback port.
func NewWebhookSink(arr *Arrivals, latency time.Duration) (*WebhookSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &WebhookSink{Secret: "loadgen-webhook-secret-" + randomID(), latency: latency, arr: arr, ln: ln, done: make(chan struct{})}
	w.srv = &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(w.done); _ = w.srv.Serve(ln) }()
	return w, nil
}

// URL is where the provider posts.
func (w *WebhookSink) URL() string { return "http://" + w.ln.Addr().String() + "/sms" }

// BadSignatures counts requests whose signature did not verify.
func (w *WebhookSink) BadSignatures() int64 { return w.badSig.Load() }

// Close stops the server.
func (w *WebhookSink) Close() {
	_ = w.srv.Close()
	<-w.done
}

func (w *WebhookSink) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	if err := sms.VerifyWebhookSignature(w.Secret, r.Header.Get(sms.WebhookTimestampHeader), body, r.Header.Get(sms.WebhookSignatureHeader)); err != nil {
		w.badSig.Add(1)
		http.Error(rw, err.Error(), http.StatusUnauthorized)
		return
	}
	var p struct {
		TaskID string `json:"taskId"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	// The vendor's own time per send: simulated, not an outcome waited on.
	if w.latency > 0 && !pace(r.Context(), w.latency) {
		return
	}
	w.arr.Add(p.TaskID, time.Now())
	rw.Header().Set("Content-Type", "application/json")
	_, _ = fmt.Fprintf(rw, `{"messageId":"sink-%s"}`, p.TaskID)
}

// waitCount polls until count() reaches n, ctx ends, or within passes.
func waitCount(ctx context.Context, n int, within time.Duration, count func() int, alive func() error) error {
	deadline := time.Now().Add(within)
	for count() < n {
		if err := alive(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d arrived within %s", count(), n, within)
		}
		if !pace(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return nil
}

// WeComSink stands in for the WeCom server API: gettoken hands out one
// token, message/send records each userid of touser as an arrival and
// answers errcode 0 after Latency, as WeCom would.
type WeComSink struct {
	latency time.Duration
	arr     *Arrivals
	srv     *http.Server
	ln      net.Listener
	done    chan struct{}
}

// NewWeComSink listens on a free loopback port.
func NewWeComSink(arr *Arrivals, latency time.Duration) (*WeComSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	w := &WeComSink{latency: latency, arr: arr, ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /cgi-bin/gettoken", func(rw http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(rw, `{"errcode":0,"errmsg":"ok","access_token":"loadgen-token","expires_in":7200}`)
	})
	mux.HandleFunc("POST /cgi-bin/message/send", w.send)
	w.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { defer close(w.done); _ = w.srv.Serve(ln) }()
	return w, nil
}

// URL is the API base.
func (w *WeComSink) URL() string { return "http://" + w.ln.Addr().String() }

// Close stops the server.
func (w *WeComSink) Close() {
	_ = w.srv.Close()
	<-w.done
}

func (w *WeComSink) send(rw http.ResponseWriter, r *http.Request) {
	var p struct {
		ToUser string `json:"touser"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&p); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	// WeCom's own time per call: simulated, not an outcome waited on.
	if w.latency > 0 && !pace(r.Context(), w.latency) {
		return
	}
	now := time.Now()
	for _, u := range strings.Split(p.ToUser, "|") {
		w.arr.Add(u, now)
	}
	rw.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(rw, `{"errcode":0,"errmsg":"ok","invaliduser":"","msgid":"sink"}`)
}
