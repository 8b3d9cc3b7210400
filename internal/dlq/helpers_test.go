package dlq

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/dispatch/dispatchtest"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// env is one isolated msgpulse stack plus the dlq configuration for it.
type env struct {
	*dispatchtest.Stack
	cfg  config.DLQ
	log  *zap.Logger
	logs *observer.ObservedLogs
	mail topology.ChannelTopology
}

// setup builds a stack (fresh vhost, Redis prefix, SMTP catcher) with the
// topology adjusted by model.
func setup(t *testing.T, model func(*topology.Config)) *env {
	t.Helper()
	return setupWith(t, dispatchtest.Options{Model: model})
}

// setupWith is setup with every option of the stack.
func setupWith(t *testing.T, opts dispatchtest.Options) *env {
	t.Helper()
	s := dispatchtest.New(t, opts)
	mc := testenv.Topology()
	if opts.Model != nil {
		opts.Model(&mc)
	}
	core, logs := observer.New(zap.DebugLevel)
	ct, err := s.Model.Channel(topology.Mail)
	require.NoError(t, err)
	return &env{
		Stack: s,
		cfg: config.DLQ{
			Common: config.Common{AMQPURL: s.Broker.URL, RedisURL: s.Redis.URL, RedisMode: s.Redis.Mode, RedisPrefix: s.Redis.Prefix, LogLevel: "info", LogFormat: "json"},
			Model:  mc, CodeSecret: seal.DevSecret, CodeSecretIsDev: true,
			ConfirmTimeout: 10 * time.Second, ScanMax: 100_000, StatusTimeout: 2 * time.Second,
		},
		log: zap.New(core), logs: logs, mail: ct,
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs the command line through Main, as cmd/dlq does.
func (e *env) run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(testenv.Context(t, 30*time.Second), e.cfg, e.log, args, &out, &errOut)
	return result{code, out.String(), errOut.String()}
}

// runCLI runs with test hooks set on the cli.
func (e *env) runCLI(ctx context.Context, hooks func(*cli), args ...string) result {
	var out, errOut bytes.Buffer
	c := &cli{cfg: e.cfg, log: e.log, stdout: &out, stderr: &errOut, now: time.Now}
	if hooks != nil {
		hooks(c)
	}
	code := c.main(ctx, args)
	return result{code, out.String(), errOut.String()}
}

// peek reads a whole queue on a channel of its own, independently of the
// package under test, and gives every message back. Like the tool's own
// reader (reader.settle), it returns once the queue holds them again: a
// quorum queue applies returns through its Raft log after the nack, and a
// command run at once would otherwise see part of the queue.
func peek(t *testing.T, s *dispatchtest.Stack, queue string) []amqp.Delivery {
	t.Helper()
	ch, err := s.Conn.Channel()
	require.NoError(t, err)
	defer func() { _ = ch.Close() }()
	var out []amqp.Delivery
	for {
		d, ok, err := ch.Get(queue, false)
		require.NoError(t, err)
		if !ok {
			break
		}
		out = append(out, d)
	}
	if len(out) > 0 {
		require.NoError(t, ch.Nack(out[len(out)-1].DeliveryTag, true, true))
		testenv.WaitFor(t, 10*time.Second, "the messages back in "+queue, func() bool {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			require.NoError(t, err)
			return q.Messages >= len(out)
		})
	}
	return out
}

// idsIn returns the message ids in a queue, sorted.
func idsIn(t *testing.T, s *dispatchtest.Stack, queue string) []string {
	t.Helper()
	var ids []string
	for _, d := range peek(t, s, queue) {
		ids = append(ids, d.MessageId)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...[]string) []string {
	var out []string
	for _, l := range ids {
		out = append(out, l...)
	}
	slices.Sort(out)
	return out
}

// entries decodes list --json output.
func entries(t *testing.T, out string) map[string]Entry {
	t.Helper()
	m := map[string]Entry{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var e Entry
		require.NoError(t, json.Unmarshal(sc.Bytes(), &e), sc.Text())
		m[e.ID] = e
	}
	return m
}

// seeded are the dead letters of every kind that seed creates.
type seeded struct {
	permanent []string          // rejected by the consumer after an SMTP 550
	codes     map[string]string // their verification codes
	malformed string            // a body that is not JSON
	maxlen    []string          // dropped by the full main queue
	expired   []string          // outlived the main queue's TTL
	rcpt      map[string]string // recipient of each message
}

func (sd seeded) all() []string {
	return sorted(sd.permanent, []string{sd.malformed}, sd.maxlen, sd.expired)
}

// seedModel gives the mail queue a short TTL and room for two messages.
func seedModel(c *topology.Config) {
	mc := c.Channels[topology.Mail]
	mc.QueueTTL = 500 * time.Millisecond
	mc.MaxLength = 2
	c.Channels[topology.Mail] = mc
}

// seed fills the mail DLQ with one kind of dead letter after the other:
// with a consumer running and SMTP refusing everything, two verification
// codes (rejected, permanent) and a garbage body (rejected, malformed);
// then, no consumer running, five notices into a queue that holds two:
// three are dropped (maxlen), the last two expire (expired).
func seed(t *testing.T, e *env) seeded {
	t.Helper()
	s := e.Stack
	sd := seeded{codes: map[string]string{}, rcpt: map[string]string{}}
	s.Mail.FailAlways(550, "5.1.1 no such user")
	c := s.StartConsumer("seed", 4)
	for i := range 2 {
		rcpt := fmt.Sprintf("perm%d-%s@example.com", i, testenv.ID())
		id, code := s.Verification(rcpt, "login", nil)
		sd.permanent, sd.codes[id], sd.rcpt[id] = append(sd.permanent, id), code, rcpt
		testenv.WaitFor(t, 10*time.Second, "verification rejected into the DLQ", func() bool { return s.Depth(e.mail.DeadLetterQueue) == i+1 })
	}
	sd.malformed = "garbage-" + testenv.ID()
	s.PublishRaw(topology.Mail, sd.malformed, []byte("{this is not json"))
	testenv.WaitFor(t, 10*time.Second, "garbage rejected into the DLQ", func() bool { return s.Depth(e.mail.DeadLetterQueue) == 3 })
	c.Stop()
	for i := range 5 {
		rcpt := fmt.Sprintf("notice%d-%s@example.com", i, testenv.ID())
		id := s.Notice(topology.Mail, rcpt, "title", nil)
		sd.rcpt[id] = rcpt
		if i < 3 {
			sd.maxlen = append(sd.maxlen, id)
		} else {
			sd.expired = append(sd.expired, id)
		}
	}
	testenv.WaitFor(t, 10*time.Second, "3 dropped and 2 expired into the DLQ", func() bool {
		return s.Depth(e.mail.DeadLetterQueue) == 8 && s.Depth(e.mail.Queue) == 0
	})
	require.Equal(t, sd.all(), idsIn(t, s, e.mail.DeadLetterQueue))
	return sd
}

// rejected puts n notices into the mail DLQ through the consumer (SMTP
// 550), leaves the consumer running and SMTP fixed, and returns their ids
// and recipients.
func rejected(t *testing.T, e *env, n int) ([]string, map[string]string, *dispatchtest.Consumer) {
	t.Helper()
	s := e.Stack
	s.Mail.FailAlways(550, "5.1.1 no such user")
	c := s.StartConsumer("rejecter", 4)
	ids, rcpt := []string{}, map[string]string{}
	for i := range n {
		r := fmt.Sprintf("r%d-%s@example.com", i, testenv.ID())
		id := s.Notice(topology.Mail, r, "title", nil)
		ids, rcpt[id] = append(ids, id), r
	}
	testenv.WaitFor(t, 15*time.Second, "all rejected into the DLQ", func() bool { return s.Depth(e.mail.DeadLetterQueue) == n })
	s.Mail.Reset() // SMTP fixed: replays are accepted
	slices.Sort(ids)
	return ids, rcpt, c
}
