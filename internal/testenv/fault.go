package testenv

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"
)

// Direction is one way through a FaultProxy.
type Direction int

// Directions.
const (
	// Upstream is client to target (requests, publishes, SMTP commands).
	Upstream Direction = iota
	// Downstream is target to client (replies, confirms, deliveries).
	Downstream
)

func (d Direction) String() string {
	if d == Upstream {
		return "upstream"
	}
	return "downstream"
}

// FaultProxy is a TCP proxy that misbehaves on demand, the way a network
// does, without touching the shared service behind it:
//
//   - SetLatency delays every byte in one direction.
//   - Blackhole keeps every connection (and accepts new ones) but forwards
//     nothing, so clients hang until their own timeouts. Bytes are held,
//     not dropped, as TCP retransmission would: after Restore a connection
//     that is still open receives them late and in order.
//   - Cut closes every live connection and refuses new ones (accepted and
//     closed at once: the client reads EOF).
//   - Restore ends a blackhole or a cut and removes any latency.
//
// It is for one component's view of a service (point that component's
// AMQP_URL, REDIS_URL or SMTP_HOST:SMTP_PORT at Addr), so other components
// and other tests keep a healthy path.
type FaultProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	mu        sync.Mutex
	cut       bool
	blackhole bool
	latency   [2]time.Duration
	changed   chan struct{} // closed and replaced on every change, to wake held writers
	conns     map[*faultConn]struct{}
	accepted  int
}

// NewFaultProxy listens on 127.0.0.1 and forwards to target until t ends.
func NewFaultProxy(t testing.TB, target string) *FaultProxy {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testenv: fault proxy listen: %v", err)
	}
	p := &FaultProxy{ln: ln, target: target, changed: make(chan struct{}), conns: map[*faultConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *FaultProxy) Addr() string { return p.ln.Addr().String() }

// Port is the proxy's port.
func (p *FaultProxy) Port() string {
	_, port, _ := net.SplitHostPort(p.Addr())
	return port
}

// SetLatency delays every chunk of bytes read in direction dir by d from
// now on (0 removes it).
func (p *FaultProxy) SetLatency(dir Direction, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latency[dir] = d
	p.notifyLocked()
}

// Blackhole stops forwarding in both directions; connections stay open.
func (p *FaultProxy) Blackhole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = true
	p.notifyLocked()
}

// Cut closes every live connection and refuses new ones until Restore.
func (p *FaultProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	conns := make([]*faultConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// Restore forwards normally again: no cut, no blackhole, no latency.
// Bytes held by a blackhole are delivered now.
func (p *FaultProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.blackhole = false, false
	p.latency = [2]time.Duration{}
	p.notifyLocked()
}

// Live is how many client connections are open through the proxy.
func (p *FaultProxy) Live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Accepted is how many client connections the proxy has forwarded since it
// started (refused ones, during a cut, are not counted).
func (p *FaultProxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accepted
}

func (p *FaultProxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// hold reports whether bytes in flight must wait now, and the channel that
// is closed when that may have changed.
func (p *FaultProxy) hold() (bool, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole, p.changed
}

func (p *FaultProxy) delay(dir Direction) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latency[dir]
}

func (p *FaultProxy) close() {
	_ = p.ln.Close()
	p.Cut()
	p.wg.Wait()
}

func (p *FaultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.cut
		p.mu.Unlock()
		if refuse {
			_ = c.Close()
			continue
		}
		// The target itself is healthy; only the path through the proxy
		// misbehaves, so the upstream side is dialled even in a blackhole.
		up, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(context.Background(), "tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		fc := &faultConn{p: p, client: c, up: up, done: make(chan struct{})}
		p.mu.Lock()
		if p.cut { // cut while dialling
			p.mu.Unlock()
			fc.close()
			continue
		}
		p.conns[fc] = struct{}{}
		p.accepted++
		p.mu.Unlock()
		p.wg.Add(4)
		fc.pipe(Upstream, c, up)
		fc.pipe(Downstream, up, c)
	}
}

// faultConn is one client connection and its upstream connection.
type faultConn struct {
	p          *FaultProxy
	client, up net.Conn
	done       chan struct{}
	once       sync.Once
}

func (c *faultConn) close() {
	c.once.Do(func() {
		close(c.done)
		_ = c.client.Close()
		_ = c.up.Close()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst through a queue: a reader stamps each chunk with
// its due time, a writer waits for it (latency) and for the blackhole to
// lift. The queue is bounded, so a long blackhole pushes back on the
// sender the way a full TCP window does.
func (c *faultConn) pipe(dir Direction, src, dst net.Conn) {
	q := make(chan chunk, 64)
	go func() {
		defer c.p.wg.Done()
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case q <- chunk{b: buf[:n], due: time.Now().Add(c.p.delay(dir))}:
				case <-c.done:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer c.p.wg.Done()
		// Whichever side ends first ends the connection, after what it
		// sent before has been delivered.
		defer c.close()
		for ch := range q {
			if !c.wait(ch.due) {
				return
			}
			if _, err := dst.Write(ch.b); err != nil {
				return
			}
		}
	}()
}

// wait blocks until due has passed and no blackhole holds the bytes; false
// when the connection closed meanwhile.
func (c *faultConn) wait(due time.Time) bool {
	for {
		held, changed := c.p.hold()
		if !held {
			break
		}
		select {
		case <-changed:
		case <-c.done:
			return false
		}
	}
	if d := time.Until(due); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.done:
			return false
		}
	}
	// A blackhole that began during the latency wait holds these bytes too.
	if held, _ := c.p.hold(); held {
		return c.wait(time.Time{})
	}
	return true
}
