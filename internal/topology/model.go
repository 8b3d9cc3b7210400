package topology

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Channel names: the delivery channels msgpulse sends through.
const (
	Mail  = "mail"
	SMS   = "sms"
	WeCom = "wecom"
)

// Channels lists every channel, in a stable order. A channel is data: its
// resources, levels and environment variables all derive from its name.
var Channels = []string{Mail, SMS, WeCom}

// QueueType is the RabbitMQ queue type the model declares.
type QueueType string

// Queue types.
const (
	Classic QueueType = "classic"
	Quorum  QueueType = "quorum"
)

// Role says what a queue is for; tools use it to find queues by purpose.
type Role string

// Queue roles.
const (
	RoleMain       Role = "main"
	RoleDeadLetter Role = "dead-letter"
	// RoleDeadLetterLog is a classic queue bound wherever a DLQ is bound,
	// so it holds a copy of every dead letter that the DLQ tool can read
	// without spending the DLQ's delivery attempts (see
	// DeadLetterLogConfig).
	RoleDeadLetterLog Role = "dead-letter-log"
	// RoleDeadLetterStatus is a queue bound wherever a DLQ of messages with
	// status records is bound, consumed by the consumers, which write the
	// status of what the broker dead-lettered by itself (a queue's TTL,
	// drop-head, a quorum queue's delivery limit), since no code of ours
	// ran when it did: without it such a message kept a status of queued,
	// sending or retrying for good.
	RoleDeadLetterStatus Role = "dead-letter-status"
)

// FillWarning is the fill (depth / x-max-length) from which tools flag a
// bounded queue: past it, drop-head dead-lettering is near.
const FillWarning = 0.8

// Fill is what tools show of a queue holding depth messages: its bound
// (x-max-length; 0 when unbounded), how full that makes it, and a status:
// "missing" when the queue does not exist, "warning" above FillWarning,
// else "ok".
func (q Queue) Fill(depth int, exists bool) (bound int, fill float64, status string) {
	if n, ok := q.Args[ArgMaxLength].(int64); ok && n > 0 {
		bound, fill = int(n), float64(depth)/float64(n)
	}
	switch {
	case !exists:
		return bound, fill, "missing"
	case bound > 0 && fill > FillWarning:
		return bound, fill, "warning"
	}
	return bound, fill, "ok"
}

// Argument keys used by the model.
const (
	ArgMessageTTL         = "x-message-ttl"
	ArgMaxLength          = "x-max-length"
	ArgOverflow           = "x-overflow"
	ArgDeadLetterExchange = "x-dead-letter-exchange"
	ArgDeadLetterRK       = "x-dead-letter-routing-key"
	ArgDeadLetterStrategy = "x-dead-letter-strategy"
	ArgMaxPriority        = "x-max-priority"
	ArgQueueType          = "x-queue-type"
	ArgQuorumInitialGroup = "x-quorum-initial-group-size"
	ArgMaxLengthBytes     = "x-max-length-bytes"
)

// Level is a traffic level of a channel (seed 004's multi-level queues):
// each its own queue, so a burst of bulk mail never sits in front of a
// verification code.
type Level string

// Levels, from the most to the least urgent.
const (
	// Code is seed 002's queue exactly (queue.{ch}, its TTL, bound and
	// drop-head), and holds verification codes only, for which a stale
	// message is useless. No notice enters it, whatever its priority: its
	// room (the bound, and the API's admission below it) is the codes'
	// alone (issue 36: 2,000 notices at priority 9 had filled it and every
	// code after them was refused).
	Code Level = "code"
	// High, Normal and Low are the notices' levels (a notice's "priority":
	// "high" or 7-9, "normal" or 4-6, "low" or 0-3). Their queues have no
	// queue TTL (a notice's own deadline still applies, in the consumer)
	// and a large bound that refuses publishes (reject-publish) instead of
	// dropping: an accepted notice is never lost to a burst.
	High   Level = "high"
	Normal Level = "normal"
	Low    Level = "low"
)

// Levels lists every level, most urgent first: the queues of a channel.
var Levels = []Level{Code, High, Normal, Low}

// NoticeLevels are the levels a notice's priority chooses from, most
// urgent first.
var NoticeLevels = []Level{High, Normal, Low}

// DefaultLevelWeights are seed 004's shares of a channel's notice workers
// while every notice level has work (PRIORITY_WEIGHTS 8:3:1). Codes have
// workers of their own.
var DefaultLevelWeights = map[Level]int{High: 8, Normal: 3, Low: 1}

// ParseLevel returns the notice level named s (high, normal or low: what
// a caller may ask for; the codes' level is never named).
func ParseLevel(s string) (Level, error) {
	for _, l := range NoticeLevels {
		if string(l) == s {
			return l, nil
		}
	}
	return "", fmt.Errorf("unknown level %q (known: high, normal, low)", s)
}

// DefaultLevelMaxLength bounds a normal or low queue by default.
const DefaultLevelMaxLength = 1_000_000

// ChannelConfig tunes one channel's queues.
type ChannelConfig struct {
	// LevelMaxLength bounds the notices' queues (reject-publish when
	// full); a level missing here gets DefaultLevelMaxLength. The codes'
	// queue is bounded by MaxLength.
	LevelMaxLength map[Level]int

	// QueueTTL is how long a message may wait in the main queue before it is
	// dead-lettered as expired; 0 means no TTL.
	QueueTTL time.Duration
	// MaxLength bounds the main queue; the oldest message is dead-lettered
	// (drop-head) when it is full. 0 means unbounded.
	MaxLength int
	// MaxPriority enables a priority queue (1..10); 0 disables it.
	MaxPriority int
}

// Config is everything the model depends on.
type Config struct {
	QueueType QueueType
	// QuorumInitialGroupSize is how many nodes replicate each quorum queue
	// (0 leaves it to the broker: every node of the cluster).
	QuorumInitialGroupSize int
	Channels               map[string]ChannelConfig
	Delay                  DelayConfig
	DeadLetterLog          DeadLetterLogConfig
}

// DefaultChannel is seed 002's main queue: 60 s TTL, 1000 messages, drop-head.
var DefaultChannel = ChannelConfig{QueueTTL: 60 * time.Second, MaxLength: 1000}

// DefaultConfig returns the model's defaults.
func DefaultConfig() Config {
	c := Config{QueueType: Classic, Channels: map[string]ChannelConfig{}, Delay: DefaultDelay(), DeadLetterLog: DefaultDeadLetterLog()}
	for _, ch := range Channels {
		cc := DefaultChannel
		cc.LevelMaxLength = map[Level]int{High: DefaultLevelMaxLength, Normal: DefaultLevelMaxLength, Low: DefaultLevelMaxLength}
		c.Channels[ch] = cc
	}
	return c
}

// Validate reports the first invalid setting.
func (c Config) Validate() error {
	if c.QueueType != Classic && c.QueueType != Quorum {
		return fmt.Errorf("queue type %q: must be classic or quorum", c.QueueType)
	}
	for _, name := range Channels {
		cc, ok := c.Channels[name]
		if !ok {
			return fmt.Errorf("channel %s: missing configuration", name)
		}
		if cc.QueueTTL < 0 || (cc.QueueTTL > 0 && cc.QueueTTL < time.Millisecond) {
			return fmt.Errorf("channel %s: queue TTL %s must be 0 or at least 1ms", name, cc.QueueTTL)
		}
		if cc.MaxLength < 0 {
			return fmt.Errorf("channel %s: max length %d must not be negative", name, cc.MaxLength)
		}
		if cc.MaxPriority < 0 || cc.MaxPriority > 10 {
			return fmt.Errorf("channel %s: max priority %d must be between 0 and 10", name, cc.MaxPriority)
		}
		for l, n := range cc.LevelMaxLength {
			if l == Code {
				return fmt.Errorf("channel %s: the code level is bounded by MaxLength, not LevelMaxLength", name)
			}
			if _, err := ParseLevel(string(l)); err != nil {
				return fmt.Errorf("channel %s: %w", name, err)
			}
			if n < 1 {
				return fmt.Errorf("channel %s: %s queue bound %d must be at least 1 (a level queue is always bounded)", name, l, n)
			}
		}
	}
	for name := range c.Channels {
		if !isChannel(name) {
			return fmt.Errorf("unknown channel %q (known: %s)", name, strings.Join(Channels, ", "))
		}
	}
	if err := c.DeadLetterLog.Validate(); err != nil {
		return err
	}
	return c.Delay.Validate()
}

func isChannel(name string) bool {
	for _, c := range Channels {
		if c == name {
			return true
		}
	}
	return false
}

// Exchange is one exchange to declare.
type Exchange struct {
	Name       string
	Kind       string
	Durable    bool
	AutoDelete bool
	Internal   bool
	Args       map[string]any
}

// Queue is one queue to declare. Args holds int64 and string values only, so
// that they compare and serialise the same way everywhere.
type Queue struct {
	Name    string
	Type    QueueType
	Durable bool
	Role    Role
	Channel string // the delivery channel it belongs to, if any
	Level   Level  // a main queue's traffic level
	Args    map[string]any
	// LogOf is, on a dead-letter log or status queue, the DLQ it copies.
	LogOf string
	// Sources maps an argument to the environment variable that sets it, so
	// a conflict message can say which knob to turn. Fixed arguments (the
	// dead-letter exchange, drop-head) have none.
	Sources map[string]string
}

// DeclareArgs are the arguments a declare of q sends: Args and, always,
// x-queue-type, classic included. A declare without it takes the vhost's
// default queue type (RabbitMQ 3.10 and 4.x alike, and from 3.13 the
// node's default_queue_type too), so a vhost created with quorum as its
// default would turn every classic queue of the model (the dead-letter
// logs, whose reads must spend no delivery attempt, among them) into a
// quorum queue. An explicit "classic" is equivalent to no argument on an
// existing classic queue, so adding it conflicts with nothing declared
// before.
func (q Queue) DeclareArgs() map[string]any {
	out := make(map[string]any, len(q.Args)+1)
	for k, v := range q.Args {
		out[k] = v
	}
	out[ArgQueueType] = string(cmp.Or(q.Type, Classic))
	return out
}

// Binding routes from an exchange to a queue or another exchange.
type Binding struct {
	Source          string
	Destination     string
	DestinationType string // "queue" or "exchange"
	RoutingKey      string
}

// ChannelTopology names the resources of one delivery channel. Queue and
// RoutingKey are the code level's (seed 002's queue.{ch} and {ch}).
type ChannelTopology struct {
	Name               string
	Exchange           string
	RoutingKey         string
	Queue              string
	DeadLetterExchange string
	DeadLetterQueue    string
	MaxLength          int
	QueueTTL           time.Duration
	// Levels holds one entry per level, in the order of Levels.
	Levels []LevelTopology
}

// LevelTopology is one level's queue on a channel: publish to the
// channel's exchange with RoutingKey to reach Queue.
type LevelTopology struct {
	Level      Level
	Queue      string
	RoutingKey string
	MaxLength  int // 0 = unbounded
	// EnvMaxLength is the variable that sets MaxLength, for messages.
	EnvMaxLength string
}

// Level returns level l of the channel; an empty (or unknown) level is
// Code: codes carry none, and neither did any message before levels
// existed.
func (c ChannelTopology) Level(l Level) LevelTopology {
	for _, lt := range c.Levels {
		if lt.Level == l {
			return lt
		}
	}
	return c.Levels[0]
}

// Model is the whole topology.
type Model struct {
	QueueType QueueType
	Exchanges []Exchange
	Queues    []Queue
	Bindings  []Binding
	Channels  []ChannelTopology
	Delay     DelayTopology
	// DeadLetterLog is the retention of every dead-letter log.
	DeadLetterLog DeadLetterLogConfig
	// Notes explain what the chosen options change (printed by the declarer).
	Notes []string
}

// Names of a channel's resources, following seed 002.
func channelNames(ch string) ChannelTopology {
	ct := ChannelTopology{
		Name:               ch,
		Exchange:           "exchange.direct." + ch,
		RoutingKey:         ch,
		Queue:              "queue." + ch,
		DeadLetterExchange: "exchange.dead-letter." + ch,
		DeadLetterQueue:    "queue." + ch + ".dlq",
	}
	for _, l := range Levels {
		lt := LevelTopology{Level: l, Queue: ct.Queue, RoutingKey: ct.RoutingKey, EnvMaxLength: LevelMaxLengthEnv(ch, l)}
		if l != Code {
			lt.Queue += "." + string(l)
			lt.RoutingKey += "." + string(l)
		}
		ct.Levels = append(ct.Levels, lt)
	}
	return ct
}

// Build returns the model for cfg on a broker of the given version ("" means
// the newest behaviour). The version only matters for quorum queues, whose
// accepted arguments grew over releases.
func Build(cfg Config, brokerVersion string) (*Model, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	v, err := parseVersion(brokerVersion)
	if err != nil {
		return nil, err
	}
	m := &Model{QueueType: cfg.QueueType}
	for _, name := range Channels {
		cc := cfg.Channels[name]
		ct := channelNames(name)
		ct.MaxLength = cc.MaxLength
		ct.QueueTTL = cc.QueueTTL
		for i := range ct.Levels {
			ct.Levels[i].MaxLength = cc.MaxLength
			if ct.Levels[i].Level != Code {
				ct.Levels[i].MaxLength = cmp.Or(cc.LevelMaxLength[ct.Levels[i].Level], DefaultLevelMaxLength)
			}
		}
		m.Channels = append(m.Channels, ct)

		m.Exchanges = append(m.Exchanges,
			Exchange{Name: ct.Exchange, Kind: "direct", Durable: true},
			// Fanout, so every message a main queue dead-letters reaches the
			// DLQ whatever routing key it carried (a relayed or CC-routed
			// message keeps keys other than the channel's).
			Exchange{Name: ct.DeadLetterExchange, Kind: "fanout", Durable: true},
		)

		prefix := EnvPrefix(name)
		main := Queue{
			Name: ct.Queue, Type: cfg.QueueType, Durable: true, Role: RoleMain, Channel: name, Level: Code,
			Args:    map[string]any{ArgDeadLetterExchange: ct.DeadLetterExchange},
			Sources: map[string]string{},
		}
		if cc.QueueTTL > 0 {
			main.Args[ArgMessageTTL] = cc.QueueTTL.Milliseconds()
			main.Sources[ArgMessageTTL] = prefix + "_QUEUE_TTL"
		}
		if cc.MaxLength > 0 {
			main.Args[ArgMaxLength] = int64(cc.MaxLength)
			main.Sources[ArgMaxLength] = prefix + "_QUEUE_MAX_LENGTH"
			main.Args[ArgOverflow] = "drop-head"
		}
		if cc.MaxPriority > 0 {
			main.Args[ArgMaxPriority] = int64(cc.MaxPriority)
			main.Sources[ArgMaxPriority] = prefix + "_QUEUE_MAX_PRIORITY"
		}
		dlq := Queue{Name: ct.DeadLetterQueue, Type: cfg.QueueType, Durable: true, Role: RoleDeadLetter, Channel: name,
			Args: map[string]any{}, Sources: map[string]string{}}
		m.Queues = append(m.Queues, main)
		m.Bindings = append(m.Bindings, Binding{Source: ct.Exchange, Destination: ct.Queue, DestinationType: "queue", RoutingKey: ct.RoutingKey})
		for _, lt := range ct.Levels[1:] {
			m.Queues = append(m.Queues, levelQueue(cfg.QueueType, ct, lt))
			m.Bindings = append(m.Bindings, Binding{Source: ct.Exchange, Destination: lt.Queue, DestinationType: "queue", RoutingKey: lt.RoutingKey})
		}
		m.Queues = append(m.Queues, dlq)
		m.Bindings = append(m.Bindings, Binding{Source: ct.DeadLetterExchange, Destination: ct.DeadLetterQueue, DestinationType: "queue", RoutingKey: ""})
	}
	m.addDelay(cfg.Delay, cfg.QueueType)
	m.addDeadLetterLogs(cfg.DeadLetterLog)
	if cfg.QueueType == Quorum {
		if v.less(3, 10) {
			return nil, fmt.Errorf("quorum queues need RabbitMQ 3.10 or later here (found %s): delay queues rely on message TTL and at-least-once dead-lettering", brokerVersion)
		}
		m.applyQuorum(v, cfg.QuorumInitialGroupSize)
	}
	return m, m.check()
}

// levelQueue is a notice level's queue (high, normal, low): no queue TTL (a notice waits for its
// turn; its own deadline still applies in the consumer) and a bound that
// refuses publishes, so the API answers 503 instead of a 202 followed by a
// drop. reject-publish also makes a quorum queue's dead-lettering
// at-least-once-capable and is accepted by classic and quorum alike.
func levelQueue(qt QueueType, ct ChannelTopology, lt LevelTopology) Queue {
	q := Queue{
		Name: lt.Queue, Type: qt, Durable: true, Role: RoleMain, Channel: ct.Name, Level: lt.Level,
		Args: map[string]any{
			ArgDeadLetterExchange: ct.DeadLetterExchange,
			ArgMaxLength:          int64(lt.MaxLength),
			ArgOverflow:           "reject-publish",
		},
		Sources: map[string]string{ArgMaxLength: lt.EnvMaxLength},
	}
	if qt == Quorum {
		q.Args[ArgDeadLetterStrategy] = "at-least-once"
	}
	return q
}

// EnvPrefix is the prefix of a channel's variables: its name in upper case
// (MAIL_QUEUE_TTL, SMS_NORMAL_QUEUE_MAX_LENGTH, and so for any later channel).
func EnvPrefix(ch string) string { return strings.ToUpper(ch) }

// LevelMaxLengthEnv is the variable bounding a level's queue:
// MAIL_QUEUE_MAX_LENGTH for the codes' (seed 002's),
// MAIL_HIGH_QUEUE_MAX_LENGTH, MAIL_NORMAL_QUEUE_MAX_LENGTH,
// MAIL_LOW_QUEUE_MAX_LENGTH.
func LevelMaxLengthEnv(ch string, l Level) string {
	if l == Code {
		return EnvPrefix(ch) + "_QUEUE_MAX_LENGTH"
	}
	return EnvPrefix(ch) + "_" + strings.ToUpper(string(l)) + "_QUEUE_MAX_LENGTH"
}

// applyQuorum turns every queue into a quorum queue, keeping only the
// arguments a quorum queue accepts on this broker version, and records what
// changed so the declarer can say it.
func (m *Model) applyQuorum(v version, groupSize int) {
	m.Notes = append(m.Notes,
		"quorum queues: every queue is replicated with Raft across the cluster's nodes (use 3 or 5 nodes to survive node loss); on a single node they only add disk writes.",
		"quorum queues: messages are always persisted; a quorum queue takes no x-max-priority (before 4.0 it ignores message priorities; from 4.0 it splits them into two sub-queues), so it is dropped. msgpulse sets no message priority anyway: levels are queues.",
		"quorum queues: the codes' queues (queue.{ch}) keep overflow drop-head, so their dead-lettering stays at-most-once (at-least-once dead-lettering needs reject-publish, which would refuse new messages instead of dropping the oldest); the notices' queues (high, normal, low) refuse publishes when full and dead-letter at-least-once.",
		"quorum queues: delay queues use at-least-once dead-lettering (x-dead-letter-strategy, with reject-publish), so no delay hop can lose a message.")
	limit := "RabbitMQ 4.0 and later (this broker) give every quorum queue a default delivery limit of 20"
	if v.less(4, 0) {
		limit = "RabbitMQ 4.0 and later give every quorum queue a default delivery limit of 20 (before 4.0, this broker, there is none)"
	}
	m.Notes = append(m.Notes, "quorum queues: "+limit+": a message handed back that often (every return before 4.3) is dead-lettered with reason delivery_limit. "+
		"msgpulse hands nothing back to wait: a retry the broker refuses is held and published again; the DLQ tool reads each DLQ's classic log queue, never the DLQ (see docs/cluster.md).")
	for i := range m.Queues {
		q := &m.Queues[i]
		if q.Role == RoleDeadLetterLog {
			continue // classic on purpose: see DeadLetterLogConfig
		}
		q.Type = Quorum
		if groupSize > 0 {
			q.Args[ArgQuorumInitialGroup] = int64(groupSize)
			q.Sources[ArgQuorumInitialGroup] = "QUORUM_INITIAL_GROUP_SIZE"
		}
		for key := range q.Args {
			if ok, why := quorumAccepts(key, q.Args[key], v); !ok {
				m.Notes = append(m.Notes, fmt.Sprintf("%s: %s dropped: %s", q.Name, key, why))
				delete(q.Args, key)
				delete(q.Sources, key)
			}
		}
	}
}

func quorumAccepts(key string, val any, v version) (bool, string) {
	switch key {
	case ArgMaxPriority:
		return false, "quorum queues do not take x-max-priority"
	case ArgMessageTTL:
		if v.less(3, 10) {
			return false, "quorum queues support message TTL from RabbitMQ 3.10"
		}
	case ArgDeadLetterStrategy:
		if v.less(3, 10) {
			return false, "at-least-once dead-lettering needs RabbitMQ 3.10"
		}
	case ArgOverflow:
		if val == "reject-publish-dlx" {
			return false, "quorum queues do not support reject-publish-dlx"
		}
	}
	return true, ""
}

// check guards the model's own consistency: unique names, bindings and
// dead-letter targets that point at declared resources.
func (m *Model) check() error {
	ex := map[string]bool{}
	for _, e := range m.Exchanges {
		if ex[e.Name] {
			return fmt.Errorf("topology: exchange %s declared twice", e.Name)
		}
		ex[e.Name] = true
	}
	qs := map[string]bool{}
	for _, q := range m.Queues {
		if qs[q.Name] {
			return fmt.Errorf("topology: queue %s declared twice", q.Name)
		}
		qs[q.Name] = true
		if dlx, ok := q.Args[ArgDeadLetterExchange].(string); ok && dlx != "" && !ex[dlx] {
			return fmt.Errorf("topology: queue %s dead-letters to undeclared exchange %s", q.Name, dlx)
		}
	}
	for _, b := range m.Bindings {
		if !ex[b.Source] {
			return fmt.Errorf("topology: binding from undeclared exchange %s", b.Source)
		}
		if (b.DestinationType == "queue" && !qs[b.Destination]) || (b.DestinationType == "exchange" && !ex[b.Destination]) {
			return fmt.Errorf("topology: binding to undeclared %s %s", b.DestinationType, b.Destination)
		}
	}
	return nil
}

// ErrUnknownChannel is returned for a channel the model does not have.
var ErrUnknownChannel = errors.New("unknown channel")

// Channel returns a channel's resource names.
func (m *Model) Channel(name string) (ChannelTopology, error) {
	for _, c := range m.Channels {
		if c.Name == name {
			return c, nil
		}
	}
	return ChannelTopology{}, fmt.Errorf("%w %q", ErrUnknownChannel, name)
}

// Queue returns a queue by name.
func (m *Model) Queue(name string) (Queue, bool) {
	for _, q := range m.Queues {
		if q.Name == name {
			return q, true
		}
	}
	return Queue{}, false
}

// ChannelOfQueue returns the channel a queue belongs to ("" if none).
func (m *Model) ChannelOfQueue(queue string) string {
	if q, ok := m.Queue(queue); ok {
		return q.Channel
	}
	return ""
}
