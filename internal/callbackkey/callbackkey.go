package callbackkey

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The headers of a callback POST.
const (
	TimestampHeader = "X-Msgpulse-Timestamp" // Unix seconds when the attempt was signed
	TenantHeader    = "X-Msgpulse-Tenant"    // the tenant whose key signed it
	SignatureHeader = "X-Msgpulse-Signature" // "v1=" + hex HMAC-SHA256 of StringToSign
)

// MaxAge is how old a callback's timestamp may be before a receiver refuses
// it as a replay (and how far ahead of the receiver's clock).
const MaxAge = 5 * time.Minute

// MinSecretLen is the shortest CALLBACK_SECRET or CALLBACK_SECRETS value.
const MinSecretLen = 16

// derivation separates derived callback keys from any other use of
// CALLBACK_SECRET: a key is HMAC-SHA256(CALLBACK_SECRET, derivation+tenant).
const derivation = "msgpulse callback v1|"

// ErrNoKey: neither CALLBACK_SECRETS names the tenant nor CALLBACK_SECRET is
// set, so its callbacks cannot be signed.
var ErrNoKey = errors.New("no callback key for the tenant: set CALLBACK_SECRETS (tenant=secret,…) or CALLBACK_SECRET")

// SettingError is a bad CALLBACK_SECRET or CALLBACK_SECRETS: Setting names
// the variable, Msg what is wrong, never a secret.
type SettingError struct{ Setting, Msg string }

func (e *SettingError) Error() string { return e.Setting + ": " + e.Msg }

func bad(setting, format string, args ...any) error {
	return &SettingError{Setting: setting, Msg: fmt.Sprintf(format, args...)}
}

// Keys resolves a tenant's callback key. The zero Keys has none.
type Keys struct {
	explicit map[string]string
	master   string
}

// New checks and keeps the settings: explicit maps tenant → key
// (CALLBACK_SECRETS), master derives the key of any tenant not in explicit
// (CALLBACK_SECRET, empty = none). forbidden are secrets no callback key may
// equal (CODE_SECRET: a tenant holding it could sign console sessions and
// unseal codes). Errors name the tenant or the setting, never a secret.
func New(explicit map[string]string, master string, forbidden ...string) (Keys, error) {
	if master != "" && len(master) < MinSecretLen {
		return Keys{}, bad("CALLBACK_SECRET", "must be at least %d bytes (it is %d)", MinSecretLen, len(master))
	}
	for _, f := range forbidden {
		if f != "" && master == f {
			return Keys{}, bad("CALLBACK_SECRET", "must differ from CODE_SECRET (that one signs console sessions and seals codes)")
		}
	}
	owner := map[string]string{}
	for _, tenant := range sortedKeys(explicit) {
		secret := explicit[tenant]
		switch {
		case tenant == "":
			return Keys{}, bad("CALLBACK_SECRETS", "an entry has no tenant (want tenant=secret)")
		case len(secret) < MinSecretLen:
			return Keys{}, bad("CALLBACK_SECRETS", "the secret of tenant %s must be at least %d bytes (it is %d)", tenant, MinSecretLen, len(secret))
		case secret == master:
			return Keys{}, bad("CALLBACK_SECRETS", "the secret of tenant %s equals CALLBACK_SECRET, which must never be handed to a tenant", tenant)
		}
		for _, f := range forbidden {
			if f != "" && secret == f {
				return Keys{}, bad("CALLBACK_SECRETS", "the secret of tenant %s equals CODE_SECRET (it signs console sessions and seals codes)", tenant)
			}
		}
		if other, dup := owner[secret]; dup {
			return Keys{}, bad("CALLBACK_SECRETS", "tenants %s and %s have the same secret (each could sign the other's callbacks)", other, tenant)
		}
		owner[secret] = tenant
	}
	k := Keys{master: master, explicit: map[string]string{}}
	for t, s := range explicit {
		k.explicit[t] = s
	}
	return k, nil
}

// ParseList reads CALLBACK_SECRETS: "tenant=secret" entries separated by
// commas. Errors name the entry's position or tenant, never its secret.
func ParseList(s string) (map[string]string, error) {
	out := map[string]string{}
	for i, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		tenant, secret, ok := strings.Cut(e, "=")
		tenant, secret = strings.TrimSpace(tenant), strings.TrimSpace(secret)
		if !ok || tenant == "" || secret == "" {
			return nil, fmt.Errorf("entry %d: want tenant=secret", i+1)
		}
		if _, dup := out[tenant]; dup {
			return nil, fmt.Errorf("tenant %s is listed twice", tenant)
		}
		out[tenant] = secret
	}
	return out, nil
}

// Configured reports whether any tenant has a key.
func (k Keys) Configured() bool { return k.master != "" || len(k.explicit) > 0 }

// For is the tenant's callback key: its CALLBACK_SECRETS entry, else the
// one derived from CALLBACK_SECRET, else ErrNoKey.
func (k Keys) For(tenant string) (string, error) {
	if s, ok := k.explicit[tenant]; ok {
		return s, nil
	}
	if k.master == "" {
		return "", fmt.Errorf("tenant %s: %w", tenant, ErrNoKey)
	}
	return Derive(k.master, tenant), nil
}

// Derive is the callback key of tenant under master: the hex of
// HMAC-SHA256(master, "msgpulse callback v1|"+tenant). It is a string, used
// as bytes like any other key, so a receiver needs no decoding.
func Derive(master, tenant string) string {
	m := hmac.New(sha256.New, []byte(master))
	m.Write([]byte(derivation + tenant))
	return hex.EncodeToString(m.Sum(nil))
}

// StringToSign is what a callback's signature covers, one field per line:
//
//	v1\n{timestamp}\n{tenant}\n{url}\n{body}
//
// timestamp is X-Msgpulse-Timestamp (Unix seconds), tenant is
// X-Msgpulse-Tenant, url is the callbackUrl exactly as the message gave it,
// body the raw request body. No field but the body can hold a newline (a
// URL cannot, a tenant is an API key name's prefix), so no two callbacks
// share a string.
func StringToSign(ts int64, tenant, url string, body []byte) []byte {
	head := "v1\n" + strconv.FormatInt(ts, 10) + "\n" + tenant + "\n" + url + "\n"
	return append([]byte(head), body...)
}

// Sign is the X-Msgpulse-Signature value: "v1=" and the hex HMAC-SHA256 of
// StringToSign under key.
func Sign(key string, ts int64, tenant, url string, body []byte) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(StringToSign(ts, tenant, url, body))
	return "v1=" + hex.EncodeToString(m.Sum(nil))
}

// Verification errors.
var (
	ErrBadSignature = errors.New("callback signature does not match")
	ErrStale        = errors.New("callback timestamp is too old or too far ahead (possible replay)")
	ErrWrongTenant  = errors.New("callback is for another tenant")
)

// Verify checks a callback as a receiver must: the signature (header
// value sig) over ts, tenant, url and body under key, the timestamp within
// MaxAge of now, and, when wantTenant is not empty, the tenant.
func Verify(key, sig, ts, tenant, wantTenant, url string, body []byte, now time.Time) error {
	if wantTenant != "" && tenant != wantTenant {
		return ErrWrongTenant
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: timestamp %q is not Unix seconds", ErrStale, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxAge || d < -MaxAge {
		return ErrStale
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(key, sec, tenant, url, body))) {
		return ErrBadSignature
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
