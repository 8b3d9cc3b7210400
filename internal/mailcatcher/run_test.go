package mailcatcher

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/testenv"
)

// syncBuffer is an io.Writer the test can read while Run writes to it.
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

func TestRunPrintsEachMessageAndStopsWithContext(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &syncBuffer{}
	type addrs struct{ smtp, web string }
	ready := make(chan addrs, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, RunConfig{
			Catcher:  Config{SMTPAddr: "127.0.0.1:0"},
			HTTPAddr: "127.0.0.1:0",
			Out:      out,
			Ready:    func(s, w string) { ready <- addrs{s, w} },
		}, zap.NewNop())
	}()
	var a addrs
	select {
	case a = <-ready:
	case err := <-done:
		t.Fatalf("Run ended early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run never became ready")
	}

	require.NoError(t, send(t, a.smtp, nil, "a@x", []string{"alice@example.com"}, crlf(alternative)))
	url := a.web + "/messages/1"
	testenv.WaitFor(t, 5*time.Second, "the message block on stdout", func() bool {
		return strings.Contains(out.String(), "View:    "+url)
	})
	got := out.String()
	for _, want := range []string{"mail #1", "To:      alice@example.com", "Subject: Your code — 1234", "Your code is 1234 — expires soon"} {
		require.Contains(t, got, want)
	}

	resp, err := http.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), "Your code — 1234")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
	_, err = http.Get(a.web + "/")
	require.Error(t, err, "the web server is gone")
}

func TestRunFailsOnBadAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rc   RunConfig
		want string
	}{
		{"bad web address", RunConfig{Catcher: Config{SMTPAddr: "127.0.0.1:0"}, HTTPAddr: "127.0.0.1"}, "web listen"},
		{"bad smtp address", RunConfig{Catcher: Config{SMTPAddr: "127.0.0.1"}, HTTPAddr: "127.0.0.1:0"}, "SMTPAddr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Run(context.Background(), tc.rc, zap.NewNop())
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestFormatMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		m    Message
		want string
	}{
		{"text", Message{ID: 7, To: []string{"a@x", "b@y"}, Subject: "S", Text: "body\n\n"}, "To:      a@x, b@y\nSubject: S\nView:    U\n\nbody\n"},
		{"html only", Message{ID: 7, To: []string{"a@x"}, HTML: "<p>x</p>"}, "(HTML only: open the link above)\n"},
		{"empty", Message{ID: 7}, "(empty body)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := formatMessage(tc.m, "U")
			require.True(t, strings.HasPrefix(got, "──── mail #7 "), got)
			require.Contains(t, got, tc.want)
			require.True(t, strings.HasSuffix(got, "─\n"), got)
		})
	}
}
