package sms

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/provider"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func setupLog(t *testing.T) (provider.SMSSender, *syncBuffer, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.DebugLevel)
	out := &syncBuffer{}
	s, err := New(NameLog, Config{}, zap.New(core), out)
	require.NoError(t, err)
	return s, out, logs
}

func TestLogSenderWarnsOnConstruction(t *testing.T) {
	t.Parallel()
	_, _, logs := setupLog(t)
	entries := logs.AllUntimed()
	require.Len(t, entries, 1)
	require.Equal(t, zapcore.WarnLevel, entries[0].Level)
	require.Contains(t, entries[0].Message, "development only")
}

func TestLogSenderSend(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		msg     provider.SMS
		ctx     func() context.Context
		wantID  string
		wantOut []string
		wantErr *wantErr
	}{
		{name: "prints masked recipient and text", msg: verifySMS(), wantID: "task-7f3a",
			wantOut: []string{"to=+86*******1234", "task=task-7f3a", "Your msgpulse code is " + testCode}},
		{name: "no task id gets a sequence id", msg: provider.SMS{To: "+15005550006", Text: "hi"}, wantID: "log-1",
			wantOut: []string{"to=+15*****0006", `text="hi"`}},
		{name: "bad recipient", msg: provider.SMS{To: "13900001234", Text: "x"},
			wantErr: &wantErr{class: provider.Permanent, code: "invalid_recipient"}},
		{name: "cancelled context", msg: verifySMS(), ctx: func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, wantErr: &wantErr{class: provider.Transient, code: "canceled"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, out, logs := setupLog(t)
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx()
			}
			rc, err := s.SendSMS(ctx, tc.msg)
			if tc.wantErr != nil {
				_ = requireProviderError(t, err, NameLog, *tc.wantErr)
				require.Empty(t, out.String())
				return
			}
			require.NoError(t, err)
			require.Equal(t, provider.Receipt{Provider: NameLog, MessageID: tc.wantID}, rc)
			for _, w := range tc.wantOut {
				require.Contains(t, out.String(), w)
			}
			require.NotContains(t, out.String(), tc.msg.To, "full recipient printed")
			require.True(t, strings.HasSuffix(out.String(), "\n"))
			// The zap logger got the construction warning and nothing else:
			// no line of it may carry the text.
			require.Len(t, logs.AllUntimed(), 1)
		})
	}
}

func TestLogSenderWriteFailureIsTransient(t *testing.T) {
	t.Parallel()
	s, err := New(NameLog, Config{}, zap.NewNop(), failWriter{})
	require.NoError(t, err)
	_, err = s.SendSMS(context.Background(), verifySMS())
	_ = requireProviderError(t, err, NameLog, wantErr{class: provider.Transient, code: "write"})
}
