package bounce_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/bounce"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

func open(t *testing.T, name string) *os.File {
	t.Helper()
	f, err := os.Open(filepath.Join("testdata", name))
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	return f
}

// Real-world reports as their MTAs write them, each turned into the
// receipts of task "t1".
func TestParseSamples(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		want []receipt.Receipt
	}{
		{
			// Written by scripts/postfix.sh's Postfix (internal/bounce's
			// Postfix test): local delivery to an unknown user.
			file: "postfix-5.1.1.eml",
			want: []receipt.Receipt{{TaskID: "t1", Channel: "email", Kind: receipt.Bounced, Code: "5.1.1",
				Detail: `unknown user: "nobody-1"`, Source: "dsn", Recipient: "nobody-1@mx.msgpulse.test",
				Suppress: receipt.SuppressHardBounce}},
		},
		{
			file: "gmail-5.1.1.eml",
			want: []receipt.Receipt{{TaskID: "t1", Channel: "email", Kind: receipt.Bounced, Code: "5.1.1",
				Detail: "550-5.1.1 The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos or unnecessary spaces. Learn more at https://support.google.com/mail/?p=NoSuchUser x12sor123456qkj.2 - gsmtp",
				At:     time.Date(2026, 11, 29, 12, 12, 9, 0, time.UTC), Source: "dsn", Recipient: "no.such.user.4711@gmail.com",
				Suppress: receipt.SuppressHardBounce}},
		},
		{
			file: "exchange-5.1.10.eml",
			want: []receipt.Receipt{{TaskID: "t1", Channel: "email", Kind: receipt.Bounced, Code: "5.1.10",
				Detail: "550 5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup",
				Source: "dsn", Recipient: "alice.wong@contoso.com", Suppress: receipt.SuppressHardBounce}},
		},
		{
			file: "postfix-delayed.eml",
			want: []receipt.Receipt{{TaskID: "t1", Channel: "email", Kind: receipt.Delayed, Code: "4.2.0",
				Detail: "451 4.2.0 mailbox temporarily unavailable", Source: "dsn", Recipient: "carol@example.net"}},
		},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			rep, err := bounce.Parse(open(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, bounce.TypeDSN, rep.Type)
			require.Equal(t, tc.want, bounce.DSNReceipts(rep, "t1"))
		})
	}
}

func TestParseARF(t *testing.T) {
	t.Parallel()
	const verpAddr = "bu-aaaaaaaaaaaaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbb@bounce.example.com"
	for _, tc := range []struct {
		file string
		want bounce.Feedback
	}{
		{"arf-abuse.eml", bounce.Feedback{Type: "abuse", OriginalMailFrom: "somespammer@example.net", ReturnPath: verpAddr,
			// "EDT", a zone name net/mail does not know, reads as UTC: an hour
			// off is no matter for a complaint.
			Recipient: "dave@isp.example", At: time.Date(2026, 3, 8, 14, 0, 0, 0, time.UTC)}},
		{"arf-headers-only.eml", bounce.Feedback{Type: "abuse", ReturnPath: verpAddr, Recipient: "erin@yahoo.example",
			At: time.Date(2026, 11, 29, 8, 59, 0, 0, time.UTC)}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			t.Parallel()
			rep, err := bounce.Parse(open(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, bounce.TypeARF, rep.Type)
			require.Equal(t, tc.want, *rep.Feedback)
			r, ok := bounce.ARFReceipt(rep, "t1")
			require.True(t, ok)
			require.Equal(t, receipt.Receipt{TaskID: "t1", Channel: "email", Kind: receipt.Complained, Code: "abuse",
				At: tc.want.At, Source: "arf", Recipient: tc.want.Recipient, Suppress: receipt.SuppressComplaint}, r)
		})
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	_, err := bounce.Parse(open(t, "vacation.eml"))
	require.True(t, errors.Is(err, bounce.ErrNotReport), "%v", err)
}

// DSNReceipts' table: what each Status and Action becomes.
func TestDSNReceiptsTable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		action, status string
		kind           receipt.Kind // "" = no receipt
		suppress       receipt.Suppress
	}{
		{"failed", "5.1.1", receipt.Bounced, receipt.SuppressHardBounce},
		{"failed", "5.7.1", receipt.Bounced, receipt.SuppressHardBounce},
		{"failed", "4.4.7", receipt.Bounced, receipt.SuppressNone},
		{"failed", "", receipt.Bounced, receipt.SuppressNone},
		{"delayed", "4.4.1", receipt.Delayed, receipt.SuppressNone},
		{"delayed", "", receipt.Delayed, receipt.SuppressNone},
		{"delivered", "2.0.0", "", ""},
		{"relayed", "2.0.0", "", ""},
		{"expanded", "2.0.0", "", ""},
		{"", "2.1.5", "", ""},
		{"", "", "", ""},
	} {
		t.Run(tc.action+" "+tc.status, func(t *testing.T) {
			t.Parallel()
			got := bounce.DSNReceipts(&bounce.Report{Type: bounce.TypeDSN,
				Recipients: []bounce.RecipientStatus{{Recipient: "a@b.c", Action: tc.action, Status: tc.status}}}, "t1")
			if tc.kind == "" {
				require.Empty(t, got)
				return
			}
			require.Len(t, got, 1)
			require.Equal(t, tc.kind, got[0].Kind)
			require.Equal(t, tc.suppress, got[0].Suppress)
		})
	}
}
