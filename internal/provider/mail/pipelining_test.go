package mail

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/provider"
)

// fakeSMTP is a scripted SMTP server, for what the mail catcher (go-smtp)
// cannot be made to do: leave PIPELINING out of its EHLO reply, refuse
// MAIL FROM, or misbehave. It records every command and, for each MAIL
// FROM, whether the rest of its envelope had arrived in the same write.
type fakeSMTP struct {
	addr string
	// pipelining: offer PIPELINING. reply, when set, answers a command
	// instead of the usual reply when it returns non-"" (n counts the
	// MAIL FROMs so far, from 1).
	// chunking: offer CHUNKING (BDAT).
	pipelining, chunking bool
	reply                func(cmd string, n int) string

	mu sync.Mutex
	// cmds are the command lines; a BDAT's chunk is not among them.
	cmds []string
	// batched, per MAIL FROM: RCPT TO and DATA, or RCPT TO and BDAT with
	// its whole chunk, were already buffered.
	batched  []bool
	messages int      // transactions completed with the final dot or BDAT LAST
	chunks   []string // every BDAT chunk, as received
	conns    int
}

func newFakeSMTP(t *testing.T, pipelining bool, reply func(cmd string, n int) string) *fakeSMTP {
	t.Helper()
	return serveFake(t, &fakeSMTP{pipelining: pipelining, reply: reply})
}

// newChunkingSMTP offers PIPELINING and CHUNKING.
func newChunkingSMTP(t *testing.T, reply func(cmd string, n int) string) *fakeSMTP {
	t.Helper()
	return serveFake(t, &fakeSMTP{pipelining: true, chunking: true, reply: reply})
}

func serveFake(t *testing.T, f *fakeSMTP) *fakeSMTP {
	t.Helper()
	f.addr = serveTCP(t, func(c net.Conn, _ <-chan struct{}) {
		f.mu.Lock()
		f.conns++
		f.mu.Unlock()
		f.serve(c)
	})
	return f
}

func (f *fakeSMTP) serve(c net.Conn) {
	r, w := bufio.NewReader(c), bufio.NewWriter(c)
	say := func(s string) bool {
		_, _ = w.WriteString(s + "\r\n")
		return w.Flush() == nil
	}
	if !say("220 fake ESMTP") {
		return
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		cmd := strings.TrimRight(line, "\r\n")
		verb := strings.ToUpper(strings.SplitN(cmd, ":", 2)[0])
		verb = strings.SplitN(verb, " ", 2)[0]
		f.mu.Lock()
		f.cmds = append(f.cmds, cmd)
		n := 0
		if verb == "MAIL" {
			rest, _ := r.Peek(r.Buffered())
			f.batched = append(f.batched, strings.Contains(string(rest), "RCPT TO:") && (strings.Contains(string(rest), "DATA\r\n") || wholeChunk(string(rest))))
		}
		for _, c := range f.cmds {
			if strings.HasPrefix(strings.ToUpper(c), "MAIL") {
				n++
			}
		}
		f.mu.Unlock()
		answer := ""
		if f.reply != nil {
			answer = f.reply(cmd, n)
		}
		if answer == "" {
			switch verb {
			case "EHLO":
				answer = "250-fake\r\n250-8BITMIME\r\n"
				if f.pipelining {
					answer += "250-PIPELINING\r\n"
				}
				if f.chunking {
					answer += "250-CHUNKING\r\n"
				}
				answer += "250 ENHANCEDSTATUSCODES"
			case "MAIL":
				answer = "250 2.1.0 ok"
			case "RCPT":
				answer = "250 2.1.5 ok"
			case "DATA":
				answer = "354 go ahead"
			case "BDAT":
				answer = "250 2.0.0 queued as 42"
			case "QUIT":
				say("221 2.0.0 bye")
				return
			default: // RSET, NOOP
				answer = "250 2.0.0 ok"
			}
		}
		if verb == "BDAT" {
			// The chunk follows the command, refused or not (RFC 3030 §3).
			var size int
			if _, err := fmt.Sscanf(cmd, "BDAT %d", &size); err != nil {
				return
			}
			chunk := make([]byte, size)
			if _, err := io.ReadFull(r, chunk); err != nil {
				return
			}
			f.mu.Lock()
			f.chunks = append(f.chunks, string(chunk))
			if strings.HasPrefix(answer, "250") && strings.HasSuffix(cmd, " LAST") {
				f.messages++
			}
			f.mu.Unlock()
		}
		if !say(answer) {
			return
		}
		if verb == "DATA" && strings.HasPrefix(answer, "354") {
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return // dropped mid-message: no mail
				}
				if l == ".\r\n" {
					break
				}
			}
			f.mu.Lock()
			f.messages++
			f.mu.Unlock()
			if !say("250 2.0.0 queued as 42") {
				return
			}
		}
	}
}

// wholeChunk reports whether rest holds a BDAT command and all of its
// chunk.
func wholeChunk(rest string) bool {
	i := strings.Index(rest, "BDAT ")
	if i < 0 {
		return false
	}
	line, after, ok := strings.Cut(rest[i:], "\r\n")
	var size int
	if _, err := fmt.Sscanf(line, "BDAT %d", &size); !ok || err != nil {
		return false
	}
	return len(after) >= size
}

func (f *fakeSMTP) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.chunks...)
}

func (f *fakeSMTP) state() (cmds []string, batched []bool, messages, conns int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.cmds...), append([]bool(nil), f.batched...), f.messages, f.conns
}

// With PIPELINING offered and SMTP_PIPELINING on, a message's MAIL FROM,
// RCPT TO and DATA go out in one write; otherwise one at a time. Either
// way no RSET follows a completed transaction.
func TestPipeliningSendsTheEnvelopeInOneWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		offered, wanted bool
		batched         bool
	}{
		{name: "offered and on", offered: true, wanted: true, batched: true},
		{name: "offered, turned off", offered: true, wanted: false, batched: false},
		{name: "not offered", offered: false, wanted: true, batched: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeSMTP(t, tc.offered, nil)
			m := newMailer(t, srv.addr, func(c *Config) { c.Pipelining = tc.wanted })
			for i := range 3 {
				r, err := m.SendMail(ctx(t), mail(i))
				require.NoError(t, err)
				require.Equal(t, messageID(mail(i).TaskID, "msgpulse.local"), r.MessageID)
			}
			cmds, batched, messages, conns := srv.state()
			require.Equal(t, 3, messages)
			require.Equal(t, 1, conns, "one connection for all three")
			require.Equal(t, []bool{tc.batched, tc.batched, tc.batched}, batched, "commands: %q", cmds)
			for _, c := range cmds {
				require.NotEqual(t, "RSET", c, "no RSET after a completed transaction: %q", cmds)
			}
			require.Contains(t, cmds, "MAIL FROM:<no-reply@msgpulse.local> BODY=8BITMIME", "the same MAIL FROM either way")
		})
	}
}

// A refusal inside a pipelined envelope is reported at its own stage, as
// if the commands had gone one by one, and the replies after it are read,
// so the connection stays in step and serves the next message. A server
// that opens DATA after refusing the envelope loses the connection
// instead: nothing is sent on it.
func TestPipelinedRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		reply     func(cmd string, n int) string // n: the MAIL FROM's number
		class     provider.Class
		code      string
		stage     string
		conns     int // after the refused message and one more
		pipelined bool
	}{
		{
			name: "MAIL FROM refused",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "MAIL"):
					return "550 5.7.1 sender blocked"
				case n == 1 && (strings.HasPrefix(cmd, "RCPT") || cmd == "DATA"):
					return "503 5.5.1 bad sequence"
				}
				return ""
			},
			class: provider.Permanent, code: "550", stage: stageMail, conns: 1,
		},
		{
			name: "RCPT TO deferred",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "RCPT"):
					return "450 4.2.1 mailbox busy"
				case n == 1 && cmd == "DATA":
					return "554 5.5.1 no valid recipients"
				}
				return ""
			},
			class: provider.Transient, code: "450", stage: stageRcpt, conns: 1,
		},
		{
			name: "DATA refused",
			reply: func(cmd string, n int) string {
				if n == 1 && cmd == "DATA" {
					return "451 4.3.0 try later"
				}
				return ""
			},
			class: provider.Transient, code: "451", stage: stageData, conns: 1,
		},
		{
			name: "DATA opened after RCPT TO was refused",
			reply: func(cmd string, n int) string {
				if n == 1 && strings.HasPrefix(cmd, "RCPT") {
					return "550 5.1.1 no such user"
				}
				return ""
			},
			class: provider.Permanent, code: "550", stage: stageRcpt, conns: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeSMTP(t, true, tc.reply)
			m := newMailer(t, srv.addr, nil)
			_, err := m.SendMail(ctx(t), mail(1))
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.code, pe.Code)
			require.Contains(t, pe.Err.Error(), tc.stage)
			_, err = m.SendMail(ctx(t), mail(2))
			require.NoError(t, err)
			_, batched, messages, conns := srv.state()
			require.Equal(t, 1, messages, "only the second message was sent")
			require.Equal(t, tc.conns, conns)
			require.Equal(t, []bool{true, true}, batched)
		})
	}
}

// With CHUNKING and PIPELINING offered and both settings on, a message
// goes in one write: MAIL FROM, RCPT TO, "BDAT <size> LAST" and the message
// itself, byte for byte what DATA would have carried (CRLF line ends, no
// dot-stuffing). Without either, DATA as before.
func TestChunkingSendsTheWholeMessageInOneWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		offered              bool // CHUNKING in the EHLO reply (PIPELINING always)
		chunking, pipelining bool // the settings
		bdat, batched        bool
	}{
		{name: "offered and on", offered: true, chunking: true, pipelining: true, bdat: true, batched: true},
		{name: "offered, turned off", offered: true, chunking: false, pipelining: true, bdat: false, batched: true},
		{name: "offered, pipelining turned off", offered: true, chunking: true, pipelining: false, bdat: false, batched: false},
		{name: "not offered", offered: false, chunking: true, pipelining: true, bdat: false, batched: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newFakeSMTP(t, true, nil)
			if tc.offered {
				srv = newChunkingSMTP(t, nil)
			}
			m := newMailer(t, srv.addr, func(c *Config) { c.Chunking, c.Pipelining = tc.chunking, tc.pipelining })
			for i := range 3 {
				r, err := m.SendMail(ctx(t), mail(i))
				require.NoError(t, err)
				require.Equal(t, messageID(mail(i).TaskID, "msgpulse.local"), r.MessageID)
			}
			cmds, batched, messages, conns := srv.state()
			require.Equal(t, 3, messages)
			require.Equal(t, 1, conns, "one connection for all three")
			require.Equal(t, []bool{tc.batched, tc.batched, tc.batched}, batched, "commands: %q", cmds)
			chunks := srv.sent()
			if !tc.bdat {
				require.Empty(t, chunks)
				require.Contains(t, cmds, "DATA")
				return
			}
			require.NotContains(t, cmds, "DATA")
			require.Len(t, chunks, 3)
			for i, c := range chunks {
				require.Contains(t, cmds, fmt.Sprintf("BDAT %d LAST", len(c)))
				require.Contains(t, c, "Message-ID: <"+messageID(mail(i).TaskID, "msgpulse.local")+">\r\n")
				require.True(t, strings.HasSuffix(c, "\r\n"), "the message ends with a line end")
				require.NotContains(t, strings.ReplaceAll(c, "\r\n", ""), "\n", "no bare line feed")
				require.NotContains(t, c, "\r\n.\r\n", "no final dot")
			}
		})
	}
}

// A refusal in a chunked transaction is reported at its own stage, the
// replies after it are read, and the connection serves the next message:
// the server reads the chunk of a refused BDAT (RFC 3030 §3), so the
// session stays in step.
func TestChunkedRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		reply func(cmd string, n int) string // n: the MAIL FROM's number
		class provider.Class
		code  string
		stage string
	}{
		{
			name: "MAIL FROM refused",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "MAIL"):
					return "550 5.7.1 sender blocked"
				case n == 1 && (strings.HasPrefix(cmd, "RCPT") || strings.HasPrefix(cmd, "BDAT")):
					return "503 5.5.1 bad sequence"
				}
				return ""
			},
			class: provider.Permanent, code: "550", stage: stageMail,
		},
		{
			name: "RCPT TO deferred",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "RCPT"):
					return "450 4.2.1 mailbox busy"
				case n == 1 && strings.HasPrefix(cmd, "BDAT"):
					return "554 5.5.1 no valid recipients"
				}
				return ""
			},
			class: provider.Transient, code: "450", stage: stageRcpt,
		},
		{
			name: "the message refused",
			reply: func(cmd string, n int) string {
				if n == 1 && strings.HasPrefix(cmd, "BDAT") {
					return "552 5.3.4 message too big"
				}
				return ""
			},
			class: provider.Permanent, code: "552", stage: stageData,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := newChunkingSMTP(t, tc.reply)
			m := newMailer(t, srv.addr, nil)
			_, err := m.SendMail(ctx(t), mail(1))
			var pe *provider.Error
			require.ErrorAs(t, err, &pe)
			require.Equal(t, tc.class, pe.Class, "%v", err)
			require.Equal(t, tc.code, pe.Code)
			require.Contains(t, pe.Err.Error(), tc.stage)
			_, err = m.SendMail(ctx(t), mail(2))
			require.NoError(t, err)
			_, batched, messages, conns := srv.state()
			require.Equal(t, 1, messages, "only the second message was sent")
			require.Equal(t, 1, conns, "the connection stayed in step")
			require.Equal(t, []bool{true, true}, batched)
		})
	}
}

func TestCRLF(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"a\r\nb\r\n", "a\r\nb\r\n"},
		{"a\nb\n", "a\r\nb\r\n"},
		{"\n", "\r\n"},
		{"a\r\nb\nc\r", "a\r\nb\r\nc\r"},
		{"\r\n\n", "\r\n\r\n"},
	} {
		require.Equal(t, tc.want, string(crlf([]byte(tc.in))), "%q", tc.in)
	}
}
