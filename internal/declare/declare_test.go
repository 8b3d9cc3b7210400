package declare

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/mgmt"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/topology"
)

func setup(t *testing.T, env map[string]string) (config.Topology, *testenv.Broker) {
	t.Helper()
	t.Parallel()
	return setupOn(t, testenv.NewBroker(t), env)
}

// setupOn is setup on a vhost the test made.
func setupOn(t *testing.T, b *testenv.Broker, env map[string]string) (config.Topology, *testenv.Broker) {
	t.Helper()
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["QUEUE_TYPE"]; !ok {
		env["QUEUE_TYPE"] = string(testenv.QueueType)
	}
	env["AMQP_URL"] = b.URL
	env["RABBITMQ_MANAGEMENT_URL"] = testenv.ManagementURL
	cfg, l := config.LoadTopology(envconf.FromMap(env))
	require.NoError(t, l.Err())
	return cfg, b
}

// modelAndChannel is cfg's model and a channel on the test's vhost, closed
// when t ends.
func modelAndChannel(t *testing.T, cfg config.Topology, b *testenv.Broker) (*topology.Model, *amqp.Channel) {
	t.Helper()
	m, err := topology.Build(cfg.Model, "")
	require.NoError(t, err)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	require.NoError(t, err)
	return m, ch
}

func run(t *testing.T, cfg config.Topology, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), cfg, zap.NewNop(), args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDeclareCreatesModelWithArgumentsReadBack(t *testing.T) {
	cfg, b := setup(t, nil)
	code, out, errOut := run(t, cfg, "declare")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "topology declared")

	ctx := testenv.Context(t, 10*time.Second)
	m, err := topology.Build(cfg.Model, "")
	require.NoError(t, err)
	for _, want := range m.Queues {
		got, err := b.Mgmt.Queue(ctx, b.VHost, want.Name)
		require.NoError(t, err, want.Name)
		require.True(t, got.Durable, want.Name)
		require.Equal(t, string(want.Type), got.Type, want.Name)
		gotArgs := map[string]string{}
		for k, v := range got.Arguments {
			gotArgs[k] = topology.FormatValue(v)
		}
		wantArgs := map[string]string{}
		for k, v := range want.DeclareArgs() { // x-queue-type: classic included
			wantArgs[k] = topology.FormatValue(v)
		}
		require.Equal(t, wantArgs, gotArgs, want.Name)
	}
	// The table, read back from the broker.
	q, err := b.Mgmt.Queue(ctx, b.VHost, "queue.mail")
	require.NoError(t, err)
	require.Equal(t, "60000", topology.FormatValue(q.Arguments["x-message-ttl"]))
	require.Equal(t, "1000", topology.FormatValue(q.Arguments["x-max-length"]))
	require.Equal(t, "drop-head", q.Arguments["x-overflow"])
	require.Equal(t, "exchange.dead-letter.mail", q.Arguments["x-dead-letter-exchange"])

	// A message published to the direct exchange lands in queue.mail, and
	// a rejected one reaches the DLQ: the bindings and DLX are wired.
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(ctx, "exchange.direct.mail", "mail", true, false, amqp.Publishing{Body: []byte("x")}))
	var d amqp.Delivery
	testenv.WaitFor(t, 5*time.Second, "message in queue.mail", func() bool {
		var ok bool
		d, ok, err = ch.Get("queue.mail", false)
		require.NoError(t, err)
		return ok
	})
	require.NoError(t, d.Reject(false))
	testenv.WaitFor(t, 5*time.Second, "rejected message in queue.mail.dlq", func() bool {
		q, err := ch.QueueDeclarePassive("queue.mail.dlq", true, false, false, false, nil)
		require.NoError(t, err)
		return q.Messages == 1
	})
}

func TestDeclareTwiceIsANoOpAndPlanIsInSync(t *testing.T) {
	cfg, b := setup(t, nil)
	code, out, _ := run(t, cfg, "plan")
	require.Equal(t, ExitPending, code, "a fresh vhost has changes pending")
	require.Contains(t, out, "+ create queue queue.mail")

	code, _, errOut := run(t, cfg, "declare")
	require.Equal(t, ExitOK, code, errOut)
	ctx := testenv.Context(t, 10*time.Second)
	before, err := b.Mgmt.State(ctx, b.VHost)
	require.NoError(t, err)

	code, out, errOut = run(t, cfg, "declare")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "nothing changed")
	after, err := b.Mgmt.State(ctx, b.VHost)
	require.NoError(t, err)
	require.Equal(t, before, after)

	code, out, _ = run(t, cfg, "plan")
	require.Equal(t, ExitOK, code, out)
	require.Contains(t, out, "0 to create, 0 in conflict")
}

func TestDeclareRefusesConflictAndCreatesNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		mgmt string // management URL the declarer sees
	}{
		{"with management API", testenv.ManagementURL},
		// Without the management API, the broker's own 406 is the check.
		{"broker check only", "http://127.0.0.1:1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, b := setup(t, nil)
			cfg.ManagementURL = tc.mgmt
			conn, err := amqp.Dial(b.URL)
			require.NoError(t, err)
			ch, err := conn.Channel()
			require.NoError(t, err)
			_, err = ch.QueueDeclare("queue.mail", true, false, false, false, amqp.Table{
				"x-message-ttl": int64(30000), "x-max-length": int64(1000), "x-overflow": "drop-head",
				"x-dead-letter-exchange": "exchange.dead-letter.mail",
			})
			require.NoError(t, err)
			require.NoError(t, conn.Close())

			code, _, errOut := run(t, cfg, "declare")
			require.Equal(t, ExitError, code)
			require.Contains(t, errOut, "queue queue.mail: x-message-ttl is 30000 on the broker, the model wants 60000 (set by MAIL_QUEUE_TTL)")
			require.Contains(t, errOut, "nothing was declared")
			require.Contains(t, errOut, "set MAIL_QUEUE_TTL=30s")

			ctx := testenv.Context(t, 10*time.Second)
			s, err := b.Mgmt.State(ctx, b.VHost)
			require.NoError(t, err)
			require.Len(t, s.Queues, 1, "only the pre-existing queue")
			require.Empty(t, s.Exchanges, "no exchange was created")
			require.Empty(t, s.Bindings)

			cfg.ManagementURL = testenv.ManagementURL
			code, out, _ := run(t, cfg, "plan")
			require.Equal(t, ExitPending, code)
			require.Contains(t, out, "! conflict queue queue.mail: x-message-ttl is 30000")
		})
	}
}

func TestDeclareQuorum(t *testing.T) {
	// Quorum whatever TEST_QUEUE_TYPE says: declaring quorum queues is the subject.
	cfg, b := setup(t, map[string]string{"QUEUE_TYPE": "quorum"})
	code, out, errOut := run(t, cfg, "declare")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "note: quorum queues")
	ctx := testenv.Context(t, 10*time.Second)
	q, err := b.Mgmt.Queue(ctx, b.VHost, "queue.mail")
	require.NoError(t, err)
	require.Equal(t, "quorum", q.Type)
	code, _, _ = run(t, cfg, "plan")
	require.Equal(t, ExitOK, code)
}

// Issue 36: a declare without x-queue-type takes the vhost's default type
// (RabbitMQ 3.10 and 4.x alike). On a vhost whose default is quorum,
// QUEUE_TYPE=classic gives classic queues everywhere, the delay tiers and
// the dead-letter logs included, and QUEUE_TYPE=quorum keeps the logs
// classic; `plan` names each queue's type. Before every queue was declared
// with an explicit type, all of them came out quorum there.
func TestDeclareNamesEveryQueueTypeOnAQuorumDefaultVHost(t *testing.T) {
	for _, qt := range []topology.QueueType{topology.Classic, topology.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			cfg, b := setupOn(t, testenv.NewBrokerDefaultType(t, "quorum"), map[string]string{"QUEUE_TYPE": string(qt)})
			code, out, _ := run(t, cfg, "plan")
			require.Equal(t, ExitPending, code, out)
			require.Contains(t, out, "+ create queue queue.mail ("+string(qt)+")")
			require.Contains(t, out, "+ create queue queue.mail.dlq.log (classic)")
			code, _, errOut := run(t, cfg, "declare")
			require.Equal(t, ExitOK, code, errOut)

			m, err := topology.Build(cfg.Model, "")
			require.NoError(t, err)
			ctx := testenv.Context(t, 10*time.Second)
			qs, err := b.Mgmt.Queues(ctx, b.VHost)
			require.NoError(t, err)
			got := map[string]string{}
			for _, q := range qs {
				got[q.Name] = q.Type
			}
			want := map[string]string{}
			for _, q := range m.Queues {
				want[q.Name] = string(q.Type)
			}
			require.Equal(t, want, got)
			if qt == topology.Classic {
				for name, typ := range got {
					require.Equal(t, "classic", typ, name)
				}
			}
			code, out, _ = run(t, cfg, "plan")
			require.Equal(t, ExitOK, code, out)
			require.Contains(t, out, "= in sync queue queue.delay.1s ("+string(qt)+")")
		})
	}
}

// Adding x-queue-type: classic conflicts with nothing declared before it:
// a deployment whose classic queues were declared without the argument is
// in sync, and declare passes over it.
//
// Classic queues on a classic-default vhost, whatever the run's type: the
// subject is a classic deployment, and on a quorum-default vhost a declare
// without the argument never made a classic queue
// (TestDeclareNamesEveryQueueTypeOnAQuorumDefaultVHost), so no such
// deployment exists to stay in sync with.
func TestExplicitClassicTypeMatchesQueuesDeclaredWithout(t *testing.T) {
	cfg, b := setupOn(t, testenv.NewBrokerDefaultType(t, "classic"), map[string]string{"QUEUE_TYPE": string(topology.Classic)})
	m, ch := modelAndChannel(t, cfg, b)
	for _, q := range m.Queues {
		_, err := ch.QueueDeclare(q.Name, q.Durable, false, false, false, amqp.Table(q.Args)) // the way declare did before
		require.NoError(t, err, q.Name)
	}
	code, out, errOut := run(t, cfg, "declare")
	require.Equal(t, ExitOK, code, errOut)
	require.NotContains(t, out, "created queue")
	code, out, _ = run(t, cfg, "plan")
	require.Equal(t, ExitOK, code, out)
}

func TestExportMatchesModel(t *testing.T) {
	cfg, _ := setup(t, nil)
	code, out, _ := run(t, cfg, "export")
	require.Equal(t, ExitOK, code)
	m, err := topology.Build(cfg.Model, "")
	require.NoError(t, err)
	want, err := topology.Export(m, topology.ExportOptions{})
	require.NoError(t, err)
	require.Equal(t, string(want), out)
}

func TestUsageErrors(t *testing.T) {
	cfg, _ := config.LoadTopology(envconf.FromMap(nil))
	code, _, errOut := run(t, cfg, "frobnicate")
	require.Equal(t, ExitPending, code)
	require.True(t, strings.Contains(errOut, "unknown command"))
	code, _, _ = run(t, cfg)
	require.Equal(t, ExitPending, code)
	_, err := mgmt.New("::", time.Second)
	require.Error(t, err)
}

func TestDeclareRefusesExchangeConflictWithExchangeAdvice(t *testing.T) {
	cfg, b := setup(t, nil)
	conn, err := amqp.Dial(b.URL)
	require.NoError(t, err)
	ch, err := conn.Channel()
	require.NoError(t, err)
	require.NoError(t, ch.ExchangeDeclare("exchange.dead-letter.mail", "direct", true, false, false, false, nil))
	require.NoError(t, conn.Close())
	code, _, errOut := run(t, cfg, "declare")
	require.Equal(t, ExitError, code)
	require.Contains(t, errOut, "exchange exchange.dead-letter.mail: type is direct on the broker, the model wants fanout")
	require.Contains(t, errOut, "recreate exchange exchange.dead-letter.mail: it holds no messages")
	require.NotContains(t, errOut, "delete_queue")
}

// Issue 12: a deployment declared before levels existed (queue.{ch} only)
// gets the normal and low queues from `declare` without a conflict, `plan`
// shows them first, and each level's routing key reaches its queue; a full
// level queue refuses the publish (a nack) instead of dropping.
func TestDeclareAddsLevelsToAnExistingDeployment(t *testing.T) {
	// Both types in every run, whatever TEST_QUEUE_TYPE says: they bound
	// their queues differently (a quorum queue after the fact).
	for _, qt := range []string{"classic", "quorum"} {
		t.Run(qt, func(t *testing.T) {
			cfg, b := setup(t, map[string]string{"QUEUE_TYPE": qt, "MAIL_NORMAL_QUEUE_MAX_LENGTH": "2"})
			code, _, errOut := run(t, cfg, "declare")
			require.Equal(t, ExitOK, code, errOut)
			m, ch := modelAndChannel(t, cfg, b)
			// Back to the deployment before levels: only the high queues.
			for _, c := range m.Channels {
				for _, lt := range c.Levels[1:] {
					_, err := ch.QueueDelete(lt.Queue, false, false, false)
					require.NoError(t, err)
				}
			}
			code, out, _ := run(t, cfg, "plan")
			require.Equal(t, ExitPending, code, out)
			require.Contains(t, out, "+ create queue queue.mail.normal")
			require.Contains(t, out, "+ create queue queue.sms.low")
			require.NotContains(t, out, "conflict queue")

			code, _, errOut = run(t, cfg, "declare")
			require.Equal(t, ExitOK, code, errOut)
			code, out, _ = run(t, cfg, "plan")
			require.Equal(t, ExitOK, code, out)

			mail, err := m.Channel(topology.Mail)
			require.NoError(t, err)
			require.NoError(t, ch.Confirm(false))
			confirms := ch.NotifyPublish(make(chan amqp.Confirmation, 8))
			ctx := testenv.Context(t, 10*time.Second)
			publish := func(lt topology.LevelTopology) bool {
				require.NoError(t, ch.PublishWithContext(ctx, mail.Exchange, lt.RoutingKey, true, false, amqp.Publishing{Body: []byte("x")}))
				select {
				case c := <-confirms:
					return c.Ack
				case <-ctx.Done():
					t.Fatal("no confirm")
					return false
				}
			}
			for _, lt := range mail.Levels {
				require.True(t, publish(lt), lt.Queue)
				testenv.WaitFor(t, 5*time.Second, "message in "+lt.Queue, func() bool {
					q, err := ch.QueueDeclarePassive(lt.Queue, true, false, false, false, nil)
					require.NoError(t, err)
					return q.Messages == 1
				})
			}
			// A quorum queue applies its bound after the fact, so it may take
			// a message or two past it before it refuses; what matters is
			// that it refuses, and keeps every message it confirmed.
			normal := mail.Level(topology.Normal)
			accepted := 1
			for publish(normal) {
				accepted++
				require.LessOrEqual(t, accepted, 5, "a full normal queue nacks the publish")
			}
			require.GreaterOrEqual(t, accepted, 2, "up to the bound is accepted")
			q, err := ch.QueueDeclarePassive(normal.Queue, true, false, false, false, nil)
			require.NoError(t, err)
			require.Equal(t, accepted, q.Messages, "nothing confirmed was dropped")
		})
	}
}
