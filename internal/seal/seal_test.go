package seal

import (
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
