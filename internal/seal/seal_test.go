package seal

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func setup(t *testing.T, secret string) *Keys {
	t.Helper()
	k, err := New(secret)
	require.NoError(t, err)
	return k
}

func TestSealRoundTripAndTamper(t *testing.T) {
	k := setup(t, DevSecret)
	s, err := k.Seal("123456", "task-1")
	require.NoError(t, err)
	require.NotContains(t, s, "123456")
	got, err := k.Open(s, "task-1")
	require.NoError(t, err)
	require.Equal(t, "123456", got)

	other := setup(t, strings.Repeat("x", 40))
	for name, f := range map[string]func() (string, error){
		"other aad":    func() (string, error) { return k.Open(s, "task-2") },
		"other key":    func() (string, error) { return other.Open(s, "task-1") },
		"flipped byte": func() (string, error) { return k.Open(s[:len(s)-2]+"AA", "task-1") },
		"no prefix":    func() (string, error) { return k.Open(strings.TrimPrefix(s, "v1."), "task-1") },
		"garbage":      func() (string, error) { return k.Open("v1.!!!", "task-1") },
	} {
		_, err := f()
		require.ErrorIs(t, err, ErrOpen, name)
	}
}

func TestDigest(t *testing.T) {
	k := setup(t, DevSecret)
	a := k.Digest("mail", "a@b.c", "login", "123456")
	require.Len(t, a, 64)
	require.True(t, Equal(a, k.Digest("mail", "a@b.c", "login", "123456")))
	// Joining is unambiguous: moving a boundary changes the digest.
	require.False(t, Equal(a, k.Digest("mail", "a@b.clogin", "", "123456")))
	require.False(t, Equal(a, setup(t, strings.Repeat("y", 32)).Digest("mail", "a@b.c", "login", "123456")))
	_, err := New("short")
	require.Error(t, err)
}

// Digests are stored in Redis and compared across versions of the API, so
// the encoding must never change: here it is checked against the
// definition, written out the slow way. Parts longer than the stack buffer
// take the heap path.
func TestDigestMatchesItsDefinition(t *testing.T) {
	k, err := New(DevSecret)
	if err != nil {
		t.Fatal(err)
	}
	mac, err := hkdf.Key(sha256.New, []byte(DevSecret), nil, "msgpulse code digest v1", 32)
	if err != nil {
		t.Fatal(err)
	}
	slow := func(parts ...string) string {
		h := hmac.New(sha256.New, mac)
		for _, p := range parts {
			_, _ = fmt.Fprintf(h, "%d:%s|", len(p), p)
		}
		return hex.EncodeToString(h.Sum(nil))
	}
	for _, parts := range [][]string{
		{"email", "user@example.com", "login", "123456"},
		{"sms", "+8613912345678", "", "0000"},
		{},
		{"a|b", "1:c"},
		{strings.Repeat("x", 400), "é中"},
	} {
		if got, want := k.Digest(parts...), slow(parts...); got != want {
			t.Fatalf("Digest(%q) = %s, want %s", parts, got, want)
		}
	}
}

func BenchmarkDigest(b *testing.B) {
	k, err := New(DevSecret)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = k.Digest("email", "user@example.com", "login", "123456")
	}
}

func BenchmarkSeal(b *testing.B) {
	k, err := New(DevSecret)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := k.Seal("123456", "01a1fd48-aac2-75d9-837b-4003a5252f67"); err != nil {
			b.Fatal(err)
		}
	}
}
