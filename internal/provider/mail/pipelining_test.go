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
// RCPT TO and DATA go out in one write; otherwise one at a time. With
// CHUNKING offered too and SMTP_CHUNKING on, the message itself goes in
// that write: MAIL FROM, RCPT TO, "BDAT <size> LAST" and the bytes DATA
// would have carried (CRLF line ends, no final dot). Either way no RSET
// follows a completed transaction.
func TestPipeliningSendsTheEnvelopeInOneWrite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                 string
		offered, chunks      bool // PIPELINING, CHUNKING in the EHLO reply
		pipelining, chunking bool // the settings
		batched, bdat        bool
	}{
		{name: "offered and on", offered: true, pipelining: true, chunking: true, batched: true},
		{name: "offered, turned off", offered: true, pipelining: false, chunking: true},
		{name: "not offered", offered: false, pipelining: true, chunking: true},
		{name: "with CHUNKING, on", offered: true, chunks: true, pipelining: true, chunking: true, batched: true, bdat: true},
		{name: "with CHUNKING, turned off", offered: true, chunks: true, pipelining: true, chunking: false, batched: true},
		{name: "with CHUNKING, pipelining turned off", offered: true, chunks: true, pipelining: false, chunking: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := serveFake(t, &fakeSMTP{pipelining: tc.offered, chunking: tc.chunks})
			m := newMailer(t, srv.addr, func(c *Config) { c.Pipelining, c.Chunking = tc.pipelining, tc.chunking })
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

// A refusal inside a pipelined transaction, DATA's or BDAT's, is reported
// at its own stage, as if the commands had gone one by one, and the
// replies after it are read, so the connection stays in step and serves
// the next message (a server reads the chunk of a refused BDAT, RFC 3030
// §3). A server that opens DATA after refusing the envelope loses the
// connection instead: nothing is sent on it. One that takes a BDAT after
// refusing the envelope has ended the transaction itself.
func TestPipelinedRefusals(t *testing.T) {
	t.Parallel()
	// body is the command that carries the message: DATA, or BDAT.
	body := func(cmd string) bool { return cmd == "DATA" || strings.HasPrefix(cmd, "BDAT ") }
	type after struct{ conns, messages int } // the refused message and one more
	for _, tc := range []struct {
		name       string
		reply      func(cmd string, n int) string // n: the MAIL FROM's number
		class      provider.Class
		code       string
		stage      string
		data, bdat after
	}{
		{
			name: "MAIL FROM refused",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "MAIL"):
					return "550 5.7.1 sender blocked"
				case n == 1 && (strings.HasPrefix(cmd, "RCPT") || body(cmd)):
					return "503 5.5.1 bad sequence"
				}
				return ""
			},
			class: provider.Permanent, code: "550", stage: stageMail, data: after{1, 1}, bdat: after{1, 1},
		},
		{
			name: "RCPT TO deferred",
			reply: func(cmd string, n int) string {
				switch {
				case n == 1 && strings.HasPrefix(cmd, "RCPT"):
					return "450 4.2.1 mailbox busy"
				case n == 1 && body(cmd):
					return "554 5.5.1 no valid recipients"
				}
				return ""
			},
			class: provider.Transient, code: "450", stage: stageRcpt, data: after{1, 1}, bdat: after{1, 1},
		},
		{
			name: "the message refused",
			reply: func(cmd string, n int) string {
				if n == 1 && body(cmd) {
					return "451 4.3.0 try later"
				}
				return ""
			},
			class: provider.Transient, code: "451", stage: stageData, data: after{1, 1}, bdat: after{1, 1},
		},
		{
			name: "the message taken after RCPT TO was refused",
			reply: func(cmd string, n int) string {
				if n == 1 && strings.HasPrefix(cmd, "RCPT") {
					return "550 5.1.1 no such user"
				}
				return ""
			},
			class: provider.Permanent, code: "550", stage: stageRcpt, data: after{2, 1}, bdat: after{1, 2},
		},
	} {
		for _, chunking := range []bool{false, true} {
			want, name := tc.data, tc.name+", DATA"
			if chunking {
				want, name = tc.bdat, tc.name+", BDAT"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				srv := newFakeSMTP(t, true, tc.reply)
				if chunking {
					srv = newChunkingSMTP(t, tc.reply)
				}
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
				require.Equal(t, want.messages, messages)
				require.Equal(t, want.conns, conns)
				require.Equal(t, []bool{true, true}, batched)
			})
		}
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
