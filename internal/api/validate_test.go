package api

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func locales(l string) bool { return l == "en" || l == "zh-CN" }

func TestNormalizeRecipient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		channel, in, want string
		ok                bool
	}{
		{"email", "Alice@Example.COM", "alice@example.com", true},
		{"email", "a.b+tag@sub.example.co", "a.b+tag@sub.example.co", true},
		{"email", "a@localhost", "", false},
		{"email", "a@-bad.com", "", false},
		{"email", `"a b"@example.com`, "", false},
		{"email", "Alice <a@example.com>", "", false},
		{"email", "a@example.com\n", "", false},
		{"email", strings.Repeat("a", 65) + "@example.com", "", false},
		{"email", "a@" + strings.Repeat("b", 250) + ".com", "", false},
		{"email", "", "", false},
		{"sms", "+8613900001234", "+8613900001234", true},
		{"sms", "+14155550100", "+14155550100", true},
		{"sms", "8613900001234", "", false},
		{"sms", "+0123456789", "", false},
		{"sms", "+1234", "", false},
		{"sms", "+86 139 0000 1234", "", false},
	} {
		got, err := normalizeRecipient(tc.channel, tc.in)
		if tc.ok {
			require.Nil(t, err, tc.in)
			require.Equal(t, tc.want, got)
		} else {
			require.NotNil(t, err, tc.in)
			require.Equal(t, http.StatusBadRequest, err.Status)
		}
	}
}

func TestClientKey(t *testing.T) {
	t.Parallel()
	k, err := clientKey("203.0.113.9")
	require.Nil(t, err)
	require.Equal(t, "203.0.113.9", k)
	a, _ := clientKey("2001:db8:1:2:aaaa::1")
	b, _ := clientKey("2001:db8:1:2:bbbb::2")
	require.Equal(t, a, b, "one IPv6 /64 is one end user")
	require.Equal(t, "2001:db8:1:2::/64", a)
	_, err = clientKey("999.1.1.1")
	require.NotNil(t, err)
}

func TestSendRequestDelay(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 21, 8, 0, 0, 0, time.UTC)
	f := 1.5
	r := SendRequest{Message: Message{MessageType: "EMAIL", TemplateCode: "notice", DelaySeconds: &f}, Recipient: "a@example.com"}
	require.Nil(t, r.validate(locales, false, now))
	require.Equal(t, 1500*time.Millisecond, r.delay)
	at := "2026-11-21T08:00:30+00:00"
	r = SendRequest{Message: Message{MessageType: "SMS", TemplateCode: "notice", SendAt: &at}, Recipient: "+8613900001234"}
	require.Nil(t, r.validate(locales, false, now))
	require.Equal(t, 30*time.Second, r.delay)
	tiny := 0.0001
	r = SendRequest{Message: Message{MessageType: "SMS", TemplateCode: "notice", DelaySeconds: &tiny}, Recipient: "+8613900001234"}
	require.NotNil(t, r.validate(locales, false, now))
}

// Whatever bytes arrive, decoding and validation answer 400 or 413 (or
// accept), and never panic.
func FuzzDecodeAndValidate(f *testing.F) {
	for _, s := range []string{
		`{"channel":"email","recipient":"a@example.com","purpose":"login"}`,
		`{"channel":"sms","recipient":"+8613900001234","purpose":"register","clientIp":"::1","locale":"zh-CN"}`,
		`{"channel":"email","recipient":"a@example.com","purpose":"login","code":"123456"}`,
		`{"messageType":"EMAIL","templateCode":"notice","recipient":"a@example.com","variables":{"title":"t","content":"c"},"delaySeconds":1e308}`,
		`{"messageType":"SMS","templateCode":"notice","recipient":"+1","sendAt":"2099-01-01T00:00:00Z","priority":9,"callbackUrl":"https://x/y"}`,
		`{"variables":{"a\u0000":"\ud800"}}`, `[]`, `null`, `{"a":`, "\xff\xfe", `{"delaySeconds":"NaN"}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Now()
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(e *apiError) {
			if e != nil && e.Status != http.StatusBadRequest && e.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("status %d for %q", e.Status, data)
			}
			if e != nil && e.Msg == "" {
				t.Fatalf("empty message for %q", data)
			}
		}
		var vr VerificationCodeRequest
		e := decodeJSON(bytes.NewReader(data), 4096, &vr)
		check(e)
		if e == nil {
			check(vr.validate(locales))
		}
		var v VerifyRequest
		if e := decodeJSON(bytes.NewReader(data), 4096, &v); e == nil {
			check(v.validate())
		} else {
			check(e)
		}
		var s SendRequest
		if e := decodeJSON(bytes.NewReader(data), 4096, &s); e == nil {
			e = s.validate(locales, false, now)
			check(e)
			if e == nil && s.delay < 0 {
				t.Fatalf("negative delay accepted for %q", data)
			}
		} else {
			check(e)
		}
	})
}
