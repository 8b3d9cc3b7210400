package e2e

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
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
	dir, err := testenv.BuildCommands("msgpulse-e2e-", "../../cmd/api", "../../cmd/consumer", "../../cmd/topology", "../../cmd/dlq")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

const apiKey = "e2e-key-0123456789abcdefgh"

type system struct {
	t      *testing.T
	broker *testenv.Broker
	redis  *testenv.Redis
	mail   *mailcatcher.Server
	env    []string
	// apiURL is the last API started's base URL.
	apiURL string
}

// newSystem declares the topology in a fresh vhost; extra (NAME=value)
// is added to every process's environment, the declare's included.
func newSystem(t *testing.T, extra ...string) *system {
	t.Helper()
	t.Parallel()
	s := &system{t: t, broker: testenv.NewBroker(t), redis: testenv.NewRedis(t)}
	var err error
	s.mail, err = mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0", Max: 50_000})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.mail.Close() })
	host, port, _ := net.SplitHostPort(s.mail.Addr())
	s.env = []string{
		"AMQP_URL=" + s.broker.URL, "REDIS_URL=" + testenv.RedisURL, "REDIS_PREFIX=" + s.redis.Prefix,
		"RABBITMQ_MANAGEMENT_URL=" + testenv.ManagementURL, "LOG_FORMAT=json", "LOG_LEVEL=info",
		"SMTP_HOST=" + host, "SMTP_PORT=" + port, "SMTP_TLS=none", "SMS_PROVIDER=log",
		"API_KEYS=e2e:" + apiKey + ":send+read+admin", // admin: the console test logs in with it
		"METRICS_ADDR=127.0.0.1:0", "PATH=" + os.Getenv("PATH"),
		"RETRY_BACKOFF=200ms,400ms,800ms", testenv.QueueEnv(),
	}
	s.env = append(s.env, extra...) // later entries win: a test's QUEUE_TYPE included
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
	return testenv.RunCommand(s.t, filepath.Join(binDir, name), append(append([]string{}, s.env...), extra...), args...)
}

// proc is a long-running msgpulse process.
type proc = testenv.Proc

func (s *system) start(name string, extra ...string) *proc {
	s.t.Helper()
	return testenv.StartProc(s.t, name, filepath.Join(binDir, name), append(append([]string{}, s.env...), extra...))
}

// api starts the API and returns a client for it.
func (s *system) api(extra ...string) (*proc, *client.Client) {
	s.t.Helper()
	addr := testenv.FreeAddr(s.t)
	for _, e := range extra { // a test that must know it first (PUBLIC_BASE_URL) names it
		if a, ok := strings.CutPrefix(e, "HTTP_ADDR="); ok {
			addr = a
		}
	}
	p := s.start("api", append([]string{"HTTP_ADDR=" + addr}, extra...)...)
	s.apiURL = "http://" + addr
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
		return strings.Contains(p.Output(), `"consumer started"`)
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
