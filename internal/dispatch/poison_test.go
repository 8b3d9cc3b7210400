package dispatch_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/mail"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/dlq"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

const attacker = "evil@attacker.test"

// rawBody marshals a message without Validate, as a buggy or hostile
// publisher would.
func rawBody(t *testing.T, m envelope.Message) []byte {
	t.Helper()
	b, err := json.Marshal(m)
	require.NoError(t, err)
	return b
}

func baseMessage(channel, recipient string) envelope.Message {
	return envelope.Message{Version: envelope.SchemaVersion, TaskID: "poison-" + testenv.ID(), Kind: envelope.Notification, Channel: channel,
		Recipient: recipient, Template: "notice", Variables: map[string]string{"title": "t", "content": "c"}, CreatedAt: time.Now()}
}

// Poison messages on the main queues: each is dead-lettered exactly once
// with a reason the DLQ tool shows, nothing is sent for it, no header is
// injected into what reaches the SMTP server, and the consumer keeps
// serving: valid messages published after the poison ones are sent once.
func TestPoisonMessagesAreDeadLetteredOnce(t *testing.T) {
	out := &testenv.SyncBuffer{} // the log SMS provider's output, read while consumers write
	logSMS, err := sms.New(sms.NameLog, sms.Config{}.WithDefaults(), zap.NewNop(), out)
	require.NoError(t, err)
	s := setup(t, dispatchtest.Options{SMS: logSMS})

	var mu sync.Mutex
	var rcpts []string
	s.Mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageRcpt {
			mu.Lock()
			rcpts = append(rcpts, e.To...)
			mu.Unlock()
		}
		return nil
	})

	huge := strings.Repeat("x", 2<<20) // above the default MAX_MESSAGE_BYTES (1 MiB)
	badUTF8 := func(channel, recipient string) []byte {
		b := rawBody(t, baseMessage(channel, recipient))
		return bytes.Replace(b, []byte(`"title":"t"`), []byte("\"title\":\"caf\xe9 \xff\xfe\""), 1)
	}
	type poison struct {
		name    string
		channel string
		// publish puts the message on the queue and returns its message id.
		publish func() string
		reason  string // what `dlq list` shows
		// lastError is a part of the consumer's recorded error, for
		// messages that have a status record (the API wrote one).
		lastError string
	}
	raw := func(channel string, body []byte) func() string {
		return func() string {
			id := "poison-" + testenv.ID()
			s.PublishRaw(channel, id, body)
			return id
		}
	}
	notice := func(channel, recipient string, mod func(*envelope.Message)) func() string {
		return func() string { return s.Notice(channel, recipient, "poison", mod) }
	}
	cases := []poison{
		{name: "invalid JSON", channel: topology.Mail, publish: raw(topology.Mail, []byte(`{"v":1,"taskId":"x","kind":`)), reason: status.ReasonMalformed},
		{name: "wrong schema: unknown fields", channel: topology.Mail, publish: raw(topology.Mail, []byte(`{"hello":"world","to":"a@example.com"}`)), reason: status.ReasonMalformed},
		{name: "wrong schema: an array", channel: topology.Mail, publish: raw(topology.Mail, []byte(`[{"v":1}]`)), reason: status.ReasonMalformed},
		{name: "wrong schema: wrong types", channel: topology.Mail, publish: raw(topology.Mail,
			[]byte(`{"v":"1","taskId":7,"kind":"notification","channel":"mail","recipient":"a@example.com","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`)), reason: status.ReasonMalformed},
		{name: "huge body", channel: topology.Mail, publish: notice(topology.Mail, "huge@example.com", func(m *envelope.Message) { m.Variables["content"] = huge }),
			reason: status.ReasonMalformed, lastError: "exceeds MAX_MESSAGE_BYTES"},
		{name: "unknown template", channel: topology.Mail, publish: notice(topology.Mail, "tmpl@example.com", func(m *envelope.Message) { m.Template = "no_such_template" }),
			reason: status.ReasonPermanent, lastError: "unknown template"},
		{name: "invalid UTF-8", channel: topology.Mail, publish: raw(topology.Mail, badUTF8(topology.Mail, "utf8@example.com")), reason: status.ReasonMalformed},
		{name: "CR/LF in the subject, through a variable", channel: topology.Mail, publish: notice(topology.Mail, "subject@example.com", func(m *envelope.Message) {
			m.Variables["title"] = "Hello\r\nBcc: " + attacker + "\r\nX-Injected: yes"
		}), reason: status.ReasonPermanent, lastError: "line break"},
		{name: "LF alone in the subject", channel: topology.Mail, publish: notice(topology.Mail, "lf@example.com", func(m *envelope.Message) {
			m.Variables["title"] = "Hello\nBcc: " + attacker
		}), reason: status.ReasonPermanent, lastError: "line break"},
		{name: "CR/LF in the recipient", channel: topology.Mail, publish: raw(topology.Mail, rawBody(t, baseMessage(topology.Mail, "victim@example.com\r\nBcc: "+attacker))),
			reason: status.ReasonMalformed},
		{name: "CR/LF in the recipient's comment", channel: topology.Mail, publish: raw(topology.Mail, rawBody(t, baseMessage(topology.Mail, "victim@example.com (\r\n Bcc: "+attacker+")"))),
			reason: status.ReasonMalformed},
		{name: "two recipients in one", channel: topology.Mail, publish: notice(topology.Mail, "victim@example.com, "+attacker, nil),
			reason: status.ReasonPermanent, lastError: "recipient"},

		{name: "sms: invalid JSON", channel: topology.SMS, publish: raw(topology.SMS, []byte("\x00\x01garbage")), reason: status.ReasonMalformed},
		{name: "sms: wrong schema", channel: topology.SMS, publish: raw(topology.SMS, []byte(`{"v":1,"taskId":"s","kind":"telegram","channel":"sms","recipient":"+8613900001234","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`)), reason: status.ReasonMalformed},
		{name: "sms: huge body", channel: topology.SMS, publish: notice(topology.SMS, "+8613900000001", func(m *envelope.Message) { m.Variables["content"] = huge }),
			reason: status.ReasonMalformed, lastError: "exceeds MAX_MESSAGE_BYTES"},
		{name: "sms: unknown template", channel: topology.SMS, publish: notice(topology.SMS, "+8613900000002", func(m *envelope.Message) { m.Template = "no_such_template" }),
			reason: status.ReasonPermanent, lastError: "unknown template"},
		{name: "sms: invalid UTF-8", channel: topology.SMS, publish: raw(topology.SMS, badUTF8(topology.SMS, "+8613900000003")), reason: status.ReasonMalformed},
		{name: "sms: CR/LF in the recipient", channel: topology.SMS, publish: raw(topology.SMS, rawBody(t, baseMessage(topology.SMS, "+8613900000004\r\n+8613900009999"))),
			reason: status.ReasonMalformed},
		{name: "sms: not a phone number", channel: topology.SMS, publish: notice(topology.SMS, "+86 139-0000-0005; +8613900009999", nil),
			reason: status.ReasonPermanent, lastError: "E.164"},
	}

	c1 := s.StartConsumer("c1", 2)
	want := map[string]poison{}
	for _, pc := range cases {
		want[pc.publish()] = pc
	}
	// Published after every poison message: the consumer must still serve.
	goodMail := s.Notice(topology.Mail, "good@example.com", "after the poison", nil)
	goodSMS := s.Notice(topology.SMS, "+8613900001234", "after the poison", nil)
	// CR/LF inside a body variable is just text: it is sent, and writes no header.
	bodyCRLF := s.Notice(topology.Mail, "body@example.com", "newlines in the body", func(m *envelope.Message) {
		m.Variables["content"] = "line one\r\nBcc: " + attacker + "\r\n\r\nline three"
	})
	for _, id := range []string{goodMail, goodSMS, bodyCRLF} {
		rec := waitStatus(t, s, id, status.Sent)
		require.Equal(t, 1, rec.Attempts)
	}

	perChannel := map[string]int{}
	for _, pc := range cases {
		perChannel[pc.channel]++
	}
	mailCT, err := s.Model.Channel(topology.Mail)
	require.NoError(t, err)
	smsCT, err := s.Model.Channel(topology.SMS)
	require.NoError(t, err)
	testenv.WaitFor(t, 20*time.Second, "every poison message in its DLQ", func() bool {
		return s.Depth(mailCT.DeadLetterQueue) == perChannel[topology.Mail] && s.Depth(smsCT.DeadLetterQueue) == perChannel[topology.SMS]
	})
	// Stop the consumer: anything it still held goes back to the queue, so
	// the counts below are final, not a moment in a redelivery loop.
	c1.Stop()
	require.Zero(t, s.Depth(mailCT.Queue), "nothing left in the main queue")
	require.Zero(t, s.Depth(smsCT.Queue), "nothing left in the main queue")
	require.Equal(t, perChannel[topology.Mail], s.Depth(mailCT.DeadLetterQueue), "each mail poison dead-lettered exactly once")
	require.Equal(t, perChannel[topology.SMS], s.Depth(smsCT.DeadLetterQueue), "each sms poison dead-lettered exactly once")

	// The DLQ tool shows each one, once, with its reason.
	seen := map[string]int{}
	for _, ch := range topology.Channels {
		for _, e := range dlqList(t, s, ch) {
			seen[e.ID]++
			pc, ok := want[e.ID]
			require.True(t, ok, "unexpected dead letter %s (%s: %s)", e.ID, e.Reason, e.LastError)
			require.Equal(t, pc.channel, e.Channel, pc.name)
			require.Equal(t, dlq.BrokerRejected, e.BrokerReason, pc.name)
			require.Equal(t, pc.reason, e.Reason, "%s: %+v", pc.name, e)
			if pc.lastError != "" {
				require.Contains(t, e.LastError, pc.lastError, pc.name)
				require.Equal(t, string(status.Failed), e.Status, pc.name)
			}
		}
	}
	for id, pc := range want {
		require.Equal(t, 1, seen[id], "%s (%s) dead-lettered once", pc.name, id)
	}

	// What reached the SMTP server: the good mail and the one with CR/LF
	// in its body, once each, to their own recipients only, with no
	// header a variable or a recipient wrote.
	msgs := s.Mail.Messages()
	require.Len(t, msgs, 2)
	require.Equal(t, 1, s.MailsTo("good@example.com"))
	require.Equal(t, 1, s.MailsTo("body@example.com"))
	mu.Lock()
	require.ElementsMatch(t, []string{"good@example.com", "body@example.com"}, rcpts, "RCPT TO only for the good mails")
	mu.Unlock()
	for _, m := range msgs {
		hdr := headersOf(t, m.Raw)
		require.Empty(t, hdr.Get("Bcc"), "injected Bcc in:\n%s", m.Raw)
		require.Empty(t, hdr.Get("X-Injected"), "injected header in:\n%s", m.Raw)
		require.NotContains(t, strings.Join(hdr["To"], ","), attacker)
	}
	body := msgs[0]
	if body.To[0] != "body@example.com" {
		body = msgs[1]
	}
	require.Contains(t, body.Text, "Bcc: "+attacker, "the text is delivered as text, in the body")

	// The log SMS provider printed only the good SMS.
	printed := out.String()
	require.Equal(t, 1, strings.Count(printed, "task="+goodSMS), printed)
	require.Equal(t, 1, strings.Count(printed, "[sms:log]"), printed)
}

func headersOf(t *testing.T, raw string) mail.Header {
	t.Helper()
	m, err := mail.ReadMessage(strings.NewReader(raw))
	require.NoError(t, err, raw)
	return m.Header
}

// dlqList runs `dlq list --channel ch --json --limit 0`, the on-call view.
func dlqList(t *testing.T, s *dispatchtest.Stack, ch string) []dlq.Entry {
	t.Helper()
	cfg := config.DLQ{
		Common: config.Common{AMQPURL: s.Broker.URL, RedisURL: s.Redis.URL, RedisMode: s.Redis.Mode, RedisPrefix: s.Redis.Prefix, LogLevel: "info", LogFormat: "json"},
		Model:  testenv.Topology(), CodeSecret: seal.DevSecret, CodeSecretIsDev: true,
		ConfirmTimeout: 10 * time.Second, ScanMax: 100_000, StatusTimeout: 2 * time.Second,
	}
	var stdout, stderr bytes.Buffer
	code := dlq.Main(context.Background(), cfg, zap.NewNop(), []string{"list", "--channel", ch, "--json", "--limit", "0"}, &stdout, &stderr)
	require.Equal(t, dlq.ExitOK, code, stderr.String())
	var out []dlq.Entry
	sc := bufio.NewScanner(&stdout)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var e dlq.Entry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		out = append(out, e)
	}
	require.NoError(t, sc.Err())
	return out
}
