package broker

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/testenv"
)

// A list of nodes where some refuse connections: Dial and a Session both
// end up on the node that answers, whichever node they start at, and no
// error names a password.
func TestURLListSkipsDeadNodes(t *testing.T) {
	t.Parallel()
	b := testenv.NewBroker(t)
	dead, err := envconf.WithVHost("amqp://guest:s3cret@127.0.0.1:1/,amqp://guest:s3cret@127.0.0.1:2/", b.VHost)
	require.NoError(t, err)
	list := dead + "," + b.URL
	for range 4 { // each start picks a random node
		conn, err := Dial(testenv.Context(t, 10*time.Second), Config{URL: list})
		require.NoError(t, err)
		require.NoError(t, conn.Close())
	}

	_, err = Dial(testenv.Context(t, 10*time.Second), Config{URL: dead})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
	for _, node := range []string{"127.0.0.1:1:", "127.0.0.1:2:"} {
		require.True(t, strings.Contains(err.Error(), node), "every node is named: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	s, err := NewSession(Config{URL: list, Logger: zaptest.NewLogger(t)})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	_, err = s.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
}

// A channel that got a nack is never published on again: on RabbitMQ 3.10,
// once a quorum queue's leader died, such a channel kept nacking (found by
// the cluster scenarios). Both paths are checked: a pooled channel (no
// MessageId) and a shared lane (with one).
func TestNackedChannelIsNotReused(t *testing.T) {
	e := setup(t)
	e.queue(t, "q", nil)
	e.full(t, "full")
	ctx := testenv.Context(t, 20*time.Second)
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{Body: []byte("first")}))
	require.Len(t, e.pub.idle, 1, "a confirmed channel goes back to the pool")
	for _, tc := range []struct {
		name string
		id   string
	}{{"pooled channel", ""}, {"shared lane", "m-1"}} {
		err := e.pub.Publish(ctx, "x", "full", amqp.Publishing{MessageId: tc.id, Body: []byte(tc.name)})
		require.ErrorIs(t, err, ErrNacked, tc.name)
	}
	require.Empty(t, e.pub.idle, "the nacked pooled channel was discarded")
	retired := 0
	for _, s := range e.pub.pool("x", "full").slots {
		if s.l != nil && s.l.retired.Load() {
			retired++
		}
	}
	require.Equal(t, 1, retired, "the nacked lane was retired")
	// Publishing goes on, on fresh channels.
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{MessageId: "m-2", Body: []byte("after")}))
	require.NoError(t, e.pub.Publish(ctx, "x", "q", amqp.Publishing{Body: []byte("after")}))
}
