package callback_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/callback"
	"github.com/msgpulse/msgpulse/internal/status"
)

// A receipt's callback carries what the receipt said, and never the
// record's callback URL or recipient digest.
func TestPayloadOfAReceipt(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	rec := status.Record{TaskID: "t1", Status: status.Bounced, Channel: "email", Recipient: "a***@example.com", Attempts: 1, UpdatedAt: at,
		ReceiptCode: "5.1.1", ReceiptDetail: "user unknown", ReceiptSource: "dsn", DeliveredAt: &at,
		Events:      []status.Event{{Kind: "bounced", Code: "5.1.1", At: at}},
		CallbackURL: "https://cb.example/hook?token=SECRET", RecipientDigest: "DIGEST"}
	b, err := json.Marshal(callback.PayloadOf(rec))
	require.NoError(t, err)
	require.JSONEq(t, `{"event":"message.status","taskId":"t1","status":"bounced","channel":"email","recipient":"a***@example.com","attempts":1,
		"updatedAt":"2026-11-29T10:00:00Z","receiptCode":"5.1.1","receiptDetail":"user unknown","receiptSource":"dsn","deliveredAt":"2026-11-29T10:00:00Z"}`, string(b))
}
