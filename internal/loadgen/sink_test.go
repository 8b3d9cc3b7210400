package loadgen

import (
	"bufio"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider/mail"
)

// countingListener counts the writes its connections make to the socket.
type countingListener struct {
	net.Listener
	writes *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, writes: l.writes}, nil
}

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// setupSink serves an SMTP sink whose socket writes are counted, and
// returns a client connection to it past the greeting and EHLO.
func setupSink(t *testing.T) (*textproto.Conn, *Arrivals, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	writes := &atomic.Int64{}
	arr := NewArrivals()
	sink := newSMTPSink(countingListener{Listener: ln, writes: writes}, arr)
	t.Cleanup(sink.Close)

	nc, err := net.Dial("tcp", sink.Addr())
	require.NoError(t, err)
	// A reply held by mistake fails the test here instead of hanging it.
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	c := textproto.NewConn(nc)
	t.Cleanup(func() { _ = c.Close() })
	_, _, err = c.ReadResponse(220)
	require.NoError(t, err)
	require.NoError(t, c.PrintfLine("EHLO client"))
	_, msg, err := c.ReadResponse(250)
	require.NoError(t, err)
	require.Contains(t, msg, "CHUNKING")
	require.Contains(t, msg, "PIPELINING")
	return c, arr, writes
}

// The sink answers a pipelined mail (MAIL, RCPT and BDAT LAST sent in one
// write) with one write, as RFC 2920 lets a server and Postfix does, and
// answers commands sent one at a time as each arrives: a held reply would
// leave that client waiting.
func TestSMTPSinkGroupsPipelinedReplies(t *testing.T) {
	body := mail.TaskHeader + ": %s\r\nSubject: hi\r\n\r\nhello\r\n"
	tests := []struct {
		name      string
		pipelined bool
		writes    int64 // socket writes for the three replies
	}{
		{name: "pipelined", pipelined: true, writes: 1},
		{name: "one at a time", pipelined: false, writes: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, arr, writes := setupSink(t)
			id := "task-" + strings.ReplaceAll(tt.name, " ", "-")
			data := fmt.Sprintf(body, id)
			cmds := []string{
				"MAIL FROM:<a@example.com>\r\n",
				"RCPT TO:<b@example.com>\r\n",
				fmt.Sprintf("BDAT %d LAST\r\n%s", len(data), data),
			}
			writes.Store(0)
			w := bufio.NewWriter(c.W)
			for i, cmd := range cmds {
				_, err := w.WriteString(cmd)
				require.NoError(t, err)
				if !tt.pipelined {
					require.NoError(t, w.Flush())
					_, _, err := c.ReadResponse(250)
					require.NoError(t, err, "reply to command %d", i)
				}
			}
			if tt.pipelined {
				require.NoError(t, w.Flush())
				for i := range cmds {
					_, _, err := c.ReadResponse(250)
					require.NoError(t, err, "reply to command %d", i)
				}
			}
			require.Equal(t, tt.writes, writes.Load())
			require.Equal(t, 1, arr.Count())
			first, dups, noID := arr.Take()
			require.Contains(t, first, id)
			require.Zero(t, dups)
			require.Zero(t, noID)

			// The last reply goes out before the sink closes.
			require.NoError(t, c.PrintfLine("QUIT"))
			_, _, err := c.ReadResponse(221)
			require.NoError(t, err)
		})
	}
}

// A reply longer than groupingMax is not held whole: it goes out as it is
// written, before the server reads again.
func TestGroupingConnFlushesPastItsBound(t *testing.T) {
	server, client := net.Pipe()
	writes := &atomic.Int64{}
	g := &groupingConn{Conn: countingConn{Conn: server, writes: writes}}
	t.Cleanup(func() { _ = g.Close(); _ = client.Close() })

	small := []byte("250 ok\r\n")
	want := groupingMax + len(small)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, want)
		n := 0
		for n < want {
			k, err := client.Read(buf[n:])
			if err != nil {
				break
			}
			n += k
		}
		got <- n
	}()
	_, err := g.Write(small)
	require.NoError(t, err)
	require.Zero(t, writes.Load(), "a small reply waits for the next read")
	_, err = g.Write(make([]byte, groupingMax))
	require.NoError(t, err)
	require.Equal(t, int64(1), writes.Load())
	require.Equal(t, want, <-got)
}
