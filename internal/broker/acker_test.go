package broker

import (
	"fmt"
	"slices"
	"sync"
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
			a := newAcker(ch, zap.New(core), 64, 32)
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

// frames records what an acker sends, in order.
type frames struct {
	mu  sync.Mutex
	out []string
}

func (f *frames) add(s string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.out = append(f.out, s)
	return nil
}

func (f *frames) Ack(tag uint64, multiple bool) error {
	return f.add(fmt.Sprintf("ack %d multiple=%t", tag, multiple))
}

func (f *frames) Nack(tag uint64, multiple, requeue bool) error {
	return f.add(fmt.Sprintf("nack %d multiple=%t requeue=%t", tag, multiple, requeue))
}

func (f *frames) Reject(tag uint64, requeue bool) error {
	return f.add(fmt.Sprintf("reject %d requeue=%t", tag, requeue))
}

func (f *frames) IsClosed() bool { return false }

func (f *frames) sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.out...)
}

// Acks settled out of order wait behind the lowest delivery still out, to
// ride one multiple ack, for as long as the window has room for them
// beyond one delivery per worker (and always an eighth of it): sends
// completing together (a 200 ms provider, thousands in flight) come back
// out of order, and one frame each cost the broker. Once they would take
// places the workers need, they go out one by one. Flushes are called
// directly, so no timer decides the outcome.
func TestAckerHoldsOutOfOrderAcksUntilTheWindowNeedsThem(t *testing.T) {
	seq := func(from, to uint64) []uint64 {
		var out []uint64
		for tag := from; tag <= to; tag++ {
			out = append(out, tag)
		}
		return out
	}
	singles := func(from, to uint64) []string {
		var out []string
		for _, tag := range seq(from, to) {
			out = append(out, fmt.Sprintf("ack %d multiple=false", tag))
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		window, workers int
		acked           []uint64 // in this order, each followed by a flush
		want            []string // in any order
	}{
		{
			name: "room beyond the workers: one multiple ack once the lowest settles", window: 16, workers: 4,
			acked: append(seq(2, 12), 1),
			want:  []string{"ack 12 multiple=true"},
		},
		{
			name: "the room beyond the workers is full: one by one", window: 16, workers: 4,
			acked: append(seq(2, 13), 1),
			want:  append(singles(2, 13), "ack 1 multiple=true"),
		},
		{
			name: "a window of one per worker still holds an eighth", window: 64, workers: 64,
			acked: []uint64{2, 3, 4, 5, 6, 7, 8, 1},
			want:  []string{"ack 8 multiple=true"},
		},
		{
			name: "a window of one per worker, an eighth held: one by one", window: 64, workers: 64,
			acked: append(seq(2, 9), 1),
			want:  append(singles(2, 9), "ack 1 multiple=true"),
		},
		{
			name: "a window of 4: one held is already too many", window: 4, workers: 4,
			acked: []uint64{2, 1},
			want:  []string{"ack 2 multiple=false", "ack 1 multiple=true"},
		},
		{
			name: "in order: every flush sends the multiple ack owed", window: 64, workers: 32,
			acked: []uint64{1, 2, 3},
			want:  []string{"ack 1 multiple=true", "ack 2 multiple=true", "ack 3 multiple=true"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &frames{}
			a := newAcker(f, zap.NewNop(), tc.window, tc.workers)
			defer a.close()
			for _, tag := range tc.acked {
				require.NoError(t, a.ack(tag))
				a.mu.Lock()
				require.NoError(t, a.flushLocked(false))
				a.mu.Unlock()
			}
			// The ones sent one by one go in map order.
			got := f.sent()
			slices.Sort(got)
			slices.Sort(tc.want)
			require.Equal(t, tc.want, got)
		})
	}
}
