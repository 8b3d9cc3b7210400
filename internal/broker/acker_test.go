package broker

import (
	"fmt"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// An ack the acker still owes when its channel goes is never sent, and
// the ack call itself returned nil: close is the only place left to say
// that those deliveries will come back. With nothing owed it says nothing.
func TestAckerCloseReportsAcksOwed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		acked []uint64 // of deliveries 1..3, none settled otherwise
		owed  int      // acks_owed reported; 0: no line
	}{
		{name: "nothing settled", acked: nil, owed: 0},
		{name: "acks waiting behind an unsettled delivery", acked: []uint64{2, 3}, owed: 2},
		{name: "everything acked and flushed", acked: []uint64{1, 2, 3}, owed: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			e.queue(t, "work", nil)
			ch, err := e.conn.Channel()
			require.NoError(t, err)
			t.Cleanup(func() { _ = ch.Close() })
			for i := range 3 {
				require.NoError(t, e.ch.Publish("x", "work", false, false, amqp.Publishing{MessageId: fmt.Sprint(i)}))
			}
			ds, err := ch.Consume("work", "", false, false, false, false, nil)
			require.NoError(t, err)
			for range 3 {
				select {
				case <-ds:
				case <-time.After(10 * time.Second):
					t.Fatal("deliveries did not arrive")
				}
			}
			core, logs := observer.New(zap.WarnLevel)
			a := newAcker(ch, zap.New(core))
			for _, tag := range tc.acked {
				require.NoError(t, a.ack(tag))
			}
			if len(tc.acked) == 3 {
				require.NoError(t, a.flush()) // nothing owed any more
			}
			a.close()
			lines := logs.FilterMessageSnippet("acks owed when the channel closed").All()
			if tc.owed == 0 {
				require.Empty(t, lines)
				return
			}
			require.Len(t, lines, 1)
			require.EqualValues(t, tc.owed, lines[0].ContextMap()["acks_owed"])
			require.ErrorIs(t, a.ack(1), amqp.ErrClosed, "a closed acker refuses, so its caller logs the delivery")
		})
	}
}
