package status_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
)

// kinds are the receipt kinds in the order of TestReceiptRules' columns.
var kinds = []receipt.Kind{receipt.Delivered, receipt.Undelivered, receipt.Bounced, receipt.Complained, receipt.Delayed, receipt.Accepted}

// TestReceiptRules applies each kind of receipt to a record in each state
// and checks where it ends ("=" : the state stays).
func TestReceiptRules(t *testing.T) {
	t.Parallel()
	e := setup(t)
	//                  delivered      undelivered    bounced    complained    delayed accepted
	anyEarlier := []string{"delivered", "undelivered", "bounced", "complained", "=", "="}
	firstStays := []string{"=", "=", "=", "complained", "=", "="}
	table := map[status.State][]string{
		status.Queued:      anyEarlier,
		status.Scheduled:   anyEarlier,
		status.Sending:     anyEarlier, // the crash window: sent, but "sent" not written yet
		status.Retrying:    anyEarlier,
		status.Sent:        anyEarlier,
		status.Failed:      anyEarlier, // a retry failed after the provider had accepted the send
		status.Expired:     anyEarlier,
		status.Delivered:   firstStays,
		status.Undelivered: firstStays,
		status.Bounced:     firstStays,
		status.Complained:  {"=", "=", "=", "=", "=", "="},
	}
	require.Len(t, table, len(status.States), "every state has a row")
	for from, row := range table {
		for i, k := range kinds {
			t.Run(fmt.Sprintf("%s+%s", from, k), func(t *testing.T) {
				t.Parallel()
				id := fmt.Sprintf("r-%s-%s", from, k)
				before := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()
				require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: id, Channel: "sms", Status: from, ReceiptCode: "old", CreatedAt: before, UpdatedAt: before}))
				at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
				rec, outcome, err := e.s.ApplyReceipt(e.ctx, id, status.ReceiptUpdate{Kind: string(k), Channel: "sms", Code: "30003", Detail: "unreachable", Source: "twilio", At: at})
				require.NoError(t, err)
				changed := outcome == status.Changed
				require.NotEqual(t, status.Duplicate, outcome)
				want := status.State(row[i])
				if row[i] == "=" {
					want = from
				}
				require.Equal(t, want, rec.Status)
				require.Equal(t, want != from, changed)
				got, err := e.s.Get(e.ctx, id)
				require.NoError(t, err)
				require.Equal(t, rec, got, "the record returned is the one stored")
				require.Equal(t, []status.Event{{Kind: string(k), Code: "30003", Detail: "unreachable", At: at, Source: "twilio"}}, got.Events,
					"every receipt is kept as an event, whether it changed the state or not")
				require.True(t, got.UpdatedAt.After(before))
				if changed {
					require.Equal(t, "30003", got.ReceiptCode)
					require.Equal(t, "unreachable", got.ReceiptDetail)
					require.Equal(t, "twilio", got.ReceiptSource)
				} else {
					require.Equal(t, "old", got.ReceiptCode, "a receipt that changes no state leaves the last one's code")
				}
				if changed && want == status.Delivered {
					require.Equal(t, &at, got.DeliveredAt, "the handset's time")
				} else {
					require.Nil(t, got.DeliveredAt)
				}
			})
		}
	}
}

// TestLateUpdatesNeverUndoAReceipt: the consumer's updates (a late "sent",
// a redelivery's "sending", a replay's "failed") leave a receipt state.
func TestLateUpdatesNeverUndoAReceipt(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, st := range []status.State{status.Delivered, status.Undelivered, status.Bounced, status.Complained} {
		for _, late := range []status.State{status.Queued, status.Scheduled, status.Sending, status.Retrying, status.Sent, status.Failed, status.Expired, ""} {
			id := fmt.Sprintf("late-%s-%s", st, late)
			require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: id, Channel: "email", Status: status.Sent}))
			_, _, err := e.s.ApplyReceipt(e.ctx, id, status.ReceiptUpdate{Kind: string(st), Code: "5.1.1", Source: "dsn"})
			require.NoError(t, err)
			before, err := e.s.Get(e.ctx, id)
			require.NoError(t, err)
			_, err = e.s.Update(e.ctx, id, status.Update{Status: late, IncAttempts: true, LastError: str("late")})
			require.ErrorIs(t, err, status.ErrFinal, "%s after %s", late, st)
			_, err = e.s.Update(e.ctx, id, status.Update{Status: late, Blind: true})
			require.ErrorIs(t, err, status.ErrFinal, "%s after %s, blind", late, st)
			after, err := e.s.Get(e.ctx, id)
			require.NoError(t, err)
			require.Equal(t, before, after, "%s after %s changes nothing", late, st)
		}
	}
	_, err := e.s.Update(e.ctx, "x", status.Update{Status: status.Delivered})
	require.Error(t, err, "only ApplyReceipt sets a receipt state")
}

// TestReceiptsOutOfOrderAndTwice: the same report twice, a delivery
// report before the consumer's "sent", an "accepted" after "delivered".
func TestReceiptsOutOfOrderAndTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "ooo", Channel: "sms", Status: status.Sending}))
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	delivered := status.ReceiptUpdate{Kind: string(receipt.Delivered), Code: "DELIVERED", Source: "aliyun", At: t0}
	first, outcome, err := e.s.ApplyReceipt(e.ctx, "ooo", delivered)
	require.NoError(t, err)
	require.Equal(t, status.Changed, outcome)
	require.Equal(t, status.Delivered, first.Status)

	// The vendor sends it again: nothing changes, not even updatedAt.
	again, outcome, err := e.s.ApplyReceipt(e.ctx, "ooo", delivered)
	require.NoError(t, err)
	require.Equal(t, status.Duplicate, outcome)
	require.Equal(t, first, again)

	// The consumer's "sent", late: delivered stays.
	_, err = e.s.Update(e.ctx, "ooo", status.Update{Status: status.Sent, Provider: str("aliyun"), Blind: true})
	require.ErrorIs(t, err, status.ErrFinal)

	// An intermediate report after the final one: kept, the state stays.
	rec, outcome, err := e.s.ApplyReceipt(e.ctx, "ooo", status.ReceiptUpdate{Kind: string(receipt.Accepted), Source: "aliyun", At: t0.Add(-time.Minute)})
	require.NoError(t, err)
	require.Equal(t, status.Kept, outcome)
	require.Equal(t, status.Delivered, rec.Status)
	require.Equal(t, "DELIVERED", rec.ReceiptCode)
	require.Len(t, rec.Events, 2)
	require.Equal(t, &t0, rec.DeliveredAt)

	// A failure report after delivered: kept, delivered stays.
	rec, outcome, err = e.s.ApplyReceipt(e.ctx, "ooo", status.ReceiptUpdate{Kind: string(receipt.Undelivered), Code: "30003", Source: "twilio", At: t0.Add(time.Minute)})
	require.NoError(t, err)
	require.Equal(t, status.Kept, outcome)
	require.Equal(t, status.Delivered, rec.Status)

	// A complaint follows delivery.
	rec, outcome, err = e.s.ApplyReceipt(e.ctx, "ooo", status.ReceiptUpdate{Kind: string(receipt.Complained), Source: "arf"})
	require.NoError(t, err)
	require.Equal(t, status.Changed, outcome)
	require.Equal(t, status.Complained, rec.Status)
	require.Empty(t, rec.ReceiptCode, "the record says what the last state change's receipt said")
	require.Equal(t, "arf", rec.ReceiptSource)
	require.Equal(t, &t0, rec.DeliveredAt, "when it was delivered stays")
	require.Len(t, rec.Events, 4)

	// A report without a time of its own, twice: once.
	for i, want := range []status.Outcome{status.Kept, status.Duplicate} {
		rec, outcome, err = e.s.ApplyReceipt(e.ctx, "ooo", status.ReceiptUpdate{Kind: string(receipt.Delayed), Code: "4.2.2", Source: "dsn"})
		require.NoError(t, err)
		require.Equal(t, want, outcome, "delay notice %d", i+1)
	}
	require.Len(t, rec.Events, 5)
}

func TestReceiptEventsAreCapped(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "cap", Channel: "email", Status: status.Sent}))
	for i := range status.MaxEvents + 5 {
		_, outcome, err := e.s.ApplyReceipt(e.ctx, "cap", status.ReceiptUpdate{Kind: string(receipt.Delayed), Code: fmt.Sprintf("4.4.%d", i), Source: "dsn"})
		require.NoError(t, err)
		require.Equal(t, status.Kept, outcome, "a delay notice never changes the state")
	}
	rec, err := e.s.Get(e.ctx, "cap")
	require.NoError(t, err)
	require.Equal(t, status.Sent, rec.Status)
	require.Len(t, rec.Events, status.MaxEvents)
	require.Equal(t, "4.4.5", rec.Events[0].Code, "the oldest go first")
	require.Equal(t, fmt.Sprintf("4.4.%d", status.MaxEvents+4), rec.Events[status.MaxEvents-1].Code)
	require.Equal(t, time.Hour, e.ttl(t, "cap").Round(time.Hour), "the TTL is refreshed")
}

func TestReceiptChecksTheRecipient(t *testing.T) {
	t.Parallel()
	e := setup(t)
	keys, err := seal.New(strings.Repeat("k", 32))
	require.NoError(t, err)
	digest := status.DigestRecipient(keys, "sms", "+15005550006")
	require.NotEqual(t, digest, status.DigestRecipient(keys, "sms", "+15005550007"))
	require.NotEqual(t, digest, status.DigestRecipient(keys, "email", "+15005550006"))
	require.NotContains(t, digest, "5005550006")

	// The consumer writes the digest (and the callback URL) with "sending".
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "rcpt", Channel: "sms", Status: status.Queued}))
	_, err = e.s.Update(e.ctx, "rcpt", status.Update{Status: status.Sending, IncAttempts: true, RecipientDigest: &digest, CallbackURL: str("https://cb.example/hook?token=s3cret"), Blind: true})
	require.NoError(t, err)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "nodigest", Channel: "sms", Status: status.Sent}))

	for _, tc := range []struct {
		name, task, digest string
		want               error
	}{
		{"another number", "rcpt", status.DigestRecipient(keys, "sms", "+15005550007"), status.ErrRecipientMismatch},
		{"a record without a digest", "nodigest", digest, status.ErrRecipientMismatch},
		{"another channel", "rcpt", "", status.ErrRecipientMismatch},
		{"no record", "nothing", digest, status.ErrNotFound},
	} {
		before, _ := e.s.Get(e.ctx, tc.task)
		ch := "sms"
		if tc.digest == "" {
			ch = "email"
		}
		_, _, err := e.s.ApplyReceipt(e.ctx, tc.task, status.ReceiptUpdate{Kind: string(receipt.Delivered), Channel: ch, Source: "twilio", RecipientDigest: tc.digest})
		require.ErrorIs(t, err, tc.want, tc.name)
		after, _ := e.s.Get(e.ctx, tc.task)
		require.Equal(t, before, after, "%s: nothing changed", tc.name)
	}
	n, err := e.r.Client.Exists(e.ctx, e.r.Prefix+"status:{nothing}").Result()
	require.NoError(t, err)
	require.Zero(t, n, "a receipt creates no record")

	rec, outcome, err := e.s.ApplyReceipt(e.ctx, "rcpt", status.ReceiptUpdate{Kind: string(receipt.Delivered), Channel: "sms", Source: "twilio", RecipientDigest: digest})
	require.NoError(t, err)
	require.Equal(t, status.Changed, outcome)
	require.Equal(t, "https://cb.example/hook?token=s3cret", rec.CallbackURL)
	require.Equal(t, digest, rec.RecipientDigest)
	require.Equal(t, 1, rec.Attempts)

	_, _, err = e.s.ApplyReceipt(e.ctx, "rcpt", status.ReceiptUpdate{Kind: "opened"})
	require.ErrorIs(t, err, status.ErrInvalidReceipt)
}

// TestReceiptRecordJSON: the receipt's fields are in a record's JSON, the
// callback URL and the digest never; a detail holding a secret is
// redacted.
func TestReceiptRecordJSON(t *testing.T) {
	t.Parallel()
	e := setup(t)
	require.NoError(t, e.s.Create(e.ctx, status.Record{TaskID: "js", Channel: "email", Status: status.Sent,
		CallbackURL: "https://cb.example/p/SECRETPATH?token=QUERYSECRET", RecipientDigest: "DIGESTVALUE"}))
	rec, _, err := e.s.ApplyReceipt(e.ctx, "js", status.ReceiptUpdate{Kind: string(receipt.Bounced), Code: "5.1.1", Source: "dsn",
		Detail: "550 5.1.1 no such user; see https://mx.example/x/y?token=LEAKED"})
	require.NoError(t, err)
	b, err := json.Marshal(rec)
	require.NoError(t, err)
	s := string(b)
	for _, secret := range []string{"SECRETPATH", "QUERYSECRET", "DIGESTVALUE", "callbackUrl", "recipientDigest", "LEAKED"} {
		require.NotContains(t, s, secret)
	}
	for _, f := range []string{`"status":"bounced"`, `"receiptCode":"5.1.1"`, `"receiptSource":"dsn"`, `"receiptDetail":"550 5.1.1 no such user`, `"events":[{"kind":"bounced","code":"5.1.1"`} {
		require.Contains(t, s, f)
	}
	raw, err := e.r.Client.HGet(e.ctx, e.r.Prefix+"status:{js}", "receiptDetail").Result()
	require.NoError(t, err)
	require.NotContains(t, raw, "LEAKED", "redacted before it is stored")
}
