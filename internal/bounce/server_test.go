package bounce_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/textproto"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/bounce"
	"github.com/msgpulse/msgpulse/internal/receipt"
)

const taskID = "01a1fcd2-99e4-7efe-8f4d-830522746773"

func code(err error) int {
	var te *textproto.Error
	if errors.As(err, &te) {
		return te.Code
	}
	return 0
}

func TestReceiverAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		to      func(r *receiver) string
		fail    error
		status  string
		code    int  // 0 = 250
		applied bool // a receipt reached the applier and was stored
	}{
		{name: "signed address", status: "5.1.1", applied: true},
		{name: "4.x.x is a delay", status: "4.2.2", applied: true},
		{name: "other domain", to: func(*receiver) string { return "bu-x-y@example.org" }, status: "5.1.1", code: 550},
		{name: "one character changed", to: func(r *receiver) string {
			a, _ := r.signer.Address(taskID)
			return strings.Replace(a, "bu-a", "bu-b", 1)
		}, status: "5.1.1"},
		{name: "made-up address", to: func(*receiver) string { return "postmaster@bounce.h45b.test" }, status: "5.1.1"},
		{name: "store down", fail: errRedisDown, status: "5.1.1", code: 451},
		{name: "unknown message", fail: receipt.ErrUnknownMessage, status: "5.1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			if tc.fail != nil {
				rec.setFail(func(receipt.Receipt) error { return tc.fail })
			}
			r := startReceiver(t, "bounce.h45b.test", "127.0.0.1:0", rec, nil)
			to, err := r.signer.Address(taskID)
			require.NoError(t, err)
			if tc.to != nil {
				to = tc.to(r)
			}
			err = send(r.Addr(), "", []string{to}, dsn(to, "Bob@Example.com", tc.status))
			require.Equal(t, tc.code, code(err), "%v", err)
			if !tc.applied {
				require.Empty(t, rec.Applied())
				return
			}
			got := rec.Applied()
			require.Len(t, got, 1)
			require.Equal(t, taskID, got[0].TaskID)
			require.Equal(t, tc.status, got[0].Code)
			require.Equal(t, "bob@example.com", got[0].Recipient)
		})
	}
}

func TestReceiverRefusesToStartWithoutApplier(t *testing.T) {
	t.Parallel()
	_, err := bounce.New(bounce.Config{Addr: "127.0.0.1:0"})
	require.ErrorIs(t, err, bounce.ErrNoApplier)
}

func TestReceiverBounds(t *testing.T) {
	t.Parallel()
	t.Run("message size", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, "bounce.h45b.test", "127.0.0.1:0", &recorder{}, func(c *bounce.Config) { c.MaxMessageBytes = 1024 })
		to, err := r.signer.Address(taskID)
		require.NoError(t, err)
		err = send(r.Addr(), "", []string{to}, dsn(to, "bob@example.com", "5.1.1")+strings.Repeat("padding line\n", 200))
		require.Equal(t, 552, code(err), "%v", err)
	})
	t.Run("recipients", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, "bounce.h45b.test", "127.0.0.1:0", &recorder{}, func(c *bounce.Config) { c.MaxRecipients = 2 })
		err := send(r.Addr(), "", []string{"a@bounce.h45b.test", "b@bounce.h45b.test", "c@bounce.h45b.test"}, "x")
		require.Equal(t, 452, code(err), "%v", err)
	})
	t.Run("connections", func(t *testing.T) {
		t.Parallel()
		r := startReceiver(t, "bounce.h45b.test", "127.0.0.1:0", &recorder{}, func(c *bounce.Config) { c.MaxConnections = 1 })
		first, err := net.Dial("tcp", r.Addr())
		require.NoError(t, err)
		defer func() { _ = first.Close() }()
		greeting, err := bufio.NewReader(first).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(greeting, "220 "), greeting)
		second, err := net.Dial("tcp", r.Addr())
		require.NoError(t, err)
		defer func() { _ = second.Close() }()
		reply, err := bufio.NewReader(second).ReadString('\n')
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(reply, "421 "), reply)
		_ = first.Close()
		// The slot is free again once the first is gone.
		eventually(t, 10*time.Second, "a connection after the first closed", func() bool {
			c, err := net.Dial("tcp", r.Addr())
			if err != nil {
				return false
			}
			defer func() { _ = c.Close() }()
			line, _ := bufio.NewReader(c).ReadString('\n')
			return strings.HasPrefix(line, "220 ")
		})
	})
}

// Close lets a mail being applied finish and get its 250, then refuses
// new connections.
func TestReceiverCloseFinishesInFlight(t *testing.T) {
	t.Parallel()
	rec := &recorder{block: make(chan struct{})}
	r := startReceiver(t, "bounce.h45b.test", "127.0.0.1:0", rec, nil)
	to, err := r.signer.Address(taskID)
	require.NoError(t, err)
	sent := make(chan error, 1)
	go func() { sent <- send(r.Addr(), "", []string{to}, dsn(to, "bob@example.com", "5.1.1")) }()
	eventually(t, 10*time.Second, "the apply started", func() bool { return len(rec.Calls()) == 1 })
	closed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		closed <- r.Close(ctx)
	}()
	eventually(t, 10*time.Second, "the listener closed", func() bool {
		c, err := net.Dial("tcp", r.Addr())
		if err == nil {
			_ = c.Close()
		}
		return err != nil
	})
	close(rec.block)
	require.NoError(t, <-sent)
	require.NoError(t, <-closed)
	require.Len(t, rec.Applied(), 1)
}
