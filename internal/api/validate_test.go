package api

import (
	"math/rand/v2"
	"net/http"
	"regexp"
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
		{"sms", "+86 139 0000 1234", "+8613900001234", true}, // one number, one form
		{"sms", "+8612345678", "", false},                    // not a number China assigns
		{"sms", "+449098790000", "+449098790000", true},      // valid: the type is a code's concern
		{"sms", "+86 139 0000 1234 x12", "", false},
		// WeCom: one person (issue 43). "@all" is everyone the application
		// sees, "a|b" a list: neither is a userid.
		{"wecom", "zhangsan", "zhangsan", true},
		{"wecom", "Zhang.San@corp-1_x", "Zhang.San@corp-1_x", true},
		{"wecom", "9lives", "9lives", true},
		{"wecom", strings.Repeat("a", 64), strings.Repeat("a", 64), true},
		{"wecom", "@all", "", false},
		{"wecom", "@ALL", "", false},
		{"wecom", "zhangsan|lisi", "", false},
		{"wecom", "zhangsan,lisi", "", false},
		{"wecom", "_x", "", false},
		{"wecom", ".x", "", false},
		{"wecom", "-x", "", false},
		{"wecom", strings.Repeat("a", 65), "", false},
		{"wecom", "", "", false},
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

// isHostname replaced this expression; it must accept exactly what it did.
var hostnameRE = regexp.MustCompile(`^(?i)[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$`)

func TestIsHostnameIsTheRegexp(t *testing.T) {
	t.Parallel()
	l63, l64 := strings.Repeat("a", 63), strings.Repeat("a", 64)
	cases := []string{
		"", ".", "a", "a.", ".a", "a.b", "A.B", "example.com", "EXAMPLE.Com", "mail.example.co.uk",
		"a..b", "a.b.", "-a.b", "a-.b", "a.-b", "a.b-", "a-b.c-d", "a--b.c", "1.2", "0-0.9",
		"a_b.c", "a b.c", "a.b\n", "ex@mple.com", "exa`mple.com", "exa{mple.com", "exa[mple.com",
		"ex\u00e4mple.com", "xn--exmple-cua.com", "a\x00.b", "a.b\x80",
		l63 + ".com", l64 + ".com", "x." + l63, "x." + l64, l63 + "." + l63 + "." + l63,
	}
	// And random strings over the characters that matter, to reach the
	// combinations nobody listed.
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "aZ09-._@"
	for range 20000 {
		b := make([]byte, rng.IntN(12))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	accepted := 0
	for _, s := range cases {
		want := hostnameRE.MatchString(s)
		if want {
			accepted++
		}
		require.Equal(t, want, isHostname(s), "%q", s)
	}
	require.Greater(t, accepted, 100, "the random cases reach accepted names too")
}
