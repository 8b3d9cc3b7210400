package e2e

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

var binDir string

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // every test here skips in -short
	}
	dir, err := os.MkdirTemp("", "msgpulse-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cmd := exec.Command("go", "build", "-o", dir+string(os.PathSeparator), "../../cmd/api", "../../cmd/consumer", "../../cmd/topology")
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: build:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const apiKey = "e2e-key-0123456789"

type system struct {
	t      *testing.T
	broker *testenv.Broker
	redis  *testenv.Redis
	mail   *mailcatcher.Server
	env    []string
}

func newSystem(t *testing.T) *system {
	t.Helper()
	t.Parallel()
	s := &system{t: t, broker: testenv.NewBroker(t), redis: testenv.NewRedis(t)}
	var err error
	s.mail, err = mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.mail.Close() })
	host, port, _ := net.SplitHostPort(s.mail.Addr())
	s.env = []string{
		"AMQP_URL=" + s.broker.URL, "REDIS_URL=" + testenv.RedisURL, "REDIS_PREFIX=" + s.redis.Prefix,
		"RABBITMQ_MANAGEMENT_URL=" + testenv.ManagementURL, "LOG_FORMAT=json", "LOG_LEVEL=info",
		"SMTP_HOST=" + host, "SMTP_PORT=" + port, "SMTP_TLS=none", "SMS_PROVIDER=log",
		"API_KEYS=e2e:" + apiKey, "METRICS_ADDR=127.0.0.1:0", "PATH=" + os.Getenv("PATH"),
		"RETRY_BACKOFF=200ms,400ms,800ms",
	}
	code, out := s.run("topology", "declare")
	require.Equal(t, 0, code, out)
	return s
}

// run runs a command to completion and returns its exit code and output.
func (s *system) run(name string, args ...string) (int, string) {
	return s.runEnv(nil, name, args...)
}

func (s *system) runEnv(extra []string, name string, args ...string) (int, string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, name), args...)
	cmd.Env = append(append([]string{}, s.env...), extra...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	require.NoError(s.t, err)
	return 0, string(out)
}

// proc is a long-running msgpulse process.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *safeBuffer
	done chan struct{} // closed when the process has exited
	err  error         // its exit status, once done is closed
}

type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *safeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *safeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func (s *system) start(name string, extra ...string) *proc {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(binDir, name))
	cmd.Env = append(append([]string{}, s.env...), extra...)
	p := &proc{name: name, cmd: cmd, out: &safeBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	require.NoError(s.t, cmd.Start())
	go func() { p.err = cmd.Wait(); close(p.done) }()
	s.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		if s.t.Failed() {
			s.t.Logf("--- %s output:\n%s", name, p.out.String())
		}
	})
	return p
}

// term sends SIGTERM and waits for a clean exit.
func (p *proc) term(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.done:
		require.NoError(t, p.err, "%s exits 0 on SIGTERM:\n%s", p.name, p.out.String())
	case <-time.After(45 * time.Second):
		t.Fatalf("%s did not stop on SIGTERM", p.name)
	}
}

// kill is a crash: SIGKILL, no chance to ack or clean up.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Kill())
	<-p.done
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// api starts the API and returns a client for it.
func (s *system) api() (*proc, *client.Client) {
	s.t.Helper()
	addr := freePort(s.t)
	p := s.start("api", "HTTP_ADDR="+addr)
	c, err := client.New("http://"+addr, apiKey)
	require.NoError(s.t, err)
	testenv.WaitFor(s.t, 20*time.Second, "api ready", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return c.Ready(ctx) == nil
	})
	return p, c
}

func (s *system) consumer(id string, extra ...string) *proc {
	s.t.Helper()
	p := s.start("consumer", append([]string{"CONSUMER_ID=" + id}, extra...)...)
	testenv.WaitFor(s.t, 20*time.Second, id+" consuming", func() bool {
		return strings.Contains(p.out.String(), `"consumer started"`)
	})
	return p
}

func (s *system) mailsTo(rcpt string) int {
	n := 0
	for _, m := range s.mail.Messages() {
		for _, to := range m.To {
			if to == rcpt {
				n++
			}
		}
	}
	return n
}

// sentBy returns, for each consumer id, how many messages its claims say
// it sent.
func (s *system) sentBy() map[string]int {
	s.t.Helper()
	ctx := context.Background()
	keys, err := s.redis.Client.Keys(ctx, s.redis.Prefix+"mail:sent:*").Result()
	require.NoError(s.t, err)
	out := map[string]int{}
	for _, k := range keys {
		v, err := s.redis.Client.Get(ctx, k).Result()
		require.NoError(s.t, err)
		parts := strings.Split(v, ":")
		if len(parts) >= 3 && parts[0] == "sent" {
			out[strings.Join(parts[1:len(parts)-1], ":")]++
		}
	}
	return out
}

// queued counts messages in every queue of the model, ready or unacked.
func (s *system) queued() int {
	s.t.Helper()
	ctx := context.Background()
	qs, err := s.broker.Mgmt.Queues(ctx, s.broker.VHost)
	require.NoError(s.t, err)
	conn, err := amqp.Dial(s.broker.URL)
	require.NoError(s.t, err)
	defer func() { _ = conn.Close() }()
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	states, err := broker.Inspect(conn, names)
	require.NoError(s.t, err)
	n := 0
	for _, st := range states {
		n += st.Messages
	}
	return n
}
