package apikey

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Scope is one right a key may carry.
type Scope uint8

// The scopes. An entry without scopes has Default: send and read, never
// admin, which must be written.
const (
	// Send: request codes, verify them, send messages and batches.
	Send Scope = 1 << iota
	// Read: status of the key's own tenant's messages and batches.
	Read
	// Admin: the platform operator. Every tenant's messages, batches and
	// dead letters, the global rate limits, queue and DLQ statistics, the
	// console. Never implied: an entry must name it.
	Admin
)

// Scopes is a set of Scope.
type Scopes uint8

// All is every scope.
const All = Scopes(Send | Read | Admin)

// Default is what an entry without scopes gets: a tenant's backend sends
// and reads its own tenant's statuses. Admin spans every tenant, so it is
// given only where API_KEYS writes it.
const Default = Scopes(Send | Read)

var names = []struct {
	s    Scope
	name string
}{{Send, "send"}, {Read, "read"}, {Admin, "admin"}}

// String is the scope's name as API_KEYS spells it.
func (s Scope) String() string {
	for _, n := range names {
		if n.s == s {
			return n.name
		}
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Has reports whether the set holds s.
func (ss Scopes) Has(s Scope) bool { return ss&Scopes(s) != 0 }

// Allows reports whether the set grants s: Admin grants Read too (every
// tenant's status), so an on-call key needs no more than admin.
func (ss Scopes) Allows(s Scope) bool {
	return ss.Has(s) || (s == Read && ss.Has(Admin))
}

// String joins the set's names with "+", as API_KEYS spells it.
func (ss Scopes) String() string {
	var out []string
	for _, n := range names {
		if ss.Has(n.s) {
			out = append(out, n.name)
		}
	}
	return strings.Join(out, "+")
}

// ParseScopes reads "send+read+admin" (any non-empty subset, any order).
func ParseScopes(s string) (Scopes, error) {
	var out Scopes
	for part := range strings.SplitSeq(s, "+") {
		found := false
		for _, n := range names {
			if part == n.name {
				out |= Scopes(n.s)
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown scope %q (want send, read or admin joined by +)", part)
		}
	}
	return out, nil
}

// DefaultTenant owns records written before tenants existed, and the
// anonymous caller of API_AUTH=disabled.
const DefaultTenant = "default"

// TenantOf is the tenant of a key name: the part before the first "/"
// ("shop/backend" is tenant "shop"), else the whole name. A name without
// "/" is a tenant of its own, so that API_KEYS=shopA:k1,shopB:k2 makes two
// tenants that cannot read each other's messages: putting keys together
// must be written ("shop/web", "shop/batch"), never the default.
func TenantOf(name string) string {
	t, _, _ := strings.Cut(name, "/")
	return t
}

// Key is one configured key. Only its digest is kept.
type Key struct {
	Name   string
	Tenant string
	Scopes Scopes
	// FromDigest: API_KEYS gave the digest (sha256=HEX), not the key.
	FromDigest bool
	digest     [sha256.Size]byte
}

// New is a key from its plaintext, for tests and programs that mint keys.
func New(name, key string, scopes Scopes) Key {
	return Key{Name: name, Tenant: TenantOf(name), Scopes: scopes, digest: sha256.Sum256([]byte(key))}
}

// Anonymous is the caller when authentication is disabled: every scope,
// the default tenant.
var Anonymous = Key{Name: "anonymous", Tenant: DefaultTenant, Scopes: All}

// MinKeyLen is the shortest plaintext key accepted: 20 characters. A key
// is a bearer secret that travels with every request; 8 could be a word.
// `openssl rand -hex 24` makes a good one (48 hex digits, 192 bits).
const MinKeyLen = 20

const digestPrefix = "sha256="

// Parse reads the i-th (1-based) API_KEYS entry: "key", "name:key",
// "name:key:scopes", "name:sha256=HEX" or "name:sha256=HEX:scopes". What
// follows the last ":" is a scope list when it is only letters and "+"; a
// key may contain ":" otherwise. Without scopes the key gets Default. A
// key starting with "sha256=" in any case is a digest, and one that is not
// 64 hex digits is an error, never a plaintext key that happens to start
// so. Errors name the entry, never its key.
func Parse(entry string, i int) (Key, error) {
	name, rest, named := strings.Cut(entry, ":")
	if !named {
		name, rest = fmt.Sprintf("key-%d", i), entry
	}
	fail := func(format string, args ...any) (Key, error) {
		return Key{}, fmt.Errorf("key %d (%s): %s", i, name, fmt.Sprintf(format, args...))
	}
	if name == "" || strings.HasPrefix(name, "/") || strings.HasSuffix(name, "/") {
		return fail("a name needs text on both sides of its \"/\" (tenant/name)")
	}
	scopes := Default
	if j := strings.LastIndexByte(rest, ':'); named && j >= 0 && looksLikeScopes(rest[j+1:]) {
		s, err := ParseScopes(rest[j+1:])
		if err != nil {
			return fail("%v", err)
		}
		scopes, rest = s, rest[:j]
	}
	k := Key{Name: name, Tenant: TenantOf(name), Scopes: scopes}
	if len(rest) >= len(digestPrefix) && strings.EqualFold(rest[:len(digestPrefix)], digestPrefix) {
		b, err := hex.DecodeString(rest[len(digestPrefix):])
		if err != nil || len(b) != sha256.Size {
			return fail("sha256= needs %d hex digits (the SHA-256 of the key)", 2*sha256.Size)
		}
		copy(k.digest[:], b)
		k.FromDigest = true
		return k, nil
	}
	if len(rest) < MinKeyLen {
		return fail("key is shorter than %d characters (make one with `openssl rand -hex 24`)", MinKeyLen)
	}
	k.digest = sha256.Sum256([]byte(rest))
	return k, nil
}

func looksLikeScopes(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if (r < 'a' || r > 'z') && r != '+' {
			return false
		}
	}
	return true
}

// Set is the configured keys.
type Set struct{ keys []Key }

// ErrDuplicate: two entries share a name or a key.
var ErrDuplicate = errors.New("apikey: duplicate")

// NewSet checks that names and keys are unique: two entries with one key
// would make the key's tenant and scopes depend on their order.
func NewSet(keys []Key) (*Set, error) {
	seenName := map[string]bool{}
	seenKey := map[[sha256.Size]byte]string{}
	for _, k := range keys {
		if seenName[k.Name] {
			return nil, fmt.Errorf("%w name %s", ErrDuplicate, k.Name)
		}
		if other, ok := seenKey[k.digest]; ok {
			return nil, fmt.Errorf("%w key: %s and %s have the same key", ErrDuplicate, other, k.Name)
		}
		seenName[k.Name], seenKey[k.digest] = true, k.Name
	}
	return &Set{keys: append([]Key(nil), keys...)}, nil
}

// Len is the number of keys.
func (s *Set) Len() int { return len(s.keys) }

// Lookup finds the presented key. It compares digests of equal length
// (ConstantTimeCompare returns at once on a length mismatch) against every
// key, always, without branching on a match, so timing says nothing about
// a key's length, which key matched, or how much of one.
func (s *Set) Lookup(got string) (Key, bool) {
	sum := sha256.Sum256([]byte(got))
	found, idx := 0, 0
	for i := range s.keys {
		eq := subtle.ConstantTimeCompare(sum[:], s.keys[i].digest[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found == 0 {
		return Key{}, false
	}
	return s.keys[idx], true
}

// ByName finds a key by its name (names are unique), e.g. the key a
// console session was opened with.
func (s *Set) ByName(name string) (Key, bool) {
	for _, k := range s.keys {
		if k.Name == name {
			return k, true
		}
	}
	return Key{}, false
}

// Admins names the keys with the admin scope, in order: the API logs them
// at start, so that an operator sees who holds every tenant's data.
func Admins(keys []Key) []string {
	var out []string
	for _, k := range keys {
		if k.Scopes.Has(Admin) {
			out = append(out, k.Name)
		}
	}
	return out
}

// Digest is the hex SHA-256 of a key, as "name:sha256=HEX" expects it.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Fingerprint is the HMAC-SHA256 of the key's digest under salt. It
// changes when the key's value does (a key given by its digest has the
// fingerprint of its plaintext), so what holds one can tell that a key
// was changed without holding the key; and without salt it tells nothing
// about the key. The console keeps one per session, salted with the
// session's id.
func (k Key) Fingerprint(salt []byte) []byte {
	m := hmac.New(sha256.New, salt)
	m.Write(k.digest[:])
	return m.Sum(nil)
}
