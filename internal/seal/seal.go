// Package seal holds the keys that protect verification codes: a keyed
// digest (HMAC-SHA256) that is all Redis ever stores of a code, and
// authenticated encryption (AES-256-GCM) so the code can travel through
// RabbitMQ to the consumer without being readable on the broker, in a DLQ
// dump or in a log. Both keys derive from one secret (CODE_SECRET) via HKDF.
//
// It must never return or log a plaintext code except from Open, and Open's
// callers (the consumer rendering a message, `dlq show --reveal`) are the
// only places a code exists in clear after the API generated it.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
)

// MinSecretLen is the shortest CODE_SECRET accepted.
const MinSecretLen = 32

// DevSecret is the local-development default. Programs warn when they run
// with it.
const DevSecret = "msgpulse-development-secret-do-not-use-in-production"

// Keys digests and seals codes.
type Keys struct {
	mac  []byte
	aead cipher.AEAD
	macs sync.Pool // of HMAC-SHA256 keyed with mac
}

// ErrOpen means a sealed value was tampered with or sealed with another key.
var ErrOpen = errors.New("cannot open sealed code (wrong CODE_SECRET or tampered message)")

// New derives the keys from secret.
func New(secret string) (*Keys, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("secret is %d bytes; need at least %d", len(secret), MinSecretLen)
	}
	macKey, err := hkdf.Key(sha256.New, []byte(secret), nil, "msgpulse code digest v1", 32)
	if err != nil {
		return nil, err
	}
	encKey, err := hkdf.Key(sha256.New, []byte(secret), nil, "msgpulse code seal v1", 32)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(encKey)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	k := &Keys{mac: macKey, aead: aead}
	k.macs.New = func() any { return hmac.New(sha256.New, k.mac) }
	return k, nil
}

// Digest returns hex HMAC-SHA256 over parts, joined unambiguously. Bind the
// code to its context (channel, recipient, purpose) so a digest cannot be
// replayed elsewhere.
func (k *Keys) Digest(parts ...string) string {
	// A pooled HMAC and one Write: this runs on every code request and
	// every verify, and hmac.New plus an Fprintf per part cost more than
	// the hashing itself.
	h := k.macs.Get().(hash.Hash)
	defer k.macs.Put(h)
	h.Reset()
	var stack [256]byte
	buf := stack[:0]
	for _, p := range parts {
		buf = strconv.AppendInt(buf, int64(len(p)), 10)
		buf = append(buf, ':')
		buf = append(buf, p...)
		buf = append(buf, '|')
	}
	_, _ = h.Write(buf)
	var sum [sha256.Size]byte
	return hex.EncodeToString(h.Sum(sum[:0]))
}

// Equal compares two digests in constant time.
func Equal(a, b string) bool {
	return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1
}

// Seal encrypts plaintext bound to aad (use the taskId) as "v1.<base64>".
func (k *Keys) Seal(plaintext, aad string) (string, error) {
	nonce := make([]byte, k.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := k.aead.Seal(nonce, nonce, []byte(plaintext), []byte(aad))
	return "v1." + base64.RawURLEncoding.EncodeToString(out), nil
}

// Open decrypts a value from Seal with the same aad.
func (k *Keys) Open(sealed, aad string) (string, error) {
	rest, ok := strings.CutPrefix(sealed, "v1.")
	if !ok {
		return "", ErrOpen
	}
	raw, err := base64.RawURLEncoding.DecodeString(rest)
	if err != nil || len(raw) < k.aead.NonceSize() {
		return "", ErrOpen
	}
	n := k.aead.NonceSize()
	pt, err := k.aead.Open(nil, raw[:n], raw[n:], []byte(aad))
	if err != nil {
		return "", ErrOpen
	}
	return string(pt), nil
}
