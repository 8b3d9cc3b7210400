// Package dispatchtest runs a whole msgpulse consumer stack for integration
// tests: a fresh vhost with the topology declared, a Redis key prefix, a
// real SMTP server (mailcatcher), and consumers that can be started and
// stopped like separate processes. Tests of the dispatcher, the DLQ tool
// and the end-to-end flow share it.
//
// Only _test.go files may import it. It never fakes RabbitMQ or Redis.
package dispatchtest

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/dispatch"
	wecomchannel "github.com/msgpulse/msgpulse/internal/dispatch/wecom"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/mail"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/provider/wecom/wecomtest"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	rdbpkg "github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/receipt"
	"github.com/msgpulse/msgpulse/internal/receipt/smslookup"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/internal/token"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Options shape a Stack.
type Options struct {
	Model func(*topology.Config) // adjust the topology (e.g. a short main-queue TTL)
	Retry dispatch.RetryPolicy   // default: MaxRetries 3, backoff 200ms, 400ms, 800ms
	Lease time.Duration          // claim lease; default 2s
	// SMS sender; default a recording fake of the project's own interface.
	SMS provider.SMSSender
	// Mailer wraps the SMTP mailer (e.g. to crash mid-send); nil = as is.
	Mailer func(provider.Mailer) provider.Mailer
	// ReturnPath makes each mail's envelope sender (a *verp.Signer, as
	// with MAIL_BOUNCE_DOMAIN); nil = the From address.
	ReturnPath mail.ReturnPath
	// WeComBase is the URL of a wecomtest server: each consumer then
	// sends WeCom messages there, with its own client and the access
	// token shared through Redis, like separate processes.
	WeComBase string
	// WeComAccounts are more WeCom applications (WECOM_ACCOUNTS) besides
	// the test credentials' default (one named default replaces it);
	// WeComLimits their limits.
	WeComAccounts []wecom.Account
	WeComLimits   map[string]wecom.Limits
	// AccountDownFor is how long a refused account stays down before a
	// probe; default 30s.
	AccountDownFor time.Duration
	// MergeWindow merges single WeCom application messages (0 = off);
	// MergeMax bounds the merge buffer (0 = the default).
	MergeWindow time.Duration
	MergeMax    int
	// MediaCacheTTL is how long media ids are reused; default 60h.
	MediaCacheTTL time.Duration
	// Media adjusts the media store's settings (rates, timeouts).
	Media func(*media.Config)
	// MaxWorkers lets each channel's pool grow from the consumer's
	// concurrency up to it (0 = fixed), resized every ScaleEvery.
	MaxWorkers int
	ScaleEvery time.Duration
	Logger     *zap.Logger
	// Weights are the levels' shares of the workers; nil = topology.DefaultLevelWeights.
	Weights map[topology.Level]int
	// VHostDefaultType is the default queue type of the stack's vhost
	// ("" = the broker's): what a declare without x-queue-type gets.
	VHostDefaultType string
	// Replicated, when set, is the stack's Redis (its master); the
	// consumers make each claim durable on WaitReplicas of its replicas
	// (REDIS_WAIT_REPLICAS; 0 = no fence).
	Replicated   *testenv.Replicated
	WaitReplicas int
}

// Stack is one isolated msgpulse deployment.
type Stack struct {
	T        testing.TB
	Broker   *testenv.Broker
	Redis    *testenv.Redis
	Model    *topology.Model
	Mail     *mailcatcher.Server
	Keys     *seal.Keys
	Status   *status.Store
	Conn     *amqp.Connection // raw connection for setup and inspection
	Ch       *amqp.Channel
	Session  *broker.Session
	Pub      *broker.Publisher
	Delayed  *delay.Publisher
	Planner  *delay.Planner
	Claims   *claim.Claimer
	Metrics  *dispatch.Metrics
	DelayMet *delay.Metrics
	Adaptive *ratelimit.Adaptive // the consumers' adaptive rates (the state is in Redis)
	// Receipts is the applier consumers started from now on are given
	// (dispatch.Config.Receipts); nil = none.
	Receipts receipt.Applier
	// Lookup is the vendor message id store the consumers write (an
	// SMS's, with its sent mark).
	Lookup *smslookup.Store
	opts   Options
}

// New builds a Stack; everything is torn down when t ends.
func New(t testing.TB, opts Options) *Stack {
	t.Helper()
	if opts.Retry.Backoff == nil {
		opts.Retry = dispatch.RetryPolicy{MaxRetries: 3, Backoff: []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond},
			Throttled: []time.Duration{time.Second}, Jitter: 0.01}
	}
	if opts.Lease == 0 {
		opts.Lease = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	s := &Stack{T: t, opts: opts, Broker: testenv.NewBrokerDefaultType(t, opts.VHostDefaultType), Redis: testenv.NewRedis(t)}
	if r := opts.Replicated; r != nil {
		c, err := rdbpkg.Open(rdbpkg.Single, r.URL(), rdbpkg.FailFast(time.Second))
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		s.Redis = &testenv.Redis{Client: c, Prefix: s.Redis.Prefix, URL: r.URL(), Mode: rdbpkg.Single}
	}
	cfg := testenv.Topology()
	if opts.Model != nil {
		opts.Model(&cfg)
	}
	m, err := topology.Build(cfg, "")
	require.NoError(t, err)
	s.Model = m
	s.Conn, err = amqp.Dial(s.Broker.URL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Conn.Close() })
	s.Ch, err = s.Conn.Channel()
	require.NoError(t, err)
	require.NoError(t, broker.Declare(s.Conn, m))

	s.Mail, err = mailcatcher.New(mailcatcher.Config{SMTPAddr: "127.0.0.1:0"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Mail.Close() })
	s.Keys, err = seal.New(seal.DevSecret)
	require.NoError(t, err)
	s.Status, err = status.New(s.Redis.Client, status.Config{Prefix: s.Redis.Prefix})
	require.NoError(t, err)
	s.Claims, err = claim.New(s.Redis.Client, claim.Config{Prefix: s.Redis.Prefix, Lease: opts.Lease})
	require.NoError(t, err)
	s.Lookup = smslookup.New(s.Redis.Client, s.Redis.Prefix)

	ctx, cancel := context.WithCancel(context.Background())
	s.Session, err = broker.NewSession(broker.Config{URL: s.Broker.URL})
	require.NoError(t, err)
	done := make(chan struct{})
	go func() { s.Session.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	_, err = s.Session.Conn(testenv.Context(t, 10*time.Second))
	require.NoError(t, err)
	s.Pub, err = broker.NewPublisher(broker.PublisherConfig{Session: s.Session})
	require.NoError(t, err)
	t.Cleanup(s.Pub.Close)
	s.Planner, err = delay.NewPlanner(m.Delay, 20*time.Millisecond, 2*time.Millisecond)
	require.NoError(t, err)
	s.Metrics = dispatch.NewMetrics(prometheus.NewRegistry())
	s.Adaptive = ratelimit.NewAdaptive(s.Redis.Client, s.Redis.Prefix, prometheus.NewRegistry())
	s.DelayMet = delay.NewMetrics(prometheus.NewRegistry())
	s.Delayed = delay.NewPublisher(s.Pub, s.Planner, m.Delay, s.DelayMet)
	return s
}

// Consumer is one running consumer "process".
type Consumer struct {
	Name       string
	Dispatcher *dispatch.Dispatcher
	cancel     context.CancelFunc
	done       chan struct{}
	once       sync.Once
}

// Stop stops the consumer gracefully and waits for it.
func (c *Consumer) Stop() {
	c.once.Do(func() { c.cancel(); <-c.done })
}

// StartConsumer runs consumers for both channels and the relay, like one
// cmd/consumer process named name, with its own broker connection.
func (s *Stack) StartConsumer(name string, concurrency int) *Consumer {
	s.T.Helper()
	return s.StartConsumerWith(name, concurrency, s.Redis.Client)
}

// StartConsumerWith is StartConsumer with its own Redis client (for
// example one through a testenv.Proxy that the test can cut).
func (s *Stack) StartConsumerWith(name string, concurrency int, rdb redis.UniversalClient) *Consumer {
	t := s.T
	t.Helper()
	claims, err := claim.New(rdb, claim.Config{Prefix: s.Redis.Prefix, Lease: s.opts.Lease})
	require.NoError(t, err)
	statuses, err := status.New(rdb, status.Config{Prefix: s.Redis.Prefix})
	require.NoError(t, err)
	mc := mail.DefaultConfig()
	mc.Host, mc.Port, mc.TLS, mc.From, mc.Timeout = "127.0.0.1", port(t, s.Mail.Addr()), mail.TLSNone, "msgpulse <no-reply@msgpulse.test>", 5*time.Second
	mc.ReturnPath = s.opts.ReturnPath
	mailer, err := mail.New(mc, s.opts.Logger)
	require.NoError(t, err)
	var m provider.Mailer = mailer
	if s.opts.Mailer != nil {
		m = s.opts.Mailer(m)
	}
	sms := s.opts.SMS
	if sms == nil {
		sms = &RecordingSMS{}
	}
	tpl, err := template.Load("", "en")
	require.NoError(t, err)
	// The test servers listen on loopback: allowed, as with
	// CALLBACK_ALLOW_PRIVATE=true.
	medc := media.Config{Prefix: s.Redis.Prefix, Egress: egress.Policy{AllowPrivate: true}, CacheTTL: s.opts.MediaCacheTTL}
	if s.opts.Media != nil {
		s.opts.Media(&medc)
	}
	mediaStore, err := media.New(rdb, medc)
	require.NoError(t, err)
	accounts, err := accountstate.New(rdb, accountstate.Config{Prefix: s.Redis.Prefix, DownFor: s.opts.AccountDownFor})
	require.NoError(t, err)
	rl, err := ratelimit.NewConfigStore(rdb, s.Redis.Prefix, zap.NewNop(), ratelimit.StoreConfig{RefreshEvery: time.Hour})
	require.NoError(t, err)

	// Like cmd/consumer: the connection outlives the consumers until they
	// have drained and acked.
	ctx, cancel := context.WithCancel(context.Background())
	bg, stopBG := context.WithCancel(context.Background())
	session, err := broker.NewSession(broker.Config{URL: s.Broker.URL, ConnectionName: name, Logger: s.opts.Logger.Named(name)})
	require.NoError(t, err)
	pub, err := broker.NewPublisher(broker.PublisherConfig{Session: session})
	require.NoError(t, err)
	delayed := delay.NewPublisher(pub, s.Planner, s.Model.Delay, s.DelayMet)
	var wc *wecomchannel.Config
	if s.opts.WeComBase != "" {
		wc = &wecomchannel.Config{Client: s.weCom(rdb), Adaptive: s.Adaptive, Accounts: accounts, Limits: s.opts.WeComLimits,
			MergeWindow: s.opts.MergeWindow, MergeMax: s.opts.MergeMax, Media: mediaStore}
	}
	d, err := dispatch.New(dispatch.Config{
		Model: s.Model, Claims: claims, Status: statuses, Templates: tpl, Keys: s.Keys, Mail: m, SMS: sms, WeCom: wc,
		SMSLookup: smslookup.New(rdb, s.Redis.Prefix), Receipts: s.Receipts,
		Delayed: delayed, Limiter: ratelimit.New(rdb, s.Redis.Prefix), RateLimits: rl, Redis: rdb, Fence: s.fence(rdb),
		Retry: s.opts.Retry, SendTimeout: 5 * time.Second, Owner: name, Metrics: s.Metrics, DelayMetrics: s.DelayMet,
		Logger: s.opts.Logger.Named(name),
	})
	require.NoError(t, err)
	c := &Consumer{Name: name, Dispatcher: d, cancel: cancel, done: make(chan struct{})}
	go func() { <-ctx.Done(); d.Drain() }() // as dispatch.Run does
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); session.Run(bg) }()
	go func() { defer wg.Done(); _ = rl.Run(bg) }()
	// As dispatch.Run does: provider limits in force before the first send.
	require.NoError(t, rl.WaitReady(context.Background(), 10*time.Second))
	var workers sync.WaitGroup
	for _, ch := range topology.Channels {
		ct, err := s.Model.Channel(ch)
		require.NoError(t, err)
		maxW := max(s.opts.MaxWorkers, concurrency)
		for _, pool := range d.Pools(ct, s.opts.Weights, maxW) {
			bc, err := broker.NewConsumer(broker.ConsumerConfig{Session: session, Queues: pool.Queues, OnPanic: d.OnPanic(ch),
				Concurrency: concurrency, MaxConcurrency: maxW, ScaleEvery: s.opts.ScaleEvery, OnWorkers: s.Metrics.WorkersOf(ch, pool.Name), Grace: 10 * time.Second, Tag: name, Logger: s.opts.Logger.Named(name)})
			require.NoError(t, err)
			workers.Add(1)
			go func() { defer workers.Done(); _ = bc.Run(ctx) }()
		}
	}
	if dl := d.DeadLetterQueues(topology.Channels, s.Model.Delay.RelayQueue != ""); len(dl) > 0 {
		bc, err := broker.NewConsumer(broker.ConsumerConfig{Session: session, Queues: dl, Concurrency: 2, Grace: 10 * time.Second, Tag: name, Logger: s.opts.Logger.Named(name)})
		require.NoError(t, err)
		workers.Add(1)
		go func() { defer workers.Done(); _ = bc.Run(ctx) }()
	}
	if s.Model.Delay.RelayQueue != "" {
		relay, err := delay.NewRelay(delay.RelayConfig{Session: session, Publisher: pub, Planner: s.Planner, Topology: s.Model.Delay, Metrics: s.DelayMet, Grace: 5 * time.Second})
		require.NoError(t, err)
		workers.Add(1)
		go func() { defer workers.Done(); _ = relay.Run(ctx) }()
	}
	go func() {
		workers.Wait() // consumers drained and acked...
		pub.Close()    // ...then publishes finished...
		stopBG()
		wg.Wait() // ...then the connection closes
		_ = mailer.Close()
		close(c.done)
	}()
	t.Cleanup(c.Stop)
	return c
}

// fence is a consumer's fence on c (Options.WaitReplicas), closed when
// the test ends.
func (s *Stack) fence(c redis.UniversalClient) *rdbpkg.Fence {
	f, err := rdbpkg.NewFence(c, rdbpkg.FenceConfig{Replicas: s.opts.WaitReplicas, Prefix: s.Redis.Prefix})
	require.NoError(s.T, err)
	s.T.Cleanup(f.Close)
	return f
}

func port(t testing.TB, addr string) int {
	t.Helper()
	i := len(addr) - 1
	for i >= 0 && addr[i] != ':' {
		i--
	}
	p, err := strconv.Atoi(addr[i+1:])
	require.NoError(t, err)
	return p
}

// Verification publishes a verification-code message the way the API does
// and returns its task id and code.
func (s *Stack) Verification(recipient, purpose string, mod func(*envelope.Message)) (taskID, code string) {
	t := s.T
	t.Helper()
	code = "4" + strconv.Itoa(100000 + int(time.Now().UnixNano()%89999))[1:]
	taskID = testenv.ID() + testenv.ID()
	sealed, err := s.Keys.Seal(code, taskID)
	require.NoError(t, err)
	deadline := time.Now().Add(10 * time.Minute)
	m := &envelope.Message{Version: envelope.SchemaVersion, TaskID: taskID, Kind: envelope.Verification, Channel: topology.Mail,
		Recipient: recipient, Template: "verify_code", Variables: map[string]string{"ttlMinutes": "10"}, Purpose: purpose,
		SealedCode: sealed, CodeDigest: s.Keys.Digest("email", recipient, purpose, code), Deadline: &deadline, CreatedAt: time.Now()}
	if mod != nil {
		mod(m)
	}
	s.publish(m)
	return taskID, code
}

// Notice publishes a `notice` message to channel (mail or sms).
func (s *Stack) Notice(channel, recipient, title string, mod func(*envelope.Message)) string {
	s.T.Helper()
	m := &envelope.Message{Version: envelope.SchemaVersion, TaskID: testenv.ID() + testenv.ID(), Kind: envelope.Notification, Channel: channel,
		Recipient: recipient, Template: "notice", Variables: map[string]string{"title": title, "content": "content of " + title}, CreatedAt: time.Now()}
	if mod != nil {
		mod(m)
	}
	s.publish(m)
	return m.TaskID
}

func (s *Stack) publish(m *envelope.Message) {
	t := s.T
	t.Helper()
	pub, err := envelope.Publishing(m)
	require.NoError(t, err)
	ct, err := s.Model.Channel(m.Channel)
	require.NoError(t, err)
	names, ok := topology.ByQueue(m.Channel, m.Robot)
	require.True(t, ok, "channel %q", m.Channel)
	apiChannel := names.API
	ids := []string{m.TaskID}
	if len(m.Recipients) > 0 {
		ids = ids[:0]
		for _, r := range m.Recipients {
			ids = append(ids, r.TaskID)
		}
		require.NoError(t, s.Status.CreateBatch(context.Background(), m.BatchID, ids))
	}
	for _, id := range ids {
		err = s.Status.Create(context.Background(), status.Record{TaskID: id, Status: status.Queued, Channel: apiChannel,
			Recipient: "masked", Kind: string(m.Kind), Template: m.Template, Tenant: m.Tenant, CreatedAt: time.Now(), UpdatedAt: time.Now()})
		if !errors.Is(err, status.ErrExists) { // publishing a task twice is a test's way to model redelivery
			require.NoError(t, err)
		}
	}
	require.NoError(t, s.Pub.Publish(testenv.Context(t, 10*time.Second), ct.Exchange, ct.Level(topology.Level(m.Level)).RoutingKey, pub))
}

// PublishRaw puts any body on a channel's main queue (for malformed input).
func (s *Stack) PublishRaw(channel, messageID string, body []byte) {
	t := s.T
	t.Helper()
	ct, err := s.Model.Channel(channel)
	require.NoError(t, err)
	require.NoError(t, s.Pub.Publish(testenv.Context(t, 10*time.Second), ct.Exchange, ct.RoutingKey,
		amqp.Publishing{MessageId: messageID, ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}))
}

// Depth returns a queue's message count.
func (s *Stack) Depth(queue string) int {
	t := s.T
	t.Helper()
	q, err := s.Ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err)
	return q.Messages
}

// MailsTo counts received mails addressed to rcpt.
func (s *Stack) MailsTo(rcpt string) int {
	n := 0
	for _, m := range s.Mail.Messages() {
		for _, to := range m.To {
			if to == rcpt {
				n++
			}
		}
	}
	return n
}

// StatusOf reads a task's status record.
func (s *Stack) StatusOf(taskID string) status.Record {
	s.T.Helper()
	r, err := s.Status.Get(context.Background(), taskID)
	require.NoError(s.T, err)
	return r
}

// RecordingSMS is an SMS sender that records what it was asked to send.
// It is a fake of the project's own interface, for tests that are about the
// pipeline, not a vendor (vendors have httptest fakes in provider/sms).
type RecordingSMS struct {
	mu   sync.Mutex
	Sent []provider.SMS
}

// Name implements provider.SMSSender.
func (r *RecordingSMS) Name() string { return "recording" }

// SendSMS implements provider.SMSSender.
func (r *RecordingSMS) SendSMS(_ context.Context, m provider.SMS) (provider.Receipt, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.Sent = append(r.Sent, m)
	return provider.Receipt{Provider: "recording", MessageID: "r-" + strconv.Itoa(len(r.Sent))}, nil
}

// Count returns how many were sent.
func (r *RecordingSMS) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.Sent)
}

// weCom is one consumer's WeCom client: its own HTTP client, the access
// token shared through Redis.
func (s *Stack) weCom(rdb redis.UniversalClient) wecomchannel.Client {
	t := s.T
	cfg := wecom.Config{CorpID: wecomtest.CorpID, CorpSecret: wecomtest.CorpSecret, AgentID: wecomtest.AgentID, APIBase: s.opts.WeComBase,
		Robots:       map[string]string{"ops": wecomtest.RobotKey, "shop-ops": wecomtest.RobotKey},
		RobotTenants: map[string][]string{"shop-ops": {"shop"}}, Accounts: s.opts.WeComAccounts}
	for _, a := range s.opts.WeComAccounts {
		if a.Name == wecom.DefaultAccount { // WECOM_ACCOUNTS defines default: no single-account settings
			cfg.CorpID, cfg.CorpSecret, cfg.AgentID = "", "", 0
		}
	}
	c, err := wecom.NewAccounts(cfg,
		func(a wecom.Account, fetch func(context.Context) (string, time.Duration, error)) (wecom.Tokens, error) {
			return token.New(rdb, token.Config{Prefix: s.Redis.Prefix, Name: wecomchannel.TokenName(a)}, fetch)
		})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// WeCom publishes a `notice` WeCom message the way the API does: to one
// userid, or, with several, as one batch message whose recipients each
// have a status record. It returns the recipients' task ids, in order.
func (s *Stack) WeCom(title string, users []string, mod func(*envelope.Message)) []string {
	s.T.Helper()
	m := &envelope.Message{Version: envelope.SchemaVersion, TaskID: testenv.ID() + testenv.ID(), Kind: envelope.Notification, Channel: topology.WeCom,
		Template: "notice", Variables: map[string]string{"title": title, "content": "content of " + title}, CreatedAt: time.Now()}
	ids := []string{m.TaskID}
	if len(users) == 1 {
		m.Recipient = users[0]
	} else {
		m.BatchID = m.TaskID
		ids = ids[:0]
		for _, u := range users {
			id := testenv.ID() + testenv.ID()
			m.Recipients = append(m.Recipients, envelope.Recipient{TaskID: id, Recipient: u})
			ids = append(ids, id)
		}
	}
	if mod != nil {
		mod(m)
	}
	s.publish(m)
	return ids
}

// Accounts reads the WeCom accounts' shared state, as the API does.
func (s *Stack) Accounts() *accountstate.Store {
	st, err := accountstate.New(s.Redis.Client, accountstate.Config{Prefix: s.Redis.Prefix})
	require.NoError(s.T, err)
	return st
}
