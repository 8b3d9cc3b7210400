package mailcatcher

import (
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
	"github.com/stretchr/testify/require"
)

// setup starts a catcher on a free loopback port, closed when t ends.
func setup(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.SMTPAddr == "" {
		cfg.SMTPAddr = "127.0.0.1:0"
	}
	s, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

// send delivers raw over one SMTP connection, as a real client would.
func send(t *testing.T, addr string, auth sasl.Client, from string, to []string, raw string) error {
	t.Helper()
	c, err := smtp.Dial(addr)
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	if auth != nil {
		if err := c.Auth(auth); err != nil {
			return err
		}
	}
	if err := c.SendMail(from, to, strings.NewReader(raw)); err != nil {
		return err
	}
	return c.Quit()
}

func crlf(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }

const alternative = `From: msgpulse <no-reply@msgpulse.local>
To: alice@example.com
Subject: =?UTF-8?q?Your_code_=E2=80=94_1234?=
Message-ID: <task-1@msgpulse.local>
MIME-Version: 1.0
Content-Type: multipart/alternative; boundary="b1"

--b1
Content-Type: text/plain; charset=UTF-8
Content-Transfer-Encoding: quoted-printable

Your code is 1234 =E2=80=94 expires soon, and this line is long enough to b=
e wrapped.
--b1
Content-Type: text/html; charset=UTF-8
Content-Transfer-Encoding: base64

PHA+WW91ciBjb2RlIGlzIDxiPjEyMzQ8L2I+PC9wPg==
--b1--
`

func TestReceiveAndParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                string
		raw                 string
		subject, text, html string
		header, headerValue string
		parseErrorContains  string
		rawContains         string
		from                string
		to                  []string
	}{
		{
			name: "multipart alternative", raw: alternative,
			from: "no-reply@msgpulse.local", to: []string{"alice@example.com"},
			subject: "Your code — 1234",
			text:    "Your code is 1234 — expires soon, and this line is long enough to be wrapped.",
			html:    "<p>Your code is <b>1234</b></p>",
			header:  "message-id", headerValue: "<task-1@msgpulse.local>",
		},
		{
			name: "plain text without content type", raw: "Subject: hi\n\nline 1\nline 2\n",
			from: "a@x", to: []string{"b@y", "c@y"},
			subject: "hi", text: "line 1\nline 2\n",
		},
		{
			name: "html only nested in mixed", raw: `Subject: nested
Content-Type: multipart/mixed; boundary=outer

--outer
Content-Type: multipart/alternative; boundary=inner

--inner
Content-Type: text/html

<h1>x</h1>
--inner--
--outer
Content-Type: application/pdf
Content-Transfer-Encoding: base64

JVBERi0=
--outer--
`,
			from: "a@x", to: []string{"b@y"},
			subject: "nested", html: "<h1>x</h1>",
		},
		{
			name: "malformed content type is kept raw", raw: "Subject: broken\nContent-Type: multipart/alternative; boundary\n\nbody\n",
			from: "a@x", to: []string{"b@y"},
			subject: "broken", parseErrorContains: "content type", rawContains: "body",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, Config{})
			before := time.Now()
			require.NoError(t, send(t, s.Addr(), nil, tc.from, tc.to, crlf(tc.raw)))
			require.Equal(t, 1, s.Count(), "the 250 comes after the message is stored")
			m := s.Messages()[0]
			require.Equal(t, 1, m.ID)
			require.Equal(t, tc.from, m.From)
			require.Equal(t, tc.to, m.To)
			require.Equal(t, tc.subject, m.Subject)
			require.Equal(t, tc.text, m.Text)
			require.Equal(t, tc.html, m.HTML)
			if tc.header != "" {
				require.Equal(t, tc.headerValue, m.Header(tc.header))
			}
			if tc.parseErrorContains != "" {
				require.Contains(t, m.ParseError, tc.parseErrorContains)
			} else {
				require.Empty(t, m.ParseError)
			}
			require.Contains(t, m.Raw, tc.rawContains)
			require.False(t, m.ReceivedAt.Before(before))
		})
	}
}

func TestMaxKeepsNewest(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{Max: 3})
	for i := range 5 {
		require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{"b@y"}, crlf("Subject: m"+string(rune('1'+i))+"\n\nx\n")))
	}
	msgs := s.Messages()
	require.Len(t, msgs, 3)
	for i, m := range msgs {
		require.Equal(t, i+3, m.ID)
		require.Equal(t, "m"+string(rune('3'+i)), m.Subject)
	}
	_, ok := s.Message(1)
	require.False(t, ok, "dropped messages are gone")
	m, ok := s.Message(5)
	require.True(t, ok)
	require.Equal(t, "m5", m.Subject)
}

func TestFaultInjection(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		arrange  func(*Server)
		to       []string
		attempts int
		want     []int // SMTP code per attempt, 0 = accepted
		rejected int
		stored   int
	}{
		{
			name: "451 twice then accept", arrange: func(s *Server) { s.FailNext(2, 451, "try later") },
			attempts: 3, want: []int{451, 451, 0}, rejected: 2, stored: 1,
		},
		{
			name: "always 550", arrange: func(s *Server) { s.FailAlways(550, "no such user") },
			attempts: 3, want: []int{550, 550, 550}, rejected: 3, stored: 0,
		},
		{
			name: "hook refuses one recipient at RCPT",
			arrange: func(s *Server) {
				s.SetHook(func(e Envelope) error {
					if e.Stage == StageRcpt && e.To[len(e.To)-1] == "bad@y" {
						return Reject(550, "5.1.1 unknown recipient")
					}
					return nil
				})
			},
			to: []string{"bad@y"}, attempts: 1, want: []int{550}, rejected: 1, stored: 0,
		},
		{
			name: "hook sees the message at DATA",
			arrange: func(s *Server) {
				s.SetHook(func(e Envelope) error {
					if e.Stage == StageData && strings.Contains(string(e.Data), "Subject: spam") {
						return Reject(554, "looks like spam")
					}
					return nil
				})
			},
			attempts: 1, want: []int{554}, rejected: 1, stored: 0,
		},
		{
			name: "plain errors from a hook become 4xx/5xx too",
			arrange: func(s *Server) {
				s.SetHook(func(e Envelope) error {
					if e.Stage == StageData {
						return errors.New("disk full")
					}
					return nil
				})
			},
			attempts: 1, want: []int{554}, rejected: 1, stored: 0,
		},
		{
			name: "reset clears faults", arrange: func(s *Server) { s.FailAlways(550, "no"); s.Reset() },
			attempts: 2, want: []int{0, 0}, rejected: 0, stored: 2,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, Config{})
			tc.arrange(s)
			to := tc.to
			if to == nil {
				to = []string{"b@y"}
			}
			for i := range tc.attempts {
				err := send(t, s.Addr(), nil, "a@x", to, crlf("Subject: spam\n\nhello\n"))
				if tc.want[i] == 0 {
					require.NoError(t, err, "attempt %d", i+1)
					continue
				}
				var se *smtp.SMTPError
				require.ErrorAs(t, err, &se, "attempt %d", i+1)
				require.Equal(t, tc.want[i], se.Code, "attempt %d", i+1)
			}
			require.Equal(t, tc.rejected, s.Rejected())
			require.Equal(t, tc.stored, s.Count())
		})
	}
}

func TestAuth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		cfg      Config
		auth     sasl.Client
		wantCode int
	}{
		{"no auth configured, none given", Config{}, nil, 0},
		{"right password", Config{Username: "u", Password: "p"}, sasl.NewPlainClient("", "u", "p"), 0},
		{"wrong password", Config{Username: "u", Password: "p"}, sasl.NewPlainClient("", "u", "nope"), 535},
		{"wrong user", Config{Username: "u", Password: "p"}, sasl.NewPlainClient("", "v", "p"), 535},
		{"auth required", Config{Username: "u", Password: "p"}, nil, 502},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := setup(t, tc.cfg)
			err := send(t, s.Addr(), tc.auth, "a@x", []string{"b@y"}, crlf("Subject: s\n\nx\n"))
			if tc.wantCode == 0 {
				require.NoError(t, err)
				require.Equal(t, 1, s.Count())
				return
			}
			var se *smtp.SMTPError
			require.ErrorAs(t, err, &se)
			require.Equal(t, tc.wantCode, se.Code)
			require.Equal(t, 0, s.Count())
		})
	}
}

func TestAuthAdvertisedOnlyWhenConfigured(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want bool
	}{{Config{}, false}, {Config{Username: "u", Password: "p"}, true}} {
		s := setup(t, tc.cfg)
		c, err := smtp.Dial(s.Addr())
		require.NoError(t, err)
		require.NoError(t, c.Hello("test"))
		require.Equal(t, tc.want, c.SupportsAuth(sasl.Plain))
		require.NoError(t, c.Quit())
	}
}

func TestConnectionsCountsReuse(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	c, err := smtp.Dial(s.Addr())
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, c.SendMail("a@x", []string{"b@y"}, strings.NewReader(crlf("Subject: s\n\nx\n"))))
	}
	require.NoError(t, c.Quit())
	require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{"b@y"}, crlf("Subject: s\n\nx\n")))
	require.Equal(t, 4, s.Count())
	require.Equal(t, 2, s.Connections())
}

func TestCloseConnectionsKeepsListening(t *testing.T) {
	t.Parallel()
	s := setup(t, Config{})
	c, err := smtp.Dial(s.Addr())
	require.NoError(t, err)
	defer func() { _ = c.Close() }()
	require.NoError(t, c.Hello("test"))
	s.CloseConnections()
	require.Error(t, c.Noop(), "the idle connection is gone")
	require.NoError(t, send(t, s.Addr(), nil, "a@x", []string{"b@y"}, crlf("Subject: s\n\nx\n")))
	require.Equal(t, 1, s.Count())
	require.Equal(t, 2, s.Connections())
}

func TestCloseEndsOpenConnections(t *testing.T) {
	t.Parallel()
	s, err := New(Config{SMTPAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	addr := s.Addr()

	// An idle client connection, as a pooled SMTP client keeps one.
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(buf[:n]), "220 "), "greeting: %q", buf[:n])

	require.NoError(t, s.Close())

	require.NoError(t, conn.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = io.ReadAll(conn)
	require.NoError(t, err, "the server closed the idle connection (EOF), not our deadline")
	_, err = net.DialTimeout("tcp", addr, time.Second)
	require.Error(t, err, "the listener is closed")
	require.NoError(t, s.Close(), "Close twice is fine")
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"defaults", DefaultConfig(), ""},
		{"negative max", Config{SMTPAddr: "127.0.0.1:0", Max: -1, MaxMessageBytes: 1, Timeout: time.Second}, "Max"},
		{"no port", Config{SMTPAddr: "127.0.0.1", Max: 1, MaxMessageBytes: 1, Timeout: time.Second}, "SMTPAddr"},
		{"password without user", Config{SMTPAddr: "127.0.0.1:0", Max: 1, MaxMessageBytes: 1, Timeout: time.Second, Password: "p"}, "Username"},
		{"zero timeout", Config{SMTPAddr: "127.0.0.1:0", Max: 1, MaxMessageBytes: 1}, "Timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.cfg.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
		})
	}
	_, err := New(Config{SMTPAddr: "127.0.0.1", Max: 5})
	require.ErrorContains(t, err, "SMTPAddr", "New validates after applying defaults")
}
