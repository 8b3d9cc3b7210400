package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/provider/sms"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Consumer configures cmd/consumer.
type Consumer struct {
	Common
	// Receipts: what comes back after sent (config/receipt.go).
	Receipts Receipts
	GC
	Telemetry    telemetry.Config
	Model        topology.Config
	Channels     []string
	PprofAddr    string
	RedisTimeout time.Duration
	// AMQPLeaveAfter is broker.Config.LeaveAfter (negative: never).
	AMQPLeaveAfter time.Duration
	// RedisWait is how the consumer makes a claim durable before it calls
	// a provider (REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT; rdb.Fence).
	RedisWait   rdb.FenceConfig
	Concurrency int
	// PriorityWeights are the levels' shares of a channel's workers while
	// every level has work waiting.
	PriorityWeights map[topology.Level]int
	Prefetch        int
	ShutdownTimeout time.Duration
	// SubscribeTimeout is broker.ConsumerConfig.SubscribeTimeout.
	SubscribeTimeout time.Duration
	MaxRetries       int
	RetryBackoff     []time.Duration
	ThrottledBackoff []time.Duration
	ClaimLease       time.Duration
	SentTTL          time.Duration
	StatusTTL        time.Duration
	SendTimeout      time.Duration
	MaxMessageBytes  int
	MetricsAddr      string
	Relay            bool
	RelayConcurrency int
	ConsumerID       string
	CodeSecret       string
	CodeSecretIsDev  bool
	// CallbackKeys sign each tenant's callbacks with its own key
	// (CALLBACK_SECRETS, CALLBACK_SECRET); never CODE_SECRET.
	CallbackKeys     callbackkey.Keys
	CallbackTimeout  time.Duration
	CallbackAttempts int
	CallbackPrivate  bool
	RateLimitRefresh time.Duration
	SMTP             mail.Config
	SMS              sms.Config
	WeCom            wecom.Config
	WeComAccounts    WeComAccounts
	Templates        Templates
	Delay            Delay

	// LimitExactMax is LIMIT_EXACT_MAX (ratelimit.Limiter.WithExactMax).
	LimitExactMax int
	// Workers are each channel's pool bounds ({CH}_MIN_WORKERS,
	// {CH}_MAX_WORKERS), by channel.
	Workers map[string]WorkerBounds
}

// LoadConsumer reads cmd/consumer's settings; check l.Err().
func LoadConsumer(lookup func(string) (string, bool)) (Consumer, *envconf.Loader) {
	l := envconf.New(lookup)
	c := Consumer{Common: loadCommon(l), GC: loadGC(l), Model: loadTopology(l)}
	c.Receipts = loadReceipts(l, false)
	c.Telemetry = loadTelemetry(l, "msgpulse-consumer")
	c.AMQPLeaveAfter = loadLeaveAfter(l)
	c.RedisTimeout = l.Duration("REDIS_TIMEOUT", time.Second, 10*time.Millisecond, 30*time.Second, "longest wait for each Redis call (connect, read, write, free pooled connection), never retried: a worker notices a dead Redis within it and pauses; overrides REDIS_URL timeouts")
	c.RedisWait = loadRedisWait(l, c.Common, c.RedisTimeout)
	c.PprofAddr = l.String("PPROF_ADDR", "", "address of a net/http/pprof server for profiling under load (empty = off; keep it on localhost or a private network)")
	c.Channels = l.List("CHANNELS", "mail,sms", "main queues to consume: any of "+strings.Join(topology.Channels, ", "))
	if len(c.Channels) == 0 {
		l.Fail("CHANNELS", "", "name at least one channel (%s)", strings.Join(topology.Channels, ", "))
	}
	seen := map[string]bool{}
	for _, ch := range c.Channels {
		if !slices.Contains(topology.Channels, ch) {
			l.Fail("CHANNELS", ch, "unknown channel (want some of %s)", strings.Join(topology.Channels, ", "))
		}
		if seen[ch] {
			l.Fail("CHANNELS", ch, "listed twice")
		}
		seen[ch] = true
	}
	c.Concurrency = l.Int("CONCURRENCY", 8, 1, 10_000, "messages processed at once, per channel")
	c.Workers = loadWorkers(l, c.Concurrency)
	c.Prefetch = l.Int("PREFETCH", 0, 0, 65_535, "unacked deliveries held per channel (0 = 2×CONCURRENCY)")
	c.PriorityWeights = loadWeights(l)
	c.SubscribeTimeout = l.Duration("AMQP_SUBSCRIBE_TIMEOUT", 10*time.Second, time.Second, 5*time.Minute, "longest wait for a queue's channel and basic.consume to be answered; past it, or on a 541 (a quorum queue's consume timed out on a node cut off from its leader), the consumer leaves the node and resumes through the next one of AMQP_URL")
	c.ShutdownTimeout = l.Duration("SHUTDOWN_TIMEOUT", 30*time.Second, time.Second, time.Hour, "on SIGTERM, how long in-flight sends may finish before the process exits (their messages are then redelivered)")
	c.MaxRetries = l.Int("MAX_RETRIES", 3, 0, 100, "retries after a transient failure before the message is dead-lettered")
	c.RetryBackoff = l.Durations("RETRY_BACKOFF", []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, time.Millisecond, 24*time.Hour, "wait before retry 1, 2, 3... (the last repeats)")
	c.ThrottledBackoff = l.Durations("RETRY_THROTTLED_BACKOFF", []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}, time.Millisecond, 24*time.Hour, "wait before a retry when the provider throttled us")
	c.ClaimLease = l.Duration("CLAIM_LEASE", 15*time.Second, 100*time.Millisecond, 10*time.Minute, "idempotency lease while sending (renewed every third of it)")
	c.SentTTL = l.Duration("SENT_TTL", 7*24*time.Hour, time.Minute, 365*24*time.Hour, "how long a sent mark blocks a resend")
	c.StatusTTL = l.Duration("STATUS_TTL", 7*24*time.Hour, time.Minute, 365*24*time.Hour, "how long message status records are kept")
	c.SendTimeout = l.Duration("SEND_TIMEOUT", 30*time.Second, 100*time.Millisecond, 10*time.Minute, "longest provider call")
	c.MaxMessageBytes = l.Int("MAX_MESSAGE_BYTES", 1<<20, 1<<10, envelope.MaxBrokerBytes, "largest message body the consumer processes; a larger one is dead-lettered as malformed (keep it above the API's BODY_LIMIT; at most 16 MiB, RabbitMQ 4.x's default max_message_size, above which the broker takes none)")
	c.MetricsAddr = l.String("METRICS_ADDR", ":9090", "address of /metrics and /healthz (`off` disables them)")
	if c.MetricsAddr == "off" {
		c.MetricsAddr = ""
	}
	c.Relay = l.Enum("RELAY", "on", []string{"on", "off"}, "run the delay relay in this process (exact delay mode)") == "on"
	c.RelayConcurrency = l.Int("RELAY_CONCURRENCY", 16, 1, 10_000, "relay steps processed at once")
	host, _ := os.Hostname()
	c.ConsumerID = l.Computed("CONSUMER_ID", fmt.Sprintf("%s-%d", host, os.Getpid()), "hostname-pid", "this consumer's name in idempotency claims and logs")
	c.CodeSecret, c.CodeSecretIsDev = loadCodeSecret(l)
	c.CallbackKeys = loadCallbackKeys(l, c.CodeSecret)
	c.CallbackTimeout = l.Duration("CALLBACK_TIMEOUT", 5*time.Second, 100*time.Millisecond, time.Minute, "timeout of one callback POST")
	c.CallbackAttempts = l.Int("CALLBACK_ATTEMPTS", 3, 1, 20, "callback attempts before giving up")
	c.CallbackPrivate = loadCallbackPrivate(l)
	c.RateLimitRefresh = l.Duration("RATE_LIMIT_REFRESH", 30*time.Second, time.Second, time.Hour, "full reload of per-provider rate-limit configs (changes also arrive at once by pub/sub)")
	c.LimitExactMax = l.Int("LIMIT_EXACT_MAX", ratelimit.DefaultExactMax, 1, ratelimit.MaxLimit, "largest limit kept exact (a log entry per request); a window with a larger limit is counted by a sliding-window counter: never more than its limit per fixed window, at most 2x in any span of its length (a previous window's requests all at its end), about its limit under steady load (docs/commands.md)")
	c.SMTP = loadSMTP(l)
	c.SMTP.DKIM = loadDKIMKey(l, c.Receipts)
	c.SMS = loadSMS(l)
	c.SMS.Twilio.StatusCallback = c.Receipts.TwilioStatusCallback()
	c.WeCom = loadWeCom(l, c.Channels)
	c.WeComAccounts = loadWeComAccounts(l)
	c.Templates = loadTemplates(l)
	c.Delay = loadDelay(l)
	return c, l
}

// loadCallbackKeys reads the tenants' callback keys, on api (which refuses
// a callbackUrl its tenant has no key for) and consumer (which signs). A
// tenant is handed its key, so none may be CODE_SECRET: that would let it
// sign console sessions and unseal codes.
func loadCallbackKeys(l *envconf.Loader, codeSecret string) callbackkey.Keys {
	list := l.Secret("CALLBACK_SECRETS", "", "per-tenant keys of callback signatures (X-Msgpulse-Signature): `tenant=secret,…`, each at least 16 bytes, all different; a tenant listed here is signed with its own secret")
	master := l.Secret("CALLBACK_SECRET", "", "secret (≥16 bytes, not CODE_SECRET) from which every tenant not in CALLBACK_SECRETS gets its own callback key, HMAC-SHA256(CALLBACK_SECRET, \"msgpulse callback v1|\"+tenant); print one with `api callback-key -tenant NAME`. Neither set: a callbackUrl is refused (400)")
	explicit, err := callbackkey.ParseList(list)
	if err != nil {
		l.Fail("CALLBACK_SECRETS", "", "%v", err)
		return callbackkey.Keys{}
	}
	keys, err := callbackkey.New(explicit, master, codeSecret)
	var se *callbackkey.SettingError
	if errors.As(err, &se) {
		l.Fail(se.Setting, "", "%s", se.Msg)
		return callbackkey.Keys{}
	}
	return keys
}

// loadCallbackPrivate is read by api (request time) and consumer (dial
// time): the same switch lifts both checks.
func loadCallbackPrivate(l *envconf.Loader) bool {
	return l.Bool("CALLBACK_ALLOW_PRIVATE", false, "accept callbackUrl hosts on loopback, link-local, private, unique-local and other internal addresses (development only)")
}

// loadWeights reads PRIORITY_WEIGHTS: one weight per level, high first,
// separated by colons (seed 004's traffic shaper: 8:3:1).
func loadWeights(l *envconf.Loader) map[topology.Level]int {
	levels := make([]string, len(topology.NoticeLevels))
	defaults := make([]string, len(topology.NoticeLevels))
	for i, lv := range topology.NoticeLevels {
		levels[i] = string(lv)
		defaults[i] = strconv.Itoa(topology.DefaultLevelWeights[lv])
	}
	raw := l.String("PRIORITY_WEIGHTS", strings.Join(defaults, ":"), "shares of a channel's notice workers for the "+strings.Join(levels, ":")+" notice queues while all have work waiting; a level alone with work gets every worker (codes have workers of their own)")
	parts := strings.Split(raw, ":")
	if len(parts) != len(topology.NoticeLevels) {
		l.Fail("PRIORITY_WEIGHTS", raw, "want %d weights separated by colons (%s), e.g. 8:3:1", len(topology.NoticeLevels), strings.Join(levels, ":"))
		return nil
	}
	w := map[topology.Level]int{}
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 || n > 1000 {
			l.Fail("PRIORITY_WEIGHTS", raw, "weight %q of %s: want a whole number from 1 to 1000", p, topology.NoticeLevels[i])
			return nil
		}
		w[topology.NoticeLevels[i]] = n
	}
	return w
}
