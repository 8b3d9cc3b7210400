package testenv

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// echoServer answers every line with the same line, like a request/reply
// service would.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, c)
				_ = c.Close()
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

type client struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialProxy(t *testing.T, p *FaultProxy) *client {
	t.Helper()
	c, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", p.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return &client{t: t, c: c, r: bufio.NewReader(c)}
}

// roundTrip sends a line and reads the reply within timeout; it returns
// the reply, how long it took, and the read error.
func (c *client) roundTrip(line string, timeout time.Duration) (string, time.Duration, error) {
	c.t.Helper()
	start := time.Now()
	_, err := c.c.Write([]byte(line + "\n"))
	require.NoError(c.t, err)
	return c.read(start, timeout)
}

func (c *client) read(start time.Time, timeout time.Duration) (string, time.Duration, error) {
	require.NoError(c.t, c.c.SetReadDeadline(time.Now().Add(timeout)))
	s, err := c.r.ReadString('\n')
	return s, time.Since(start), err
}

// requireClosed: the peer closed the connection (EOF, or a reset when it
// closed with bytes unread), as opposed to a stall (deadline exceeded).
func requireClosed(t *testing.T, err error, msg string) {
	t.Helper()
	require.True(t, errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET), "%s: %v", msg, err)
}

func TestFaultProxyForwards(t *testing.T) {
	p := NewFaultProxy(t, echoServer(t))
	c := dialProxy(t, p)
	for _, line := range []string{"one", "two", "three"} {
		got, _, err := c.roundTrip(line, 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, line+"\n", got)
	}
	require.Equal(t, 1, p.Accepted())
	require.Equal(t, 1, p.Live())
}

func TestFaultProxyLatencyPerDirection(t *testing.T) {
	p := NewFaultProxy(t, echoServer(t))
	c := dialProxy(t, p)
	_, base, err := c.roundTrip("warm", 2*time.Second)
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		up, down time.Duration
	}{
		{"upstream only", 300 * time.Millisecond, 0},
		{"downstream only", 0, 200 * time.Millisecond},
		{"both add up", 300 * time.Millisecond, 200 * time.Millisecond},
		{"removed", 0, 0},
	} {
		p.SetLatency(Upstream, tc.up)
		p.SetLatency(Downstream, tc.down)
		got, took, err := c.roundTrip(tc.name, 5*time.Second)
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.name+"\n", got)
		want := tc.up + tc.down
		require.GreaterOrEqual(t, took, want, tc.name)
		// Generous: the bound is there to show the delay is the one asked
		// for, not some multiple of it.
		require.Less(t, took, want+base+time.Second, tc.name)
	}
}

func TestFaultProxyBlackholeStallsThenDeliversInOrder(t *testing.T) {
	p := NewFaultProxy(t, echoServer(t))
	old := dialProxy(t, p)
	_, _, err := old.roundTrip("before", 2*time.Second)
	require.NoError(t, err)

	p.Blackhole()
	_, _, err = old.roundTrip("held-1", 300*time.Millisecond)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "a blackholed connection gets nothing back, not an error: %v", err)
	_, err = old.c.Write([]byte("held-2\n"))
	require.NoError(t, err)
	// New connections are accepted (the client cannot tell) but stall too.
	fresh := dialProxy(t, p)
	_, _, err = fresh.roundTrip("fresh", 300*time.Millisecond)
	require.True(t, errors.Is(err, os.ErrDeadlineExceeded), "%v", err)
	require.Equal(t, 2, p.Live(), "a blackhole closes nothing")

	p.Restore()
	for _, want := range []string{"held-1\n", "held-2\n"} {
		got, _, err := old.read(time.Now(), 2*time.Second)
		require.NoError(t, err)
		require.Equal(t, want, got, "held bytes arrive late, in order")
	}
	got, _, err := fresh.read(time.Now(), 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, "fresh\n", got)
}

func TestFaultProxyCutClosesAndRefusesUntilRestore(t *testing.T) {
	p := NewFaultProxy(t, echoServer(t))
	c := dialProxy(t, p)
	_, _, err := c.roundTrip("before", 2*time.Second)
	require.NoError(t, err)

	p.Cut()
	_, took, err := c.read(time.Now(), 2*time.Second)
	requireClosed(t, err, "a cut connection is closed, not stalled")
	require.Less(t, took, time.Second)
	require.Equal(t, 0, p.Live())

	refused := dialProxy(t, p)
	_, _, err = refused.read(time.Now(), 2*time.Second)
	requireClosed(t, err, "a new connection is closed at once during a cut")
	require.Equal(t, 1, p.Accepted(), "refused connections are not forwarded")

	p.Restore()
	again := dialProxy(t, p)
	got, _, err := again.roundTrip("after", 2*time.Second)
	require.NoError(t, err)
	require.Equal(t, "after\n", got)
	require.Equal(t, 2, p.Accepted())
}

func TestFaultProxyCutEndsABlackhole(t *testing.T) {
	p := NewFaultProxy(t, echoServer(t))
	c := dialProxy(t, p)
	p.Blackhole()
	_, err := c.c.Write([]byte("held\n"))
	require.NoError(t, err)
	p.Cut()
	_, _, err = c.read(time.Now(), 2*time.Second)
	requireClosed(t, err, "held connections are closed by a cut")
	require.Equal(t, 0, p.Live())
}
