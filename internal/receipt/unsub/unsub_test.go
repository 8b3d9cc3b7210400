package unsub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const secret = "0123456789abcdef0123456789abcdef"

func setup(t *testing.T) (*Signer, string) {
	t.Helper()
	s, err := New(secret)
	require.NoError(t, err)
	tok, err := s.Sign(Token{Tenant: "shop", Recipient: "Alice@Example.com", At: time.Unix(1_800_000_000, 0)})
	require.NoError(t, err)
	return s, tok
}

// forge signs payload with secret under the given label, as another use of
// RECEIPT_SECRET (or a forger who knows a label but not the key) would.
func forge(key, lbl, payload string) string {
	h := hmac.New(sha256.New, []byte(key))
	h.Write([]byte(lbl + payload))
	enc := base64.RawURLEncoding
	return enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(h.Sum(nil))
}

// A token names what it was signed with, its recipient normalised.
func TestTokenRoundTrip(t *testing.T) {
	s, tok := setup(t)
	require.NotContains(t, tok, "Alice", "the recipient is encoded, not in clear in the URL")
	require.Regexp(t, `^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$`, tok, "URL-safe, no escaping needed")
	got, err := s.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, Token{Tenant: "shop", Recipient: "alice@example.com", At: time.Unix(1_800_000_000, 0).UTC()}, got)
}

// Whatever is changed, truncated or signed otherwise is ErrInvalid.
func TestTokenRefusesForgeries(t *testing.T) {
	s, tok := setup(t)
	p64, m64, _ := strings.Cut(tok, ".")
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	payload := "email\nshop\nalice@example.com\n1800000000"
	for _, tc := range []struct{ name, tok string }{
		{"empty", ""},
		{"no dot", p64 + m64},
		{"a payload character changed", flip(p64, 3) + "." + m64},
		{"the last payload character changed", flip(p64, len(p64)-1) + "." + m64},
		{"a MAC character changed", p64 + "." + flip(m64, 5)},
		{"MAC truncated", p64 + "." + m64[:len(m64)-2]},
		{"MAC missing", p64 + "."},
		{"padding added", p64 + "=." + m64},
		{"another tenant, the MAC kept", base64.RawURLEncoding.EncodeToString([]byte("email\nother\nalice@example.com\n1800000000")) + "." + m64},
		{"another secret", forge(strings.Repeat("x", 32), label, payload)},
		{"the VERP label, the same secret", forge(secret, "msgpulse verp v1|", payload)},
		{"no label, the same secret", forge(secret, "", payload)},
		{"another channel, well signed", forge(secret, label, "sms\nshop\n+15550001111\n1800000000")},
		{"an unnormalised recipient, well signed", forge(secret, label, "email\nshop\nAlice@example.com\n1800000000")},
		{"a fifth field, well signed", forge(secret, label, payload+"\nx")},
		{"too long", strings.Repeat("A", MaxLen+1) + "." + m64},
	} {
		_, err := s.Verify(tc.tok)
		require.ErrorIs(t, err, ErrInvalid, tc.name)
	}
}

// Sign refuses what a token cannot name, and New a short secret.
func TestSignRefuses(t *testing.T) {
	_, err := New("short")
	require.Error(t, err)
	s, _ := setup(t)
	for _, tc := range []struct {
		name string
		tok  Token
	}{
		{"no tenant", Token{Recipient: "a@example.com"}},
		{"a line break in the tenant", Token{Tenant: "a\nb", Recipient: "a@example.com"}},
		{"a display name", Token{Tenant: "shop", Recipient: "Alice <a@example.com>"}},
		{"not an address", Token{Tenant: "shop", Recipient: "alice"}},
		{"too long", Token{Tenant: strings.Repeat("t", MaxLen), Recipient: "a@example.com"}},
	} {
		_, err := s.Sign(tc.tok)
		require.Error(t, err, tc.name)
	}
}

// A link is the base, the path and a token issued now.
func TestLinksURL(t *testing.T) {
	s, _ := setup(t)
	now := time.Unix(1_900_000_000, 0)
	l := &Links{Base: "https://msg.example.com", Signer: s, Now: func() time.Time { return now }}
	u, err := l.URL("shop", "bob@example.com")
	require.NoError(t, err)
	tok, ok := strings.CutPrefix(u, "https://msg.example.com/unsubscribe/")
	require.True(t, ok, u)
	got, err := s.Verify(tok)
	require.NoError(t, err)
	require.Equal(t, Token{Tenant: "shop", Recipient: "bob@example.com", At: now.UTC()}, got)
}
