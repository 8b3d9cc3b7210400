// Package verp makes and checks the signed envelope senders (VERP return
// paths, "variable envelope return path") of msgpulse's mail: with
// MAIL_BOUNCE_DOMAIN set, every mail's MAIL FROM is
//
//	b<form>-<task id>-<mac>@<bounce domain>
//
// so a bounce or a complaint that comes back to that address names its
// message, and only msgpulse could have made the address: the mac is
// HMAC-SHA256 over the task id, keyed with RECEIPT_SECRET, cut to 80 bits.
// The mail provider signs (Address); the bounce receiver verifies
// (TaskID).
//
// Mail servers may fold the case of a local part, so everything in it is
// lower-case base32 and the check lower-cases first. A UUID task id (the
// API's) is carried as its 16 bytes, so the local part stays at 46
// characters, under RFC 5321's 64.
//
// It must never accept an address whose mac does not verify (a forged
// bounce must change nothing), compare macs other than in constant time,
// or put the key anywhere but into the HMAC.
package verp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// MinSecret is the shortest key New accepts, in bytes (RECEIPT_SECRET's
// rule).
const MinSecret = 32

// macBytes is the mac's length: 80 bits, 16 base32 characters. A forger
// has to guess it per message, and every guess costs an SMTP transaction.
const macBytes = 10

// maxLocal is RFC 5321's limit on a local part.
const maxLocal = 64

// label keeps these macs apart from anything else RECEIPT_SECRET signs
// (the unsubscribe links): a token of one kind is never valid as another.
const label = "msgpulse verp v1\x00"

// Forms of the task id in the local part.
const (
	formUUID = "bu" // a canonical UUID, as its 16 bytes
	formRaw  = "br" // any other id, as its bytes
)

var enc = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

var (
	// ErrForged: the address is at the bounce domain but is not one
	// msgpulse made (a changed character, a made-up local part).
	ErrForged = errors.New("verp: address does not verify")
	// ErrOtherDomain: the address is not at the bounce domain.
	ErrOtherDomain = errors.New("verp: not the bounce domain")
	// ErrTooLong: the task id does not fit in a local part; the mail
	// keeps its plain envelope sender.
	ErrTooLong = errors.New("verp: task id too long for a local part")
)

// Signer makes and checks the addresses of one bounce domain.
type Signer struct {
	key    []byte
	domain string
}

// New returns a Signer for domain keyed with secret (at least MinSecret
// bytes).
func New(secret, domain string) (*Signer, error) {
	if len(secret) < MinSecret {
		return nil, fmt.Errorf("verp: the secret must be at least %d bytes", MinSecret)
	}
	domain = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(domain), "."))
	if domain == "" || strings.ContainsAny(domain, "@ \t\r\n<>") {
		return nil, fmt.Errorf("verp: %q is not a domain", domain)
	}
	return &Signer{key: []byte(secret), domain: domain}, nil
}

// Domain is the bounce domain, lower-case.
func (s *Signer) Domain() string { return s.domain }

// Address is the envelope sender of the mail of taskID.
func (s *Signer) Address(taskID string) (string, error) {
	if taskID == "" {
		return "", errors.New("verp: empty task id")
	}
	form, payload := formRaw, []byte(taskID)
	if u, err := uuid.Parse(taskID); err == nil && u.String() == taskID {
		form, payload = formUUID, u[:]
	}
	local := form + "-" + enc.EncodeToString(payload) + "-" + enc.EncodeToString(s.mac(taskID))
	if len(local) > maxLocal {
		return "", ErrTooLong
	}
	return local + "@" + s.domain, nil
}

// TaskID checks addr (an envelope recipient, "<local@domain>" or bare)
// and returns the task it names: ErrOtherDomain when it is not at the
// bounce domain, ErrForged when its mac does not verify.
func (s *Signer) TaskID(addr string) (string, error) {
	addr = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(addr), "<"), ">"))
	at := strings.LastIndexByte(addr, '@')
	if at < 0 || strings.TrimSuffix(addr[at+1:], ".") != s.domain {
		return "", ErrOtherDomain
	}
	return s.verifyLocal(addr[:at])
}

func (s *Signer) verifyLocal(local string) (string, error) {
	if len(local) > maxLocal {
		return "", ErrForged
	}
	parts := strings.Split(local, "-")
	if len(parts) != 3 {
		return "", ErrForged
	}
	payload, err1 := enc.DecodeString(parts[1])
	mac, err2 := enc.DecodeString(parts[2])
	// Re-encoding must give the same text: base32 ignores the spare low
	// bits of a last character, and a changed character must never name
	// the same task.
	if err1 != nil || err2 != nil || len(mac) != macBytes || enc.EncodeToString(payload) != parts[1] {
		return "", ErrForged
	}
	var taskID string
	switch parts[0] {
	case formUUID:
		u, err := uuid.FromBytes(payload)
		if err != nil {
			return "", ErrForged
		}
		taskID = u.String()
	case formRaw:
		taskID = string(payload)
	default:
		return "", ErrForged
	}
	if !hmac.Equal(mac, s.mac(taskID)) {
		return "", ErrForged
	}
	return taskID, nil
}

func (s *Signer) mac(taskID string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(label))
	h.Write([]byte(taskID))
	return h.Sum(nil)[:macBytes]
}
