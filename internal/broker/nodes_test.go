package broker

import (
	"context"
	"strings"
	"testing"
	"time"

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
