package broker

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// Issue 36: the largest body msgpulse puts on the broker
// (envelope.MaxBrokerBytes: BATCH_MAX_BYTES and MAX_MESSAGE_BYTES are held
// to it) is taken by every tested broker at its default max_message_size,
// and on RabbitMQ 4.x, whose default is 16 MiB (3.10's was 128 MiB), one
// byte more is not: the cap is the 4.x default, not a guess.
func TestLargestBodyFitsTheBrokersDefault(t *testing.T) {
	e := setup(t)
	e.queue(t, "big", nil)
	ctx := testenv.Context(t, time.Minute)
	require.NoError(t, e.pub.Publish(ctx, "x", "big", amqp.Publishing{Body: make([]byte, envelope.MaxBrokerBytes)}))
	require.Equal(t, 1, e.depth(t, "big"))
	version, _ := e.conn.Properties["version"].(string)
	if !strings.HasPrefix(version, "3.") {
		err := e.pub.Publish(ctx, "x", "big", amqp.Publishing{Body: make([]byte, envelope.MaxBrokerBytes+1)})
		require.ErrorIs(t, err, ErrTooLarge, "RabbitMQ %s refuses a body over its default max_message_size", version)
		require.False(t, MayBeKept(err), "refused for its size: not kept, safe to say so")
		require.Equal(t, 1, e.depth(t, "big"))
	}
}
