package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/redact"
)

// Config configures a connection.
type Config struct {
	// URL is one AMQP URL, or a comma-separated list of them, one per node
	// of a cluster. A connection starts at a random node and, when it is
	// lost or refused, moves on to the next one.
	URL            string
	ConnectionName string        // shown in the management UI
	DialTimeout    time.Duration // per attempt; default 5s
	Heartbeat      time.Duration // default 10s
	ReconnectMin   time.Duration // first backoff; default 100ms
	ReconnectMax   time.Duration // backoff cap; default 10s
	// LeaveAfter is how long the node may leave every publish of this
	// connection unconfirmed before the session leaves it for the next
	// node (see Session.Leave); default 5s, negative never. A node cut
	// off from its peers keeps the connection and its heartbeats alive
	// but confirms nothing a quorum must agree on, and its own partition
	// detection takes net_ticktime (60s) or never comes for a short cut.
	LeaveAfter time.Duration
	Logger     *zap.Logger
}

func (c *Config) setDefaults() {
	c.DialTimeout = cmp.Or(c.DialTimeout, 5*time.Second)
	c.Heartbeat = cmp.Or(c.Heartbeat, 10*time.Second)
	c.ReconnectMin = cmp.Or(c.ReconnectMin, 100*time.Millisecond)
	c.ReconnectMax = cmp.Or(c.ReconnectMax, 10*time.Second)
	c.LeaveAfter = cmp.Or(c.LeaveAfter, 5*time.Second)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
}

// Validate fills defaults and reports the first invalid setting.
func (c *Config) Validate() error {
	c.setDefaults()
	urls := envconf.SplitURLs(c.URL)
	if len(urls) == 0 {
		return errors.New("broker: URL is required")
	}
	for _, u := range urls {
		if _, err := amqp.ParseURI(u); err != nil {
			// ParseURI's errors do not repeat the URL; the node is named
			// by its redacted form.
			return fmt.Errorf("broker: URL %s: %w", redact.Passwords(u), err)
		}
	}
	if c.ReconnectMin > c.ReconnectMax {
		return errors.New("broker: ReconnectMin exceeds ReconnectMax")
	}
	return nil
}

// Dial opens one connection, without supervision: it tries each node once,
// starting at a random one. CLI tools use it; servers use a Session.
func Dial(ctx context.Context, cfg Config) (*amqp.Connection, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	urls := envconf.SplitURLs(cfg.URL)
	start := rand.IntN(len(urls)) //nolint:gosec // spreading load, not a secret
	var errs []error
	for i := range urls {
		c, err := dial(ctx, cfg, urls[(start+i)%len(urls)])
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func dial(ctx context.Context, cfg Config, rawURL string) (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	if cfg.ConnectionName != "" {
		props.SetClientConnectionName(cfg.ConnectionName)
	}
	type result struct {
		c   *amqp.Connection
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := amqp.DialConfig(rawURL, amqp.Config{
			Heartbeat:  cfg.Heartbeat,
			Properties: props,
			Dial:       amqp.DefaultDial(cfg.DialTimeout),
		})
		res <- result{c, err}
	}()
	select {
	case r := <-res:
		if r.err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrUnavailable, hostOf(rawURL), r.err)
		}
		return r.c, nil
	case <-ctx.Done():
		// The dial finishes within DialTimeout; close whatever it returns.
		go func() {
			if r := <-res; r.c != nil {
				_ = r.c.Close()
			}
		}()
		return nil, ctx.Err()
	}
}

// ErrUnavailable means there is no usable broker connection right now.
var ErrUnavailable = errors.New("broker unavailable")

// ErrBlocked means the broker has blocked publishing (memory or disk alarm).
var ErrBlocked = errors.New("broker blocked publishing (resource alarm)")

// Session owns one connection and keeps it alive: it redials with jittered
// exponential backoff whenever the connection closes, until its context ends.
type Session struct {
	cfg Config

	mu    sync.Mutex
	conn  *amqp.Connection
	node  string        // conn's host, for logs
	ready chan struct{} // closed while conn is live

	blocked atomic.Bool
	done    chan struct{}

	// What the publishers tell about the current connection's confirms
	// (see answered and unanswered), and the nodes left (Leave).
	lastConfirm atomic.Int64 // UnixNano of the last confirm, or of the connect
	silentMu    sync.Mutex
	silentSince time.Time // send time of the first publish unconfirmed since lastConfirm
	left        atomic.Pointer[amqp.Connection]
	leaves      atomic.Int64
}

// NewSession validates cfg and returns a Session; call Run to connect.
func NewSession(cfg Config) (*Session, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Session{cfg: cfg, ready: make(chan struct{}), done: make(chan struct{})}, nil
}

// Run connects and reconnects until ctx ends, then closes the connection.
// It returns when the connection is closed.
func (s *Session) Run(ctx context.Context) {
	defer close(s.done)
	log := s.cfg.Logger
	backoff := s.cfg.ReconnectMin
	urls := envconf.SplitURLs(s.cfg.URL)
	// Start at a random node so that replicas spread over the cluster; a
	// lost or refused connection moves on to the next node.
	next := rand.IntN(len(urls)) //nolint:gosec // spreading load, not a secret
	failed := 0
	for {
		node := urls[next%len(urls)]
		next++
		conn, err := dial(ctx, s.cfg, node)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if failed++; failed < len(urls) {
				// Some node is still untried in this round: try the next
				// one at once, back off only after a full round.
				log.Warn("broker connect failed; trying the next node", zap.Error(err))
				continue
			}
			failed = 0
			wait := jitter(backoff)
			log.Warn("broker connect failed; retrying", zap.Error(err), zap.Duration("in", wait))
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			backoff = min(backoff*2, s.cfg.ReconnectMax)
			continue
		}
		backoff, failed = s.cfg.ReconnectMin, 0
		s.lastConfirm.Store(time.Now().UnixNano())
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		blocking := conn.NotifyBlocked(make(chan amqp.Blocking, 4))
		s.blocked.Store(false)
		// Logged before the connection is handed out, so that whoever
		// reads the log after using the session finds the node there.
		log.Info("broker connected", zap.String("node", hostOf(node)), zap.String("server_version", fmt.Sprint(conn.Properties["version"])))
		s.mu.Lock()
		s.conn, s.node = conn, hostOf(node)
		close(s.ready)
		s.mu.Unlock()
		lost := s.watch(ctx, conn, closed, blocking)
		s.mu.Lock()
		s.conn = nil
		s.ready = make(chan struct{})
		s.mu.Unlock()
		s.blocked.Store(false)
		if !lost {
			_ = conn.Close()
			return
		}
		log.Warn("broker connection lost; reconnecting")
	}
}

// watch waits for the connection to close (true) or ctx to end (false),
// draining the blocked notifications meanwhile.
func (s *Session) watch(ctx context.Context, conn *amqp.Connection, closed chan *amqp.Error, blocking chan amqp.Blocking) bool {
	for {
		select {
		case <-ctx.Done():
			// Drain in the background: the library may still write to
			// blocking while Close runs, and an undrained channel deadlocks.
			go func() {
				for range blocking { //nolint:revive // draining is the point
				}
			}()
			return false
		case b, ok := <-blocking:
			if ok {
				s.blocked.Store(b.Active)
				if b.Active {
					s.cfg.Logger.Warn("broker blocked publishing", zap.String("reason", b.Reason))
				} else {
					s.cfg.Logger.Info("broker unblocked publishing")
				}
			}
		case err := <-closed:
			go func() {
				for range blocking { //nolint:revive // draining is the point
				}
			}()
			if err != nil {
				s.cfg.Logger.Warn("broker connection closed", zap.String("reason", err.Reason), zap.Int("code", err.Code))
			}
			return true
		}
	}
}

// Conn waits until a connection is live, or ctx ends.
func (s *Session) Conn(ctx context.Context) (*amqp.Connection, error) {
	for {
		s.mu.Lock()
		conn, ready := s.conn, s.ready
		s.mu.Unlock()
		if conn != nil && !conn.IsClosed() {
			return conn, nil
		}
		select {
		case <-ready:
		case <-s.done:
			return nil, ErrUnavailable
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", ErrUnavailable, ctx.Err())
		}
	}
}

// Current returns the live connection without waiting.
func (s *Session) Current() (*amqp.Connection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == nil || s.conn.IsClosed() {
		return nil, false
	}
	return s.conn, true
}

// Leaves is how many times the session has left a node (see Leave).
func (s *Session) Leaves() int64 { return s.leaves.Load() }

// Blocked reports whether the broker has blocked publishing.
func (s *Session) Blocked() bool { return s.blocked.Load() }

// Done is closed when Run has returned.
func (s *Session) Done() <-chan struct{} { return s.done }

// hostOf names a node in logs and errors without its credentials.
func hostOf(rawURL string) string {
	if u, err := url.Parse(rawURL); err == nil && u.Host != "" {
		return u.Host
	}
	return redact.Passwords(rawURL)
}

func jitter(d time.Duration) time.Duration {
	// ±25% so that many replicas do not reconnect in lockstep.
	return d*3/4 + time.Duration(rand.Int64N(int64(d)/2+1)) //nolint:gosec // jitter, not a secret
}

// answered tells the session that the node confirmed (ack or nack) a
// publish on its connection. It costs one atomic store.
func (s *Session) answered() { s.lastConfirm.Store(time.Now().UnixNano()) }

// unanswered tells the session that a publish (or the opening of its
// channel) sent on conn at sent had no answer when its caller stopped
// waiting. When nothing at all has been answered on conn since the first
// such request of the stretch, and that was LeaveAfter ago, the node is
// not confirming: the session leaves it.
// A slow confirm among others that come is not a reason (a busy queue, a
// leader election), nor is a broker that blocked publishing (a resource
// alarm holds every node alike).
func (s *Session) unanswered(conn *amqp.Connection, sent time.Time) {
	if s.cfg.LeaveAfter < 0 || s.Blocked() {
		return
	}
	last := time.Unix(0, s.lastConfirm.Load())
	if !sent.After(last) {
		return // sent before the last confirm: others were answered since
	}
	s.silentMu.Lock()
	if s.silentSince.Before(last) || sent.Before(s.silentSince) {
		s.silentSince = sent
	}
	silent := time.Since(s.silentSince)
	s.silentMu.Unlock()
	if silent >= s.cfg.LeaveAfter {
		s.Leave(conn, fmt.Sprintf("no publisher confirm for %s", silent.Round(time.Millisecond)))
	}
}

// Leave closes conn, if it is still the session's connection, so that
// the session reconnects to the next node of URL; why is logged. It
// returns whether it did. Whoever finds that the node cannot serve
// (publishes never confirmed, a consume that never answers or fails with
// 541) calls it: RabbitMQ's own partition handling (pause_minority)
// closes a minority node's connections only after net_ticktime, and a
// node cut off for less never does. The close waits at most a second for
// the broker's close-ok, which a node behind a silent network never
// sends; the socket is shut after that.
func (s *Session) Leave(conn *amqp.Connection, why string) bool {
	s.mu.Lock()
	cur, node := s.conn, s.node
	s.mu.Unlock()
	if conn == nil || cur != conn || s.left.Swap(conn) == conn {
		return false
	}
	s.cfg.Logger.Warn("leaving the broker node; reconnecting to the next", zap.String("node", node), zap.String("why", why))
	s.leaves.Add(1)
	go func() { _ = conn.CloseDeadline(time.Now().Add(time.Second)) }()
	return true
}
