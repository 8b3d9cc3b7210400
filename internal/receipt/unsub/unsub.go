// Package unsub makes and checks the token of a one-click unsubscribe link
// (RFC 8058): List-Unsubscribe: <PUBLIC_BASE_URL/unsubscribe/TOKEN>. The
// token names a tenant, the channel (email) and a recipient, with the time
// it was issued, and is signed with RECEIPT_SECRET by HMAC-SHA256, so the
// link a reader's mail client follows can unsubscribe that reader from
// that tenant's notices and nobody else from anything.
//
// The consumer signs (when it builds a notice); the API verifies (when the
// link is followed). The MAC is taken over a label of its own before the
// payload, so a token made for another purpose with the same secret (the
// VERP return path's) can never pass as an unsubscribe token, nor one of
// these as that.
//
// It must never log a token or the secret, and never accept a token whose
// MAC does not match in constant time.
package unsub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/mail"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Channel is the only channel an unsubscribe token names: mail notices are
// the only ones that carry List-Unsubscribe.
const Channel = "email"

// label separates this MAC's domain from every other use of RECEIPT_SECRET
// (VERP tokens sign under a label of their own).
const label = "msgpulse unsubscribe v1|"

// MinSecret is the shortest secret New accepts, as config requires of
// RECEIPT_SECRET.
const MinSecret = 32

// MaxLen bounds a token's text: a tenant and a 254-byte address with the
// MAC fit in well under it, and anything longer is refused before it is
// decoded.
const MaxLen = 1024

// macLen is the MAC's length in the token: all of HMAC-SHA256.
const macLen = sha256.Size

// ErrInvalid is every token Verify refuses: malformed, altered or forged.
// It says no more, on purpose: which check failed helps only a forger.
var ErrInvalid = errors.New("unsubscribe token is invalid")

// Token is what an unsubscribe link names.
type Token struct {
	Tenant    string
	Recipient string    // normalised (Normalize): the bare lower-case address
	At        time.Time // when it was issued, to the second
}

// Signer signs and verifies tokens with one secret.
type Signer struct{ key []byte }

// New returns a Signer keyed with secret (RECEIPT_SECRET).
func New(secret string) (*Signer, error) {
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("unsub: the secret must be at least %d bytes", MinSecret)
	}
	return &Signer{key: []byte(secret)}, nil
}

// Normalize returns addr as a token names it: the bare address, lower-cased
// (as the API keys an email recipient's limits and suppression entry).
func Normalize(addr string) (string, error) {
	a, err := mail.ParseAddress(addr)
	if err != nil || a.Name != "" || a.Address != strings.TrimSpace(addr) || !strings.Contains(a.Address, "@") {
		return "", errors.New("unsub: not a bare email address")
	}
	return strings.ToLower(a.Address), nil
}

// Sign returns t's token, its recipient normalised.
func (s *Signer) Sign(t Token) (string, error) {
	rcpt, err := Normalize(t.Recipient)
	if err != nil {
		return "", err
	}
	if t.Tenant == "" || strings.ContainsFunc(t.Tenant, unicode.IsControl) {
		return "", errors.New("unsub: the tenant must be a name without control characters")
	}
	payload := strings.Join([]string{Channel, t.Tenant, rcpt, strconv.FormatInt(t.At.Unix(), 10)}, "\n")
	enc := base64.RawURLEncoding
	tok := enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(s.mac([]byte(payload)))
	if len(tok) > MaxLen {
		return "", errors.New("unsub: tenant and recipient are too long for a token")
	}
	return tok, nil
}

// Verify returns what tok names, or ErrInvalid when it is malformed or its
// MAC is not this secret's over it.
func (s *Signer) Verify(tok string) (Token, error) {
	if len(tok) > MaxLen {
		return Token{}, ErrInvalid
	}
	p64, m64, ok := strings.Cut(tok, ".")
	if !ok {
		return Token{}, ErrInvalid
	}
	enc := base64.RawURLEncoding.Strict()
	payload, err := enc.DecodeString(p64)
	if err != nil {
		return Token{}, ErrInvalid
	}
	mac, err := enc.DecodeString(m64)
	if err != nil || len(mac) != macLen || !hmac.Equal(mac, s.mac(payload)) {
		return Token{}, ErrInvalid
	}
	// Signed by this secret under this label: the fields are ours. They
	// are checked anyway, so that a bug in Sign cannot become an entry.
	f := strings.Split(string(payload), "\n")
	if len(f) != 4 || f[0] != Channel || f[1] == "" {
		return Token{}, ErrInvalid
	}
	rcpt, err := Normalize(f[2])
	if err != nil || rcpt != f[2] {
		return Token{}, ErrInvalid
	}
	at, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return Token{}, ErrInvalid
	}
	return Token{Tenant: f[1], Recipient: rcpt, At: time.Unix(at, 0).UTC()}, nil
}

func (s *Signer) mac(payload []byte) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(label))
	h.Write(payload)
	return h.Sum(nil)
}

// Path is the route the API serves unsubscribe links at, before the token.
const Path = "/unsubscribe/"

// Links makes the List-Unsubscribe URL of a notice: Base (PUBLIC_BASE_URL,
// without a trailing slash) + Path + a token issued now.
type Links struct {
	Base   string
	Signer *Signer
	Now    func() time.Time // nil: time.Now
}

// URL returns the link that unsubscribes recipient from tenant's notices.
func (l *Links) URL(tenant, recipient string) (string, error) {
	now := time.Now
	if l.Now != nil {
		now = l.Now
	}
	tok, err := l.Signer.Sign(Token{Tenant: tenant, Recipient: recipient, At: now()})
	if err != nil {
		return "", err
	}
	return l.Base + Path + tok, nil
}
