package topology

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustBuild(t *testing.T, cfg Config, version string) *Model {
	t.Helper()
	m, err := Build(cfg, version)
	require.NoError(t, err)
	return m
}

// The table (seed 002), resource by resource.
func TestBuildDefaultMatchesSeedTable(t *testing.T) {
	m := mustBuild(t, DefaultConfig(), "")
	for _, tc := range []struct {
		ch, exchange, queue, key, dlx, dlq string
	}{
		{"mail", "exchange.direct.mail", "queue.mail", "mail", "exchange.dead-letter.mail", "queue.mail.dlq"},
		{"sms", "exchange.direct.sms", "queue.sms", "sms", "exchange.dead-letter.sms", "queue.sms.dlq"},
	} {
		t.Run(tc.ch, func(t *testing.T) {
			c, err := m.Channel(tc.ch)
			require.NoError(t, err)
			require.Equal(t, tc.exchange, c.Exchange)
			require.Equal(t, tc.queue, c.Queue)
			require.Equal(t, tc.key, c.RoutingKey)
			require.Equal(t, tc.dlx, c.DeadLetterExchange)
			require.Equal(t, tc.dlq, c.DeadLetterQueue)

			q, ok := m.Queue(tc.queue)
			require.True(t, ok)
			require.True(t, q.Durable)
			require.Equal(t, Classic, q.Type)
			require.Equal(t, map[string]any{
				"x-message-ttl":          int64(60000),
				"x-max-length":           int64(1000),
				"x-overflow":             "drop-head",
				"x-dead-letter-exchange": tc.dlx,
			}, q.Args)
			dlq, ok := m.Queue(tc.dlq)
			require.True(t, ok)
			require.True(t, dlq.Durable)
			require.Empty(t, dlq.Args)
			require.Contains(t, m.Bindings, Binding{Source: tc.exchange, Destination: tc.queue, DestinationType: "queue", RoutingKey: tc.key})
			require.Contains(t, m.Bindings, Binding{Source: tc.dlx, Destination: tc.dlq, DestinationType: "queue"})
		})
	}
	for _, e := range m.Exchanges {
		require.True(t, e.Durable, e.Name)
	}
}

func TestBuildPerChannelSettings(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Channels[SMS] = ChannelConfig{QueueTTL: 30 * time.Second, MaxLength: 0, MaxPriority: 5}
	m := mustBuild(t, cfg, "")
	q, _ := m.Queue("queue.sms")
	require.Equal(t, map[string]any{"x-message-ttl": int64(30000), "x-dead-letter-exchange": "exchange.dead-letter.sms", "x-max-priority": int64(5)}, q.Args)
	mail, _ := m.Queue("queue.mail")
	require.Equal(t, int64(60000), mail.Args[ArgMessageTTL], "mail keeps its defaults")
}

func TestBuildQuorumKeepsOnlyAcceptedArguments(t *testing.T) {
	cfg := DefaultConfig()
	cfg.QueueType = Quorum
	cfg.Channels[Mail] = ChannelConfig{QueueTTL: time.Minute, MaxLength: 1000, MaxPriority: 3}
	for _, tc := range []struct {
		version string
		wantTTL bool
	}{
		{"3.10.8", true},
		{"4.1.0", true},
		{"", true},
	} {
		t.Run(tc.version, func(t *testing.T) {
			m := mustBuild(t, cfg, tc.version)
			q, _ := m.Queue("queue.mail")
			require.Equal(t, Quorum, q.Type)
			_, hasTTL := q.Args[ArgMessageTTL]
			require.Equal(t, tc.wantTTL, hasTTL)
			d, _ := m.Queue("queue.delay.5s")
			require.Equal(t, "at-least-once", d.Args[ArgDeadLetterStrategy])
			require.Equal(t, "reject-publish", d.Args[ArgOverflow])
			require.NotContains(t, q.Args, ArgMaxPriority, "quorum queues refuse x-max-priority")
			require.Equal(t, "drop-head", q.Args[ArgOverflow])
			require.NotEmpty(t, m.Notes, "the declarer must be able to say what quorum changes")
		})
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		mod  func(*Config)
	}{
		{"bad type", func(c *Config) { c.QueueType = "stream" }},
		{"negative length", func(c *Config) { c.Channels[Mail] = ChannelConfig{MaxLength: -1} }},
		{"priority too high", func(c *Config) { c.Channels[SMS] = ChannelConfig{MaxPriority: 11} }},
		{"unknown channel", func(c *Config) { c.Channels["push"] = DefaultChannel }},
		{"missing channel", func(c *Config) { delete(c.Channels, SMS) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := DefaultConfig()
			tc.mod(&c)
			_, err := Build(c, "")
			require.Error(t, err)
		})
	}
	_, err := Build(DefaultConfig(), "three")
	require.Error(t, err)
	q := DefaultConfig()
	q.QueueType = Quorum
	_, err = Build(q, "3.9.29")
	require.ErrorContains(t, err, "3.10", "quorum delay queues need message TTL")
}

func TestDiff(t *testing.T) {
	m := mustBuild(t, DefaultConfig(), "")
	inSync := func() State {
		s := State{Exchanges: map[string]ObservedExchange{}, Queues: map[string]ObservedQueue{}}
		for _, e := range m.Exchanges {
			args := map[string]any{}
			for k, v := range e.Args {
				args[k] = v
			}
			s.Exchanges[e.Name] = ObservedExchange{Kind: e.Kind, Durable: true, Args: args}
		}
		for _, q := range m.Queues {
			args := map[string]any{}
			for k, v := range q.Args {
				if n, ok := v.(int64); ok {
					args[k] = float64(n) // what a JSON decoder produces
				} else {
					args[k] = v
				}
			}
			s.Queues[q.Name] = ObservedQueue{Type: q.Type, Durable: true, Args: args}
		}
		s.Bindings = append(s.Bindings, m.Bindings...)
		return s
	}
	for _, tc := range []struct {
		name      string
		mod       func(*State)
		creates   int
		conflicts []Change
	}{
		{name: "empty broker", mod: func(s *State) { *s = State{} }, creates: len(m.Exchanges) + len(m.Queues) + len(m.Bindings)},
		{name: "in sync", mod: func(*State) {}},
		{name: "other ttl", mod: func(s *State) { s.Queues["queue.mail"].Args["x-message-ttl"] = float64(30000) },
			conflicts: []Change{{Kind: Conflict, Resource: "queue", Name: "queue.mail", Field: "x-message-ttl", Current: "30000", Wanted: "60000", Source: "MAIL_QUEUE_TTL"}}},
		{name: "extra argument", mod: func(s *State) { s.Queues["queue.sms.dlq"].Args["x-max-length"] = float64(5) },
			conflicts: []Change{{Kind: Conflict, Resource: "queue", Name: "queue.sms.dlq", Field: "x-max-length", Current: "5", Wanted: "(none)"}}},
		{name: "queue type", mod: func(s *State) {
			q := s.Queues["queue.sms"]
			q.Type = Quorum
			q.Args["x-queue-type"] = "quorum"
			s.Queues["queue.sms"] = q
		}, conflicts: []Change{{Kind: Conflict, Resource: "queue", Name: "queue.sms", Field: "x-queue-type", Current: "quorum", Wanted: "classic", Source: "QUEUE_TYPE"}}},
		{name: "exchange kind", mod: func(s *State) {
			s.Exchanges["exchange.dead-letter.mail"] = ObservedExchange{Kind: "direct", Durable: true}
		}, conflicts: []Change{{Kind: Conflict, Resource: "exchange", Name: "exchange.dead-letter.mail", Field: "type", Current: "direct", Wanted: "fanout"}}},
		{name: "missing binding", mod: func(s *State) { s.Bindings = s.Bindings[1:] }, creates: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := inSync()
			tc.mod(&s)
			p := Diff(m, s)
			require.Equal(t, tc.creates, p.Count(Create))
			require.Equal(t, tc.conflicts, p.Conflicts())
			require.Equal(t, tc.creates == 0 && len(tc.conflicts) == 0, p.InSync())
		})
	}
}

// The committed definitions file is what the docker-compose broker loads at
// boot; it must be exactly the model's export. Regenerate it with
// `make definitions`.
func TestCommittedDefinitionsMatchModel(t *testing.T) {
	want, err := Export(mustBuild(t, DefaultConfig(), ""), ExportOptions{Users: []DevUser{{Name: "guest", Password: "guest", Tags: []string{"administrator"}}}})
	require.NoError(t, err)
	got, err := os.ReadFile(filepath.Join("..", "..", "rabbitmq", "definitions.json"))
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "rabbitmq/definitions.json drifted from the topology model: run `make definitions`")
}

func TestExportIsDeterministicAndComplete(t *testing.T) {
	cfg := DefaultConfig()
	cfg.QueueType = Quorum
	m := mustBuild(t, cfg, "")
	a, err := Export(m, ExportOptions{VHost: "v"})
	require.NoError(t, err)
	b, err := Export(m, ExportOptions{VHost: "v"})
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Contains(t, string(a), `"x-queue-type": "quorum"`)
	require.Contains(t, string(a), `"vhost": "v"`)
	require.NotContains(t, string(a), `"users"`)
}

func TestPasswordHashFormat(t *testing.T) {
	// rabbit_password_hashing_sha256: base64 of 4 salt bytes + 32 hash bytes.
	h := PasswordHash("guest", "guest")
	require.Len(t, h, 48)
	require.Equal(t, h, PasswordHash("guest", "guest"))
	require.NotEqual(t, h, PasswordHash("guest", "other"))
}

// Issue 12: every channel has the same levels, derived from its name;
// issue 36: the codes' own (seed 002's queue) and three for notices.
func TestBuildLevelsPerChannel(t *testing.T) {
	for _, qt := range []QueueType{Classic, Quorum} {
		cfg := DefaultConfig()
		cfg.QueueType = qt
		cfg.Channels[Mail] = ChannelConfig{QueueTTL: time.Minute, MaxLength: 1000, LevelMaxLength: map[Level]int{Normal: 50}}
		m := mustBuild(t, cfg, "")
		for _, ch := range Channels {
			c, err := m.Channel(ch)
			require.NoError(t, err)
			require.Len(t, c.Levels, len(Levels))
			code := c.Level(Code)
			require.Equal(t, c.Queue, code.Queue, "codes have seed 002's queue")
			require.Equal(t, "queue."+ch, code.Queue)
			require.Equal(t, c.RoutingKey, code.RoutingKey)
			require.Equal(t, code, c.Level(""), "no level means a code")
			cq, ok := m.Queue(code.Queue)
			require.True(t, ok)
			require.Equal(t, Code, cq.Level)
			for _, tc := range []struct {
				level Level
				queue string
				env   string
			}{
				{High, "queue." + ch + ".high", EnvPrefix(ch) + "_HIGH_QUEUE_MAX_LENGTH"},
				{Normal, "queue." + ch + ".normal", EnvPrefix(ch) + "_NORMAL_QUEUE_MAX_LENGTH"},
				{Low, "queue." + ch + ".low", EnvPrefix(ch) + "_LOW_QUEUE_MAX_LENGTH"},
			} {
				lt := c.Level(tc.level)
				require.Equal(t, tc.queue, lt.Queue)
				require.Equal(t, tc.env, lt.EnvMaxLength)
				want := DefaultLevelMaxLength
				if ch == Mail && tc.level == Normal {
					want = 50
				}
				q, ok := m.Queue(lt.Queue)
				require.True(t, ok)
				require.Equal(t, tc.level, q.Level)
				require.Equal(t, RoleMain, q.Role)
				require.Equal(t, qt, q.Type)
				args := map[string]any{ArgMaxLength: int64(want), ArgOverflow: "reject-publish", ArgDeadLetterExchange: c.DeadLetterExchange}
				if qt == Quorum {
					args[ArgDeadLetterStrategy] = "at-least-once"
				}
				require.Equal(t, args, q.Args, "no TTL, a bound that refuses, the channel's DLX")
				require.Equal(t, tc.env, q.Sources[ArgMaxLength])
				require.Contains(t, m.Bindings, Binding{Source: c.Exchange, Destination: lt.Queue, DestinationType: "queue", RoutingKey: lt.RoutingKey})
				require.Contains(t, m.Bindings, Binding{Source: m.Delay.RouteExchange, Destination: c.Exchange, DestinationType: "exchange", RoutingKey: lt.RoutingKey},
					"a delayed message comes back to its level")
				mq, ok := m.Queue(lt.Queue)
				require.True(t, ok)
				require.Equal(t, tc.level, mq.Level)
			}
		}
	}
}

func TestLevelConfigRejected(t *testing.T) {
	for name, lm := range map[string]map[Level]int{
		"code":    {Code: 10},
		"unknown": {"urgent": 10},
		"zero":    {Low: 0},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cc := cfg.Channels[Mail]
			cc.LevelMaxLength = lm
			cfg.Channels[Mail] = cc
			require.Error(t, cfg.Validate())
		})
	}
}

func TestParseLevel(t *testing.T) {
	for _, l := range NoticeLevels {
		got, err := ParseLevel(string(l))
		require.NoError(t, err)
		require.Equal(t, l, got)
	}
	for _, bad := range []string{"HIGH", string(Code), ""} {
		_, err := ParseLevel(bad)
		require.Error(t, err, "%q: the codes' level is never asked for", bad)
	}
}

func TestQueueFill(t *testing.T) {
	bounded := Queue{Args: map[string]any{ArgMaxLength: int64(10)}}
	for _, tc := range []struct {
		name   string
		q      Queue
		depth  int
		exists bool
		bound  int
		fill   float64
		status string
	}{
		{"empty", bounded, 0, true, 10, 0, "ok"},
		{"at the threshold", bounded, 8, true, 10, 0.8, "ok"},
		{"past it", bounded, 9, true, 10, 0.9, "warning"},
		{"missing", bounded, 0, false, 10, 0, "missing"},
		{"unbounded", Queue{}, 1_000_000, true, 0, 0, "ok"},
	} {
		bound, fill, status := tc.q.Fill(tc.depth, tc.exists)
		require.Equal(t, tc.bound, bound, tc.name)
		require.InDelta(t, tc.fill, fill, 1e-9, tc.name)
		require.Equal(t, tc.status, status, tc.name)
	}
}

// Every DLQ has a stream log with the DLQ's own bindings, under either
// queue type, so every dead letter the broker routes to a DLQ lands in its
// log too.
func TestDeadLetterLogs(t *testing.T) {
	for _, qt := range []QueueType{Classic, Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.QueueType = qt
			m := mustBuild(t, cfg, "3.10.8")
			n := 0
			for _, q := range m.Queues {
				if q.Role != RoleDeadLetter && q.Role != RoleRelayDeadLetter {
					continue
				}
				n++
				l, ok := m.LogOf(q.Name)
				if !ok {
					t.Fatalf("%s has no dead-letter log", q.Name)
				}
				if l.Type != Classic || l.Name != q.Name+".log" || l.Args[ArgMessageTTL] != int64(1209600000) || l.Args[ArgMaxLengthBytes] != int64(1<<30) {
					t.Fatalf("%s: log %+v", q.Name, l)
				}
				var to, toLog []Binding
				for _, b := range m.Bindings {
					switch b.Destination {
					case q.Name:
						b.Destination = "*"
						to = append(to, b)
					case l.Name:
						b.Destination = "*"
						toLog = append(toLog, b)
					}
				}
				if len(to) == 0 || !reflect.DeepEqual(to, toLog) {
					t.Fatalf("%s: bindings %v, log's %v", q.Name, to, toLog)
				}
			}
			if n != 5 {
				t.Fatalf("%d DLQs, want 5 (3 channels, relay, unrouted)", n)
			}
		})
	}
}
