package mail

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/verp"
)

// A recipient refused at RCPT TO with a 5.1.x code that says the address
// is dead is a hard bounce during the send: a *receipt.RefusedError that
// still unwraps to the permanent *provider.Error. Anything else stays as
// it was.
func TestRefusedRecipientIsABounce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		stage  mailcatcher.Stage
		code   int
		reply  string
		want   string // the receipt's Code; "" = no RefusedError
		detail string
	}{
		{name: "550 5.1.1 at RCPT", stage: mailcatcher.StageRcpt, code: 550,
			reply: "5.1.1 <Bob@Example.com>: Recipient address rejected: User unknown in local recipient table 123456",
			want:  "5.1.1", detail: "550 5.1.1 <B***b@Example.com>: Recipient address rejected: User unknown in local recipient table ****"},
		{name: "550 5.1.10 null MX", stage: mailcatcher.StageRcpt, code: 550, reply: "5.1.10 Recipient address rejected: Domain has null MX", want: "5.1.10"},
		{name: "553 5.1.2 no such domain", stage: mailcatcher.StageRcpt, code: 553, reply: "5.1.2 domain not found", want: "5.1.2"},
		{name: "5.1.8 names the sender", stage: mailcatcher.StageRcpt, code: 553, reply: "5.1.8 Sender address rejected: Domain not found"},
		{name: "5.7.1 policy", stage: mailcatcher.StageRcpt, code: 554, reply: "5.7.1 Relay access denied"},
		{name: "no enhanced code", stage: mailcatcher.StageRcpt, code: 550, reply: "no such user here"},
		{name: "450 4.1.1 is transient", stage: mailcatcher.StageRcpt, code: 450, reply: "4.1.1 mailbox unavailable"},
		{name: "5.1.1 at DATA is not at RCPT", stage: mailcatcher.StageData, code: 550, reply: "5.1.1 mailbox unavailable"},
	} {
		for _, pipelined := range []bool{false, true} {
			t.Run(tc.name+map[bool]string{false: "", true: " pipelined"}[pipelined], func(t *testing.T) {
				t.Parallel()
				m, srv := setup(t, mailcatcher.Config{}, func(c *Config) { c.Pipelining, c.Chunking = pipelined, pipelined })
				srv.SetHook(func(e mailcatcher.Envelope) error {
					if e.Stage == tc.stage {
						return mailcatcher.Reject(tc.code, tc.reply)
					}
					return nil
				})
				_, err := m.SendMail(ctx(t), provider.Mail{To: "Bob <Bob@Example.com>", Subject: "s", Text: "t", TaskID: "t1"})
				require.Error(t, err)
				var pe *provider.Error
				require.True(t, errors.As(err, &pe), "%v", err)
				var re *receipt.RefusedError
				if tc.want == "" {
					require.False(t, errors.As(err, &re), "%v", err)
					return
				}
				require.True(t, errors.As(err, &re), "%v", err)
				require.Equal(t, provider.Permanent, pe.Class)
				require.Equal(t, receipt.Receipt{Channel: "email", Kind: receipt.Bounced, Code: tc.want, Detail: re.Receipt.Detail,
					Source: "smtp", Recipient: "bob@example.com", Suppress: receipt.SuppressHardBounce}, re.Receipt)
				require.NotContains(t, strings.ToLower(re.Receipt.Detail), "bob@example.com")
				if tc.detail != "" {
					require.Equal(t, tc.detail, re.Receipt.Detail)
				}
			})
		}
	}
}

// With a ReturnPath, MAIL FROM is the task's signed address (the header
// From stays SMTP_FROM); without one, or for a task id that does not fit,
// it is SMTP_FROM's address.
func TestEnvelopeSender(t *testing.T) {
	t.Parallel()
	signer, err := verp.New(strings.Repeat("k", 32), "bounces.example.net")
	require.NoError(t, err)
	const uuidTask = "01a1fcd2-99e4-7efe-8f4d-830522746773"
	want, err := signer.Address(uuidTask)
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		rp     ReturnPath
		taskID string
		from   string
	}{
		{"verp", signer, uuidTask, want},
		{"verp, id too long", signer, strings.Repeat("x", 60), "no-reply@msgpulse.local"},
		{"no bounce domain", nil, uuidTask, "no-reply@msgpulse.local"},
	} {
		for _, pipelined := range []bool{false, true} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				m, srv := setup(t, mailcatcher.Config{}, func(c *Config) { c.ReturnPath, c.Pipelining = tc.rp, pipelined })
				_, err := m.SendMail(ctx(t), provider.Mail{To: "bob@example.com", Subject: "s", Text: "t", TaskID: tc.taskID})
				require.NoError(t, err)
				got := srv.Messages()[0]
				require.Equal(t, tc.from, got.From)
				require.Contains(t, got.Header("From"), "no-reply@msgpulse.local")
				if tc.rp != nil && tc.from == want {
					id, err := signer.TaskID(got.From)
					require.NoError(t, err)
					require.Equal(t, tc.taskID, id)
				}
			})
		}
	}
}
