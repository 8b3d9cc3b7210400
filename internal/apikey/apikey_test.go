package apikey

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const hexOf = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08" // sha256("test")
	for _, tc := range []struct {
		entry      string
		name       string
		tenant     string
		scopes     Scopes
		fromDigest bool
		key        string // plaintext that must authenticate
		wantErr    string
	}{
		{entry: "k-0123456789abcdefgh", name: "key-1", tenant: "key-1", scopes: Default, key: "k-0123456789abcdefgh"},
		{entry: "backend:k-0123456789abcdefgh", name: "backend", tenant: "backend", scopes: Default, key: "k-0123456789abcdefgh"},
		{entry: "shop/backend:k-0123456789abcdefgh", name: "shop/backend", tenant: "shop", scopes: Default, key: "k-0123456789abcdefgh"},
		{entry: "shop/backend:k-0123456789abcdefgh:send+read", name: "shop/backend", tenant: "shop", scopes: Scopes(Send | Read), key: "k-0123456789abcdefgh"},
		{entry: "ops:k-0123456789abcdefgh:admin", name: "ops", tenant: "ops", scopes: Scopes(Admin), key: "k-0123456789abcdefgh"},
		{entry: "a/b/c:k-0123456789abcdefgh:read+send", name: "a/b/c", tenant: "a", scopes: Scopes(Send | Read), key: "k-0123456789abcdefgh"},
		{entry: "colon:k-01:23456789abcdefgh", name: "colon", tenant: "colon", scopes: Default, key: "k-01:23456789abcdefgh"},
		{entry: "dig:sha256=" + hexOf, name: "dig", tenant: "dig", scopes: Default, fromDigest: true, key: "test"},
		{entry: "t/dig:sha256=" + strings.ToUpper(hexOf) + ":read", name: "t/dig", tenant: "t", scopes: Scopes(Read), fromDigest: true, key: "test"},
		// Any case of sha256= is a digest: the key is what it digests, never
		// the string "SHA256=<hex>" itself (see TestDigestPrefixInAnyCase).
		{entry: "up:SHA256=" + hexOf, name: "up", tenant: "up", scopes: Default, fromDigest: true, key: "test"},
		{entry: "mixed:Sha256=" + hexOf + ":admin", name: "mixed", tenant: "mixed", scopes: Scopes(Admin), fromDigest: true, key: "test"},
		{entry: "bad:SHA256=" + hexOf[:62], wantErr: "sha256= needs 64 hex digits"},
		{entry: "bad:Sha256=not-hex-0123456789abcdefgh", wantErr: "sha256= needs 64 hex digits"},
		{entry: "short:abc", wantErr: "key 1 (short): key is shorter than 20"},
		{entry: "nineteen:k-0123456789abcdefg", wantErr: "key 1 (nineteen): key is shorter than 20 characters (make one with `openssl rand -hex 24`)"},
		{entry: "bad:k-0123456789abcdefgh:send+wrte", wantErr: `unknown scope "wrte"`},
		{entry: "bad:k-0123456789abcdefgh:", wantErr: ""}, // empty suffix: part of the key
		{entry: "bad:sha256=abcd", wantErr: "sha256= needs 64 hex digits"},
		{entry: "bad:sha256=" + hexOf[:63] + "x", wantErr: "sha256= needs 64 hex digits"},
		{entry: "/x:k-0123456789abcdefgh", wantErr: "needs text on both sides"},
		{entry: "x/:k-0123456789abcdefgh", wantErr: "needs text on both sides"},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			k, err := Parse(tc.entry, 1)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				require.NotContains(t, err.Error(), "0123456789", "an error never quotes the key")
				return
			}
			require.NoError(t, err)
			if tc.name == "" {
				return
			}
			require.Equal(t, tc.name, k.Name)
			require.Equal(t, tc.tenant, k.Tenant)
			require.Equal(t, tc.scopes, k.Scopes)
			require.Equal(t, tc.fromDigest, k.FromDigest)
			set, err := NewSet([]Key{k})
			require.NoError(t, err)
			got, ok := set.Lookup(tc.key)
			require.True(t, ok)
			require.Equal(t, k, got)
			_, ok = set.Lookup(tc.key + "x")
			require.False(t, ok)
		})
	}
}

// name:SHA256=<hex> authenticates with the key whose digest it is, not
// with the text "SHA256=<hex>".
func TestDigestPrefixInAnyCase(t *testing.T) {
	t.Parallel()
	const key = "k-digest-0123456789abcdefgh"
	for _, prefix := range []string{"sha256=", "SHA256=", "Sha256=", "sHa256="} {
		entry := prefix + strings.ToUpper(Digest(key))
		k, err := Parse("shopA/backend:"+entry, 1)
		require.NoError(t, err, prefix)
		require.True(t, k.FromDigest, prefix)
		set, err := NewSet([]Key{k})
		require.NoError(t, err)
		_, ok := set.Lookup(key)
		require.True(t, ok, "%s: the key authenticates", prefix)
		_, ok = set.Lookup(entry)
		require.False(t, ok, "%s: the digest text does not", prefix)
	}
}

// An entry without scopes is a tenant's backend (send+read), not the
// platform operator: admin must be written.
func TestNoScopesIsSendReadNotAdmin(t *testing.T) {
	t.Parallel()
	k, err := Parse("shopA:k1-0123456789abcdefgh", 1)
	require.NoError(t, err)
	require.Equal(t, "send+read", k.Scopes.String())
	require.False(t, k.Scopes.Has(Admin))
	require.False(t, k.Scopes.Allows(Admin))
	op, err := Parse("ops:k2-0123456789abcdefgh:admin", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"ops"}, Admins([]Key{k, op}))
}

func TestScopes(t *testing.T) {
	t.Parallel()
	require.Equal(t, "send+read+admin", All.String())
	s, err := ParseScopes("admin+send")
	require.NoError(t, err)
	require.True(t, s.Has(Admin))
	require.True(t, s.Has(Send))
	require.False(t, s.Has(Read))
	require.Equal(t, "send+admin", s.String())
	require.True(t, Scopes(Admin).Allows(Read), "admin reads every tenant's status")
	require.False(t, Scopes(Admin).Allows(Send))
	require.False(t, Scopes(Read).Allows(Admin))
	_, err = ParseScopes("")
	require.Error(t, err)
	require.Equal(t, "backend", TenantOf("backend"))
	require.Equal(t, "shop", TenantOf("shop/backend"))
}

func TestNewSetRefusesDuplicates(t *testing.T) {
	t.Parallel()
	_, err := NewSet([]Key{New("a", "k-0123456789abcdefgh", All), New("a", "k-9876543210abcdefgh", All)})
	require.ErrorIs(t, err, ErrDuplicate)
	_, err = NewSet([]Key{New("a", "k-0123456789abcdefgh", All), New("b", "k-0123456789abcdefgh", Scopes(Read))})
	require.ErrorIs(t, err, ErrDuplicate)
	require.NotContains(t, err.Error(), "0123456789")
}

// Lookup accepts exactly the configured keys and names the caller; nothing
// near a key (a prefix, an extension, another case, another caller's name)
// passes.
func TestLookupIsExact(t *testing.T) {
	t.Parallel()
	plain := map[string]string{
		"billing":     "k-0123456789abcdefghabcdef",
		"auth":        "k-0123456789abcdefghabcdef0", // the first one plus a character
		"short":       "abcdefgh",
		"same-length": "k-0123456789abcdeg",
	}
	var keys []Key
	for name, k := range plain {
		keys = append(keys, New(name, k, All))
	}
	s, err := NewSet(keys)
	require.NoError(t, err)
	for name, k := range plain {
		got, ok := s.Lookup(k)
		require.True(t, ok, name)
		require.Equal(t, name, got.Name)
	}
	for _, bad := range []string{
		"", "k", "k-0123456789abcde", "k-0123456789abcdefghabcdef01", "K-0123456789ABCDEF", "k-0123456789abcdeh",
		"abcdefg", "abcdefghi", "billing", "billing:k-0123456789abcdefghabcdef", " k-0123456789abcdefghabcdef", "k-0123456789abcdefghabcdef\x00",
		strings.Repeat("a", 4096),
	} {
		_, ok := s.Lookup(bad)
		require.False(t, ok, "%q must not authenticate", bad)
	}
	// ByName (the console's session names its key) is exact too.
	for name := range plain {
		got, ok := s.ByName(name)
		require.True(t, ok, name)
		require.Equal(t, name, got.Name)
	}
	for _, bad := range []string{"", "Billing", "billing ", "bill", plain["billing"]} {
		_, ok := s.ByName(bad)
		require.False(t, ok, "%q is no key's name", bad)
	}
}

// A fingerprint follows the key's value, not its name or how API_KEYS
// spells it, and depends on its salt.
func TestFingerprint(t *testing.T) {
	t.Parallel()
	salt := []byte("session-id")
	plain := New("oncall", "first-key-0123", Scopes(Admin))
	digest, err := Parse("oncall:sha256="+Digest("first-key-0123")+":admin", 1)
	require.NoError(t, err)
	require.Equal(t, plain.Fingerprint(salt), digest.Fingerprint(salt), "the digest form is the same key")
	require.Equal(t, plain.Fingerprint(salt), New("renamed", "first-key-0123", 0).Fingerprint(salt), "name and scopes are not part of it")
	require.NotEqual(t, plain.Fingerprint(salt), New("oncall", "second-key-0123", Scopes(Admin)).Fingerprint(salt), "a changed value changes it")
	require.NotEqual(t, plain.Fingerprint(salt), plain.Fingerprint([]byte("other-session")), "another salt, another fingerprint")
}
