package mail

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A server reply reaches logs, status records, callbacks and the DLQ tool:
// it must not carry the recipient or a code, whatever the server quotes.
func TestTrimReplyHidesRecipientAndCodes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"4.2.1 mailbox alice@example.com busy", "4.2.1 mailbox a***e@example.com busy"},
		{"5.7.1 rejected by content filter: Subject: Your verification code is 482913",
			"5.7.1 rejected by content filter: Subject: Your verification code is ****"},
		{"5.7.1 spam: \"code:0042\" and 12345678901", "5.7.1 spam: \"code:****\" and ****"},
		{"2.0.0 Ok: queued as 4Bx7Kp2Zq", "2.0.0 Ok: queued as 4Bx7Kp2Zq"},
		{"4.4.2 127.0.0.1 timeout after 300s", "4.4.2 127.0.0.1 timeout after 300s"},
	} {
		require.Equal(t, tc.want, trimReply(tc.in, "<alice@example.com>"), tc.in)
	}
}
