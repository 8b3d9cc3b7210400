package config

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/fraud"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Limits are the API's frequency-control settings (0 = unlimited).
type Limits struct {
	ResendInterval   time.Duration
	PerRecipientHour int
	PerRecipientDay  int
	// PerRecipientDayAllTenants caps the codes all tenants together send
	// one recipient per day: the one limit tenants share (0 = off).
	PerRecipientDayAllTenants int
	PerIPMinute               int
	PerAPIKeyMinute           int
	PerTenantMinute           int
	// HighPerTenantMinute caps each tenant's urgent notices (priority
	// high, 7-9) per minute (0 = off): their queue is shared by every
	// tenant, and one tenant's cannot fill it for the others.
	HighPerTenantMinute int
	EmailPerSecond      int
	SMSPerSecond        int
	WeComPerSecond      int
	ConfigRefreshEvery  time.Duration
	// ExactMax is LIMIT_EXACT_MAX (ratelimit.Limiter.WithExactMax).
	ExactMax int
}

// API configures cmd/api.
type API struct {
	Common
	// Receipts: what comes back after sent (config/receipt.go).
	Receipts Receipts
	GC
	Telemetry      telemetry.Config
	Model          topology.Config
	HTTPAddr       string
	PprofAddr      string
	APIKeys        []apikey.Key
	AuthDisabled   bool
	TrustedProxies []*net.IPNet
	BodyLimit      int64
	// MaxHeaderBytes and MaxConnections bound what callers without a key
	// can make the API hold: header bytes per connection, connections at
	// once (issue 43).
	MaxHeaderBytes  int
	MaxConnections  int
	BatchMaxBytes   int64
	CodeSecret      string
	CodeSecretIsDev bool
	CodeLength      int
	CodeTTL         time.Duration
	VerifyAttempts  int
	Limits          Limits
	StatusTTL       time.Duration
	PublishTimeout  time.Duration
	// AMQPLeaveAfter is broker.Config.LeaveAfter (negative: never).
	AMQPLeaveAfter time.Duration
	MessageMaxAge  time.Duration
	IdempotencyTTL time.Duration
	RedisTimeout   time.Duration
	// RedisWait is how the API makes its writes durable before a 202
	// (REDIS_WAIT_REPLICAS, REDIS_WAIT_TIMEOUT; rdb.Fence).
	RedisWait       rdb.FenceConfig
	PublishChannels int
	PublishLanes    int
	PublishWindow   int
	// AdmitFill is, per channel of the topology model, the fill of a level
	// queue (depth / bound) from which the API refuses publishes to it
	// ({CH}_QUEUE_ADMIT_FILL); AdmitInterval is how often a queue in use
	// is read for it (QUEUE_ADMIT_INTERVAL).
	AdmitFill       map[string]float64
	AdmitInterval   time.Duration
	ShutdownTimeout time.Duration
	// ConsoleSessionTTL is how long a web console login lasts.
	ConsoleSessionTTL time.Duration
	CallbackHTTP      bool
	// CallbackPrivate accepts callbackUrl hosts on loopback, link-local,
	// private and other internal addresses (development only).
	CallbackPrivate bool
	// CallbackKeys: a callbackUrl is refused when its tenant has no key.
	CallbackKeys callbackkey.Keys
	// AuthFailuresPerMinute: failed X-API-Key checks per source address per
	// minute before 429 (0 = unlimited).
	AuthFailuresPerMinute int
	Templates             Templates
	Delay                 Delay
	// WeComRobots are the robots tenants may post to: name → its tenants
	// (none = every tenant). The API needs no webhook key.
	WeComRobots map[string][]string
	// WeComAccounts are WECOM_ACCOUNTS without secrets: who may send from
	// which WeCom account.
	WeComAccounts []wecom.Account
	// SMSCodes says which numbers verification codes may go to
	// (VERIFY_SMS_NUMBER_TYPES, VERIFY_SMS_COUNTRIES[_BY_TENANT]).
	SMSCodes fraud.Policy
	// Fraud is the SMS pumping guard (FRAUD_GUARD and its thresholds).
	Fraud fraud.Config
	// RequestLog bounds the request lines of refused and failed requests
	// (LOG_REQUEST_BURST, LOG_REQUEST_INTERVAL).
	RequestLog logging.ThrottleConfig
	// WeComLimits are WECOM_ACCOUNT_LIMITS, shown with each account.
	WeComLimits map[string]wecom.Limits
}

// DefaultAdmitFill is {CH}_QUEUE_ADMIT_FILL's default: refuse at 80% of
// the bound, the fill from which tools already warn (topology.FillWarning).
const DefaultAdmitFill = topology.FillWarning

func loadCodeSecret(l *envconf.Loader) (string, bool) {
	s := l.Secret("CODE_SECRET", seal.DevSecret, fmt.Sprintf("secret (≥%d bytes) that keys code digests and seals codes in messages; the same value on api, consumer and dlq", seal.MinSecretLen))
	if len(s) < seal.MinSecretLen {
		l.Fail("CODE_SECRET", "", "must be at least %d bytes (it is %d)", seal.MinSecretLen, len(s))
	}
	return s, s == seal.DevSecret
}

// LoadAPI reads cmd/api's settings; check l.Err().
func LoadAPI(lookup func(string) (string, bool)) (API, *envconf.Loader) {
	l := envconf.New(lookup)
	c := API{Common: loadCommon(l), GC: loadGC(l), Model: loadTopology(l)}
	c.Receipts = loadReceipts(l, true)
	c.Telemetry = loadTelemetry(l, "msgpulse-api")
	c.PprofAddr = l.String("PPROF_ADDR", "", "address of a net/http/pprof server for profiling under load (empty = off; keep it on localhost or a private network)")
	c.HTTPAddr = l.String("HTTP_ADDR", ":8080", "address the HTTP API listens on")
	keys := l.List("API_KEYS", "", "comma-separated API keys: `name:key`, `name:key:scopes` or `name:sha256=HEX[:scopes]` (HEX = SHA-256 of the key); "+
		"scopes join send, read, admin with + (none = send+read: admin, the platform operator's scope, must be written); sha256= in any case is a digest; the tenant is the name's part before / (else default); required unless API_AUTH=disabled")
	for i, k := range keys {
		key, err := apikey.Parse(k, i+1)
		if err != nil {
			l.Fail("API_KEYS", "", "%v", err)
			continue
		}
		c.APIKeys = append(c.APIKeys, key)
	}
	if _, err := apikey.NewSet(c.APIKeys); err != nil {
		l.Fail("API_KEYS", "", "%v", err)
	}
	c.AuthDisabled = l.Enum("API_AUTH", "enabled", []string{"enabled", "disabled"}, "`disabled` turns off X-API-Key checks (local development only)") == "disabled"
	if len(c.APIKeys) == 0 && !c.AuthDisabled {
		l.Fail("API_KEYS", "", "no API keys: set API_KEYS (e.g. backend:$(openssl rand -hex 24)), or API_AUTH=disabled to run without authentication")
	}
	for _, p := range l.List("TRUSTED_PROXIES", "", "CIDRs whose X-Forwarded-For is believed for the caller's address (logs and AUTH_FAILURES_PER_MINUTE; the end user's IP comes from clientIp)") {
		if !strings.Contains(p, "/") {
			if strings.Contains(p, ":") {
				p += "/128"
			} else {
				p += "/32"
			}
		}
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			l.Fail("TRUSTED_PROXIES", p, "not a CIDR")
			continue
		}
		c.TrustedProxies = append(c.TrustedProxies, n)
	}
	c.BodyLimit = int64(l.Int("BODY_LIMIT", 64<<10, 1<<10, 16<<20, "largest request body in bytes"))
	c.MaxHeaderBytes = l.Int("HTTP_MAX_HEADER_BYTES", 64<<10, 4<<10, 1<<20, "largest request line and headers in bytes; more is 431 before anything reads them (Go's own default is 1 MiB)")
	c.MaxConnections = l.Int("HTTP_MAX_CONNECTIONS", 4096, 0, 1_000_000, "connections the API serves at once; more wait in the listen backlog until one closes (0 = unlimited). With HTTP_MAX_HEADER_BYTES it bounds what callers without a key can make the API hold")
	c.BatchMaxBytes = int64(l.Int("BATCH_MAX_BYTES", 8<<20, 64<<10, envelope.MaxBrokerBytes,
		"largest total a batch puts on the broker: its recipients' messages together, each with its own copy of the variables; over it, 413 and nothing is sent. At most 16 MiB, RabbitMQ 4.x's default max_message_size (a WeCom batch is one message); keep it at or below a lower max_message_size"))
	c.CodeSecret, c.CodeSecretIsDev = loadCodeSecret(l)
	c.CodeLength = l.Int("CODE_LENGTH", 6, 4, 10, "digits in a verification code")
	c.CodeTTL = l.Duration("CODE_TTL", 10*time.Minute, 10*time.Second, 24*time.Hour, "how long a verification code is valid")
	c.VerifyAttempts = l.Int("VERIFY_MAX_ATTEMPTS", 5, 1, 100, "wrong guesses before a code is burned")
	c.Limits = Limits{
		ResendInterval:   l.Duration("VERIFY_RESEND_INTERVAL", 60*time.Second, time.Second, 24*time.Hour, "cooldown between codes for one tenant+channel+recipient+purpose"),
		PerRecipientHour: l.Int("VERIFY_MAX_PER_HOUR", 5, 0, 1_000_000, "codes per recipient per sliding hour, per tenant (0 = unlimited); exact (a log entry per code) up to LIMIT_EXACT_MAX"),
		PerRecipientDay:  l.Int("VERIFY_MAX_PER_DAY", 10, 0, 1_000_000, "codes per recipient per sliding day, per tenant (0 = unlimited); exact (a log entry per code) up to LIMIT_EXACT_MAX"),
		PerRecipientDayAllTenants: l.Int("VERIFY_MAX_PER_RECIPIENT_PER_DAY_ALL_TENANTS", 0, 0, 1_000_000,
			"codes per recipient per sliding day, all tenants together: the one limit tenants share, so one tenant can use it up for the others (0 = off)"),
		PerIPMinute:         l.Int("VERIFY_MAX_PER_IP_PER_MINUTE", 20, 0, 1_000_000, "codes per end-user IP (clientIp) per sliding minute, per tenant (0 = unlimited); exact (a log entry per code) up to LIMIT_EXACT_MAX"),
		PerAPIKeyMinute:     l.Int("LIMIT_PER_API_KEY_PER_MINUTE", 6000, 0, 100_000_000, "requests (codes and messages) per API key per sliding minute (0 = unlimited); exact up to LIMIT_EXACT_MAX, above it approximate (at most the limit per fixed window, at most 2x in any sliding one)"),
		PerTenantMinute:     l.Int("LIMIT_PER_TENANT_PER_MINUTE", 0, 0, 100_000_000, "requests (codes and messages) per tenant, across its keys, per sliding minute (0 = unlimited); exact up to LIMIT_EXACT_MAX, above it approximate (at most the limit per fixed window, at most 2x in any sliding one)"),
		HighPerTenantMinute: l.Int("LIMIT_HIGH_PER_TENANT_PER_MINUTE", 1000, 0, 100_000_000, "urgent notices (priority \"high\" or 7-9) per tenant, across its keys, per sliding minute (0 = unlimited): every tenant's share the queue.{ch}.high queues, and one tenant's campaign marked urgent cannot fill them for the others; exact up to LIMIT_EXACT_MAX, above it approximate"),
		EmailPerSecond:      l.Int("LIMIT_EMAIL_PER_SECOND", 500, 0, 1_000_000, "global cap on accepted email per sliding second (0 = unlimited); exact up to LIMIT_EXACT_MAX, above it approximate (at most the limit per fixed window, at most 2x in any sliding one)"),
		SMSPerSecond:        l.Int("LIMIT_SMS_PER_SECOND", 200, 0, 1_000_000, "global cap on accepted SMS per sliding second (0 = unlimited); exact up to LIMIT_EXACT_MAX, above it approximate (at most the limit per fixed window, at most 2x in any sliding one)"),
		WeComPerSecond:      l.Int("LIMIT_WECOM_PER_SECOND", 2000, 0, 1_000_000, "global cap on accepted WeCom messages (application and robot) per sliding second; each batch recipient counts, so keep it above 1000 (a full batch) (0 = unlimited); exact up to LIMIT_EXACT_MAX, above it approximate (at most the limit per fixed window, at most 2x in any sliding one)"),
		ConfigRefreshEvery:  l.Duration("RATE_LIMIT_REFRESH", 30*time.Second, time.Second, time.Hour, "full reload of rate-limit configs (changes also arrive at once by pub/sub)"),
		ExactMax:            l.Int("LIMIT_EXACT_MAX", ratelimit.DefaultExactMax, 1, ratelimit.MaxLimit, "largest limit kept exact (a log entry per request); a window with a larger limit is counted by a sliding-window counter: never more than its limit per fixed window, at most 2x in any span of its length (a previous window's requests all at its end), about its limit under steady load (docs/commands.md)"),
	}
	c.StatusTTL = l.Duration("STATUS_TTL", 7*24*time.Hour, time.Minute, 365*24*time.Hour, "how long message status records are kept")
	c.AMQPLeaveAfter = loadLeaveAfter(l)
	c.PublishTimeout = l.Duration("PUBLISH_TIMEOUT", 3*time.Second, 10*time.Millisecond, time.Minute, "longest wait for a broker confirm before answering 503")
	c.MessageMaxAge = l.Duration("MESSAGE_MAX_AGE", 24*time.Hour, time.Second, 30*24*time.Hour, "default ttlSeconds of POST /api/messages/send: a message not sent this long after it was due is dead-lettered as expired")
	c.IdempotencyTTL = l.Duration("IDEMPOTENCY_TTL", 24*time.Hour, time.Minute, 30*24*time.Hour, "how long the answer to a request with an Idempotency-Key is kept and given again to the same key (send, batch, verification-codes)")
	c.RedisTimeout = l.Duration("REDIS_TIMEOUT", 500*time.Millisecond, 10*time.Millisecond, 30*time.Second, "longest wait for each Redis call of a request (connect, read, write, free pooled connection), never retried, so a dead Redis is a quick 503; overrides REDIS_URL timeouts")
	c.RedisWait = loadRedisWait(l, c.Common, c.RedisTimeout)
	c.PublishChannels = l.Int("PUBLISH_CHANNELS", 32, 1, 2000, "confirm channels for batched publishes (delays), one batch in flight each")
	c.PublishLanes = l.Int("PUBLISH_LANES", 4, 1, 64, "shared confirm channels for single publishes, per queue (a code never shares one with a notice)")
	c.PublishWindow = l.Int("PUBLISH_WINDOW", 256, 1, 10_000, "unconfirmed publishes in flight per shared channel; more wait up to PUBLISH_TIMEOUT")
	c.AdmitFill = map[string]float64{}
	for _, ch := range topology.Channels {
		c.AdmitFill[ch] = l.Float(topology.EnvPrefix(ch)+"_QUEUE_ADMIT_FILL", DefaultAdmitFill, 0.01, 1,
			"fill (depth / max length) of a "+ch+" level queue from which the API answers 503 with Retry-After instead of publishing, before drop-head or reject-publish acts (1 = off: the queue's overflow rule alone decides)")
	}
	c.AdmitInterval = l.Duration("QUEUE_ADMIT_INTERVAL", 25*time.Millisecond, time.Millisecond, 10*time.Second,
		"how often the API reads the depth of a queue it is publishing to (a passive declare), for {CH}_QUEUE_ADMIT_FILL; an idle queue is read once a second")
	c.ShutdownTimeout = l.Duration("SHUTDOWN_TIMEOUT", 15*time.Second, time.Second, 10*time.Minute, "how long in-flight requests may finish on SIGTERM")
	c.ConsoleSessionTTL = l.Duration("CONSOLE_SESSION_TTL", 8*time.Hour, time.Minute, 30*24*time.Hour, "how long a web console login lasts; logout, or removing or changing its key, ends it sooner")
	c.CallbackHTTP = l.Bool("CALLBACK_ALLOW_HTTP", false, "accept http:// callbackUrl (otherwise https only)")
	c.CallbackPrivate = loadCallbackPrivate(l)
	c.CallbackKeys = loadCallbackKeys(l, c.CodeSecret)
	c.AuthFailuresPerMinute = l.Int("AUTH_FAILURES_PER_MINUTE", 30, 0, 1_000_000, "failed X-API-Key checks per source address (echo's RealIP: TRUSTED_PROXIES decides whether X-Forwarded-For counts) per minute; beyond it every request from the address is 429 until the minute ends (0 = unlimited)")
	c.Templates = loadTemplates(l)
	c.Delay = loadDelay(l)
	c.WeComRobots = loadAPIRobots(l)
	c.WeComAccounts = loadAPIWeComAccounts(l)
	c.SMSCodes = loadSMSCodePolicy(l)
	c.Fraud = loadFraudGuard(l)
	c.RequestLog = logging.ThrottleConfig{
		Burst: l.Int("LOG_REQUEST_BURST", logging.DefaultThrottleBurst, 0, 1_000_000,
			"request lines (4xx, 503) written one by one per route and status in each LOG_REQUEST_INTERVAL; the rest are counted in one \"log lines held back\" line per route and status, so an overload cannot flood the logs (msgpulse_http_requests_total counts every request; 0 = every line)"),
		Interval: l.Duration("LOG_REQUEST_INTERVAL", logging.DefaultThrottleInterval, 100*time.Millisecond, time.Hour,
			"the window of LOG_REQUEST_BURST, and how often its summary lines are written"),
	}
	c.WeComLimits = loadAccountLimits(l)
	return c, l
}
