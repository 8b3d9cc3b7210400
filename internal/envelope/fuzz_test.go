package envelope

import (
	"bytes"
	"errors"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// realMessages are bodies as the API writes them (a verification code and
// a scheduled notice with a callback), plus the malformed kinds the
// consumer has met: they seed the corpus so the fuzzer starts from the
// shapes that matter.
func realMessages(t testing.TB) [][]byte {
	t.Helper()
	deadline := time.Date(2026, 11, 21, 8, 40, 0, 123456789, time.UTC)
	created := time.Date(2026, 11, 21, 8, 30, 0, 0, time.FixedZone("CST", 8*3600))
	msgs := []*Message{
		{Version: SchemaVersion, TaskID: "01a1fcd2-99e4-7efe-8f4d-830522746773", Kind: Verification, Channel: "mail",
			Recipient: "alice@example.com", Template: "verify_code", Locale: "en", Variables: map[string]string{"ttlMinutes": "10"},
			Purpose: "login", SealedCode: "v1.Zm9vYmFyYmF6cXV4cXV1eA.c2VhbGVk", CodeDigest: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			Deadline: &deadline, CreatedAt: created},
		{Version: SchemaVersion, TaskID: "7c1e1d0e-2b0c-4e55-9a51-3f0f4f6f1a22", Kind: Notification, Channel: "sms",
			Recipient: "+8613900001234", Template: "notice", Locale: "zh-CN",
			Variables:   map[string]string{"title": "维护通知", "content": "今晚 22:00-23:00 <b>&</b> \"quoted\"\n第二行"},
			CallbackURL: "https://backend.example.com/msgpulse/status", Priority: 5, CreatedAt: created, Attempt: 2},
		{Version: SchemaVersion, TaskID: "b1", BatchID: "b1", Kind: Notification, Channel: "wecom", Template: "notice",
			Recipients: []Recipient{{TaskID: "t1", Recipient: "zhangsan"}, {TaskID: "t2", Recipient: "lisi"}}, CreatedAt: created},
		{Version: SchemaVersion, TaskID: "r1", Kind: Notification, Channel: "wecom", Recipient: "ops", Robot: true, Mentions: []string{"@all"},
			Template: "notice", CreatedAt: created},
	}
	var out [][]byte
	for _, m := range msgs {
		b, err := Encode(m)
		require.NoError(t, err)
		out = append(out, b)
	}
	return append(out,
		[]byte(`not json`),
		[]byte(`{"v":99,"taskId":"x","kind":"notification","channel":"mail","recipient":"a@b.c","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`),
		[]byte(`{"v":1,"taskId":"y","kind":"notification","channel":"mail","recipient":"a@b.c","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0} {}`),
		[]byte(`{"v":1,"taskId":"z","kind":"notification","channel":"mail","recipient":"a@b.c\r\nBcc: x@evil.test","template":"notice","createdAt":"2026-01-01T00:00:00Z","attempt":0}`),
		[]byte("{\"v\":1,\"taskId\":\"u\",\"kind\":\"notification\",\"channel\":\"mail\",\"recipient\":\"a@b.c\",\"template\":\"notice\",\"variables\":{\"title\":\"\xff\xfe\"},\"createdAt\":\"2026-01-01T00:00:00Z\",\"attempt\":0}"),
		[]byte(`{"v":1,"taskId":"w","kind":"notification","channel":"mail","recipient":"a@b.c","template":"notice","variables":{"title":"\ud800"},"createdAt":"2026-01-01T00:00:00Z","attempt":0}`),
		[]byte(`{"hello":"world"}`),
		[]byte(`[1,2,3]`),
		[]byte(`null`),
	)
}

// FuzzDecode feeds arbitrary bodies to Decode, as a hostile or broken
// publisher could. Decode must never panic; it either refuses the body
// as ErrMalformed (the consumer dead-letters exactly those) or returns a
// message that validates and survives re-encoding unchanged.
func FuzzDecode(f *testing.F) {
	for _, b := range realMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := Decode(body)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Decode refused a body without ErrMalformed (the consumer would retry it for ever): %v", err)
			}
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("Decode returned a message that does not validate: %v", err)
		}
		if !utf8.ValidString(m.Recipient) || !utf8.ValidString(m.TaskID) {
			t.Fatalf("decoded strings are not UTF-8: %q %q", m.Recipient, m.TaskID)
		}
		// Encode of a decoded message is a fixed point: what the consumer
		// republishes (a retry, a snooze) is what it read.
		once, err := Encode(m)
		if err != nil {
			t.Fatalf("a decoded message does not encode: %v", err)
		}
		m2, err := Decode(once)
		if err != nil {
			t.Fatalf("a re-encoded message does not decode: %v\n%s", err, once)
		}
		twice, err := Encode(m2)
		if err != nil {
			t.Fatalf("encode after the round trip: %v", err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("encode→decode is not the identity:\n%s\n%s", once, twice)
		}
		p, err := Publishing(m)
		if err != nil {
			t.Fatalf("Publishing of a decoded message: %v", err)
		}
		if p.MessageId != m.TaskID || !bytes.Equal(p.Body, once) {
			t.Fatalf("Publishing: message id %q for task %q, or a different body", p.MessageId, m.TaskID)
		}
	})
}

// FuzzEncodeDecode builds messages field by field: any message Encode
// accepts comes back from Decode equal, field for field.
func FuzzEncodeDecode(f *testing.F) {
	f.Add("01a1fcd2-99e4-7efe-8f4d-830522746773", true, "mail", "alice@example.com", "verify_code", "en", "ttlMinutes", "10",
		"login", "v1.sealed", "digest", int64(1795250400123456789), int64(600_000_000_000), "", uint8(0), 0)
	f.Add("t2", false, "sms", "+8613900001234", "notice", "zh-CN", "title", "维护\r\n通知 <b>",
		"", "", "", int64(1795250400000000000), int64(0), "https://backend.example.com/cb", uint8(9), 3)
	f.Fuzz(func(t *testing.T, taskID string, verification bool, channel, recipient, tmpl, locale, varName, varValue,
		purpose, sealed, digest string, createdNS, deadlineIn int64, callback string, priority uint8, attempt int) {
		kind := Notification
		if verification {
			kind = Verification
		}
		created := time.Unix(0, createdNS).UTC()
		m := &Message{Version: SchemaVersion, TaskID: taskID, Kind: kind, Channel: channel, Recipient: recipient, Template: tmpl,
			Locale: locale, Purpose: purpose, SealedCode: sealed, CodeDigest: digest, CallbackURL: callback,
			Priority: priority, CreatedAt: created, Attempt: attempt}
		if varName != "" {
			m.Variables = map[string]string{varName: varValue}
		}
		if deadlineIn != 0 {
			d := created.Add(time.Duration(deadlineIn))
			m.Deadline = &d
		}
		body, err := Encode(m)
		if err != nil {
			if m.Validate() == nil {
				// Only time.Time refuses to marshal (a year outside 0..9999).
				return
			}
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("Encode refused without ErrMalformed: %v", err)
			}
			return
		}
		for _, s := range []string{taskID, channel, recipient, tmpl, locale, varName, varValue, purpose, sealed, digest, callback} {
			if !utf8.ValidString(s) {
				// encoding/json writes U+FFFD for invalid bytes: no identity
				// to expect, but the body must still decode.
				if _, err := Decode(body); err != nil {
					t.Fatalf("an encoded message does not decode: %v", err)
				}
				return
			}
		}
		got, err := Decode(body)
		if err != nil {
			t.Fatalf("an encoded message does not decode: %v\n%s", err, body)
		}
		require.True(t, got.CreatedAt.Equal(m.CreatedAt), "createdAt %s != %s", got.CreatedAt, m.CreatedAt)
		require.Equal(t, m.Deadline == nil, got.Deadline == nil)
		if m.Deadline != nil {
			require.True(t, got.Deadline.Equal(*m.Deadline), "deadline %s != %s", got.Deadline, m.Deadline)
		}
		got.CreatedAt, got.Deadline = m.CreatedAt, m.Deadline
		require.Equal(t, m, got)
	})
}

func TestBatchValidation(t *testing.T) {
	t.Parallel()
	batch := func(mod func(*Message)) *Message {
		m := &Message{Version: SchemaVersion, TaskID: "b", Kind: Notification, Channel: "wecom", Template: "notice",
			Recipients: []Recipient{{TaskID: "t1", Recipient: "a"}, {TaskID: "t2", Recipient: "b"}}, CreatedAt: time.Now()}
		mod(m)
		return m
	}
	many := make([]Recipient, MaxRecipients+1)
	for i := range many {
		many[i] = Recipient{TaskID: "t", Recipient: "u"}
	}
	for _, tc := range []struct {
		name string
		m    *Message
		ok   bool
	}{
		{"wecom batch", batch(func(*Message) {}), true},
		{"mail batch", batch(func(m *Message) { m.Channel = "mail" }), false},
		{"robot batch", batch(func(m *Message) { m.Robot = true }), false},
		{"recipient and recipients", batch(func(m *Message) { m.Recipient = "c" }), false},
		{"too many", batch(func(m *Message) { m.Recipients = many }), false},
		{"separator", batch(func(m *Message) { m.Recipients[0].Recipient = "a|b" }), false},
		{"no task", batch(func(m *Message) { m.Recipients[1].TaskID = "" }), false},
		{"unknown channel", batch(func(m *Message) { m.Channel = "fax"; m.Recipients = nil; m.Recipient = "x" }), false},
	} {
		err := tc.m.Validate()
		if tc.ok {
			require.NoError(t, err, tc.name)
		} else {
			require.ErrorIs(t, err, ErrMalformed, tc.name)
		}
	}
}
