package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// The same Idempotency-Key twice: the same taskId, and one mail. Two
// requests without a key: two mails.
func TestIdempotencyKeyTwiceIsOneMail(t *testing.T) {
	s := newSystem(t)
	_, c := s.api()
	s.consumer("c1")
	ctx := testenv.Context(t, 30*time.Second)
	req := client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: "once@example.com",
		Variables: map[string]string{"title": "t", "content": "c"}}
	first, err := c.SendMessage(ctx, req, client.WithIdempotencyKey("order-1"))
	require.NoError(t, err)
	again, err := c.SendMessage(ctx, req, client.WithIdempotencyKey("order-1"))
	require.NoError(t, err)
	require.Equal(t, first.TaskID, again.TaskID)
	req.Recipient = "twice@example.com"
	a, err := c.SendMessage(ctx, req)
	require.NoError(t, err)
	b, err := c.SendMessage(ctx, req)
	require.NoError(t, err)
	require.NotEqual(t, a.TaskID, b.TaskID)
	testenv.WaitFor(t, 15*time.Second, "the mails", func() bool { return s.mailsTo("twice@example.com") == 2 })
	for _, id := range []string{first.TaskID, a.TaskID, b.TaskID} {
		testenv.WaitFor(t, 10*time.Second, "status sent", func() bool {
			m, err := c.GetMessage(ctx, id)
			require.NoError(t, err)
			return m.Status == client.Status("sent")
		})
	}
	require.Equal(t, 1, s.mailsTo("once@example.com"), "one mail for the key")
}
