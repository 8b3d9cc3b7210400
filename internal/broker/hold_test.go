package broker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Issue 36: a handler holds a delivery (its next publish fails for a
// while) without keeping its worker: the one worker handles the next
// deliveries meanwhile, the held one is settled later, and a stop waits
// for it through the grace period, after which its owner settles at once.
// Nothing is handed back: every message is handled once.
func TestHeldDeliveryFreesItsWorkerUntilSettled(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop bool // settled by its owner when the grace period is over
	}{{"settled", false}, {"at stop", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := setup(t)
			e.queue(t, "work", nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			release := make(chan struct{})
			var handled, others atomic.Int64
			heldSettled := make(chan struct{})
			c, err := NewConsumer(ConsumerConfig{Session: e.s, Queue: "work", Concurrency: 1, Prefetch: 10, Grace: 500 * time.Millisecond, Logger: zaptest.NewLogger(t),
				Handler: func(hctx context.Context, d *amqp.Delivery) Action {
					handled.Add(1)
					if string(d.Body) != "hold" {
						others.Add(1)
						return Ack
					}
					h := HoldDelivery(hctx)
					require.NotNil(t, h)
					require.Equal(t, "work", h.Queue())
					go func() {
						defer close(heldSettled)
						select {
						case <-release:
						case <-hctx.Done(): // the grace period is over
						}
						h.Settle(Ack)
					}()
					return Held
				}})
			require.NoError(t, err)
			for _, body := range []string{"hold", "a", "b", "c"} {
				require.NoError(t, e.pub.Publish(ctx, "x", "work", amqp.Publishing{Body: []byte(body)}))
			}
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			testenv.WaitFor(t, 10*time.Second, "the others handled by the one worker while the first is held", func() bool { return others.Load() == 3 })
			require.Zero(t, e.depth(t, "work"), "none ready: the held one is unacked")
			if tc.stop {
				cancel()
				select {
				case <-heldSettled:
					t.Fatal("the held delivery was settled before the grace period was over")
				case <-time.After(100 * time.Millisecond): // give Run the chance to misbehave
				}
			} else {
				close(release)
				<-heldSettled
				cancel()
			}
			require.NoError(t, <-done)
			<-heldSettled
			require.EqualValues(t, 4, handled.Load(), "nothing handed back")
			require.Zero(t, e.depth(t, "work"), "the held one was acked")
		})
	}
}
