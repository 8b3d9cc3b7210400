package mail

import (
	"bytes"
	netmail "net/mail"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	gomail "github.com/wneessen/go-mail"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
)

const evil = "evil@attacker.test"

// go-mail itself, below msgpulse's own checks: a CR/LF in a header value
// is encoded, never written as a line break, so it cannot start a header.
// This is the second line of defence should a check above it ever miss.
func TestGoMailEncodesLineBreaksInHeaders(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		build func(m *gomail.Msg) error
	}{
		{"subject", func(m *gomail.Msg) error {
			m.Subject("Hello\r\nBcc: " + evil + "\r\nX-Injected: yes")
			return nil
		}},
		{"subject, LF only", func(m *gomail.Msg) error {
			m.Subject("Hello\nBcc: " + evil + "\nX-Injected: yes")
			return nil
		}},
		{"display name", func(m *gomail.Msg) error {
			m.ToMailAddress(&netmail.Address{Name: "Victim\r\nBcc: " + evil + "\r\nX-Injected: yes", Address: "victim@example.com"})
			return nil
		}},
		{"generic header", func(m *gomail.Msg) error {
			m.SetGenHeader(gomail.Header(TaskHeader), "t1\r\nBcc: "+evil+"\r\nX-Injected: yes")
			return nil
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := gomail.NewMsg()
			require.NoError(t, m.From("no-reply@msgpulse.test"))
			require.NoError(t, m.To("victim@example.com"))
			require.NoError(t, tc.build(m))
			m.SetBodyString(gomail.TypeTextPlain, "body")
			var buf bytes.Buffer
			_, err := m.WriteTo(&buf)
			require.NoError(t, err)
			parsed, err := netmail.ReadMessage(&buf)
			require.NoError(t, err, buf.String())
			require.Empty(t, parsed.Header.Get("Bcc"), buf.String())
			require.Empty(t, parsed.Header.Get("X-Injected"), buf.String())
		})
	}
}

// Through the Mailer to a real SMTP server: a recipient whose comment holds
// a line break is delivered to the address alone, with no injected header;
// a subject with one is refused before any SMTP command.
func TestMailerSendsNoInjectedHeaders(t *testing.T) {
	t.Parallel()
	m, srv := setup(t, mailcatcher.Config{}, nil)
	var mu sync.Mutex
	var rcpts []string
	srv.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageRcpt {
			mu.Lock()
			rcpts = append(rcpts, e.To...)
			mu.Unlock()
		}
		return nil
	})
	ctx := t.Context()
	_, err := m.SendMail(ctx, provider.Mail{To: "victim@example.com (\r\nBcc: " + evil + ")", Subject: "hi", Text: "text", TaskID: "t1"})
	require.NoError(t, err)
	_, err = m.SendMail(ctx, provider.Mail{To: "victim@example.com", Subject: "hi\r\nBcc: " + evil, Text: "text", TaskID: "t2"})
	var pe *provider.Error
	require.ErrorAs(t, err, &pe)
	require.Equal(t, provider.Permanent, pe.Class)
	_, err = m.SendMail(ctx, provider.Mail{To: "victim@example.com\r\nBcc: " + evil, Subject: "hi", Text: "text", TaskID: "t3"})
	require.ErrorAs(t, err, &pe)
	require.Equal(t, provider.Permanent, pe.Class)

	msgs := srv.Messages()
	require.Len(t, msgs, 1)
	require.Equal(t, []string{"victim@example.com"}, msgs[0].To)
	mu.Lock()
	require.Equal(t, []string{"victim@example.com"}, rcpts)
	mu.Unlock()
	parsed, err := netmail.ReadMessage(strings.NewReader(msgs[0].Raw))
	require.NoError(t, err)
	require.Empty(t, parsed.Header.Get("Bcc"), msgs[0].Raw)
	require.NotContains(t, strings.ToLower(msgs[0].Raw), "\nbcc:", msgs[0].Raw)
	to, err := parsed.Header.AddressList("To")
	require.NoError(t, err)
	require.Len(t, to, 1)
	require.Equal(t, "victim@example.com", to[0].Address)
}
