package verp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt/verp"
)

const secret = "0123456789abcdef0123456789abcdef-test"

func setup(t *testing.T) *verp.Signer {
	t.Helper()
	s, err := verp.New(secret, "Bounce.Example.COM")
	require.NoError(t, err)
	return s
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct{ name, taskID string }{
		{"uuid v7", "01a1fcd2-99e4-7efe-8f4d-830522746773"},
		{"short id", "t-1"},
		{"id with odd characters", "a+b_c.d/É"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := setup(t)
			addr, err := s.Address(tc.taskID)
			require.NoError(t, err)
			local, domain, _ := strings.Cut(addr, "@")
			require.Equal(t, "bounce.example.com", domain)
			require.LessOrEqual(t, len(local), 64)
			require.Equal(t, strings.ToLower(local), local, "a local part MTAs may fold must be lower-case")
			for _, a := range []string{addr, strings.ToUpper(addr), "<" + addr + ">", addr + "."} {
				got, err := s.TaskID(a)
				require.NoError(t, err, a)
				require.Equal(t, tc.taskID, got)
			}
		})
	}
}

func TestUUIDFormFitsWithRoom(t *testing.T) {
	s := setup(t)
	addr, err := s.Address("01a1fcd2-99e4-7efe-8f4d-830522746773")
	require.NoError(t, err)
	local, _, _ := strings.Cut(addr, "@")
	require.Len(t, local, 46)
}

func TestEveryOneCharacterChangeIsRefused(t *testing.T) {
	s := setup(t)
	addr, err := s.Address("01a1fcd2-99e4-7efe-8f4d-830522746773")
	require.NoError(t, err)
	local, domain, _ := strings.Cut(addr, "@")
	alphabet := "abcdefghijklmnopqrstuvwxyz234567-"
	for i := range local {
		for _, c := range alphabet {
			if byte(c) == local[i] {
				continue
			}
			forged := local[:i] + string(c) + local[i+1:] + "@" + domain
			_, err := s.TaskID(forged)
			if !errors.Is(err, verp.ErrForged) {
				t.Fatalf("%s: %v, want ErrForged", forged, err)
			}
		}
	}
}

func TestRefused(t *testing.T) {
	other, err := verp.New("another secret of at least thirty-two bytes", "bounce.example.com")
	require.NoError(t, err)
	foreign, err := other.Address("01a1fcd2-99e4-7efe-8f4d-830522746773")
	require.NoError(t, err)
	for _, tc := range []struct {
		name, addr string
		want       error
	}{
		{"made-up local part", "postmaster@bounce.example.com", verp.ErrForged},
		{"made-up token shape", "bu-aaaa-aaaa@bounce.example.com", verp.ErrForged},
		{"signed with another key", foreign, verp.ErrForged},
		{"other domain", "bu-x-y@example.com", verp.ErrOtherDomain},
		{"sub domain", "bu-x-y@a.bounce.example.com", verp.ErrOtherDomain},
		{"no domain", "bu-x-y", verp.ErrOtherDomain},
		{"too long", strings.Repeat("a", 70) + "@bounce.example.com", verp.ErrForged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := setup(t).TaskID(tc.addr)
			require.ErrorIs(t, err, tc.want)
		})
	}
}

func TestNewAndAddressRefuse(t *testing.T) {
	_, err := verp.New("short", "bounce.example.com")
	require.Error(t, err)
	_, err = verp.New(secret, "")
	require.Error(t, err)
	_, err = verp.New(secret, "a@b")
	require.Error(t, err)
	_, err = setup(t).Address("")
	require.Error(t, err)
	_, err = setup(t).Address("01A1FCD2-99E4-7EFE-8F4D-830522746773") // not canonical: carried raw, and too long
	require.ErrorIs(t, err, verp.ErrTooLong)
	_, err = setup(t).Address(strings.Repeat("x", 40))
	require.ErrorIs(t, err, verp.ErrTooLong)
}
