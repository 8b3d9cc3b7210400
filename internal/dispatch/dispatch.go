package dispatch

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/accountstate"
	"github.com/msgpulse/msgpulse/internal/breaker"
	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/claim"
	"github.com/msgpulse/msgpulse/internal/config"
	"github.com/msgpulse/msgpulse/internal/delay"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/logging"
	"github.com/msgpulse/msgpulse/internal/media"
	"github.com/msgpulse/msgpulse/internal/provider"
	"github.com/msgpulse/msgpulse/internal/provider/wecom"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
	"github.com/msgpulse/msgpulse/internal/rdb"
	"github.com/msgpulse/msgpulse/internal/seal"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/internal/template"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// RetryPolicy says when a failed send is tried again (seed 000: 5s, 30s,
// 5m; seed 004: throttling waits longer).
type RetryPolicy struct {
	MaxRetries int             // retries after the first attempt (0 = none)
	Backoff    []time.Duration // wait before retry n (the last repeats); default 5s, 30s, 5m
	Throttled  []time.Duration // same, when the provider throttled us; default 1m, 5m, 15m
	Jitter     float64         // ± fraction; default 0.1
}

func (p *RetryPolicy) setDefaults() {
	if len(p.Backoff) == 0 {
		p.Backoff = []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
	}
	if len(p.Throttled) == 0 {
		p.Throttled = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}
	}
	if p.Jitter == 0 {
		p.Jitter = 0.1
	}
}

// Wait returns the wait before retry n (1-based), at least the provider's
// hint.
func (p RetryPolicy) Wait(n int, throttled bool, hint time.Duration) time.Duration {
	steps := p.Backoff
	if throttled {
		steps = p.Throttled
	}
	w := steps[min(n, len(steps))-1]
	if p.Jitter > 0 {
		w += time.Duration((rand.Float64()*2 - 1) * p.Jitter * float64(w)) //nolint:gosec // jitter, not a secret
	}
	return max(w, hint, time.Millisecond)
}

// Config wires a Dispatcher.
type Config struct {
	Model     *topology.Model
	Claims    *claim.Claimer
	Status    *status.Store
	Templates *template.Store
	Keys      *seal.Keys
	Mail      provider.Mailer
	SMS       provider.SMSSender
	WeCom     WeComClient
	// Adaptive holds each WeCom account (application, robot) to its
	// adaptive rate; nil = no adaptive rate. AppRate and RobotRate bound
	// it (defaults: DefaultAppRate, DefaultRobotRate).
	Adaptive   *ratelimit.Adaptive
	AppRate    ratelimit.Bounds
	RobotRate  ratelimit.Bounds
	Delayed    *delay.Publisher
	Limiter    *ratelimit.Limiter
	RateLimits *ratelimit.ConfigStore // per-provider limits; nil = none
	Callbacks  *Callbacks             // nil = no callbacks
	Redis      redis.UniversalClient  // pinged while paused, and pipelines claims with status updates
	// Fence makes a claim durable before its provider is called (see
	// durable.go); nil or off: a claim is trusted once Redis answered.
	Fence *rdb.Fence
	Retry RetryPolicy
	// SendTimeout bounds one provider call; default 30s.
	SendTimeout time.Duration
	// MaxMessageBytes: a larger body is dead-lettered as malformed before
	// it is decoded or rendered; default 1 MiB.
	MaxMessageBytes int
	Owner           string // this consumer's name in claims
	Metrics         *Metrics
	DelayMetrics    *delay.Metrics
	Logger          *zap.Logger

	// Accounts is the WeCom accounts' shared state (down marks, health);
	// nil = accounts are never marked down and their health is 1.
	Accounts *accountstate.Store
	// WeComLimits are each account's limits per second, minute, hour and
	// day (WECOM_ACCOUNT_LIMITS), by account name.
	WeComLimits map[string]wecom.Limits
	// MergeWindow: single WeCom application messages (not high) with the
	// same account, type and content arriving within it of each other go
	// out as one call (WECOM_MERGE_WINDOW); 0 = off.
	MergeWindow time.Duration
	// MergeMax is how many messages the merge buffer holds at most
	// (WECOM_MERGE_MAX); default wecom.MaxUsers. They wait there, not in
	// workers: each normal and low WeCom queue may hold that many more
	// deliveries (Pools).
	MergeMax int
	// Media fetches the files of WeCom media messages and caches their
	// media ids; nil = media messages fail permanently.
	Media *media.Store
	// MediaWorkers is how many WeCom media files are downloaded and
	// uploaded at once (WECOM_MEDIA_CONCURRENCY), in a pool of their own,
	// off the send workers; default 16. MediaTenantWorkers is how many of
	// them one tenant's files may take (WECOM_MEDIA_TENANT_CONCURRENCY);
	// default 4.
	MediaWorkers       int
	MediaTenantWorkers int
	// MediaMaxBytes is what the pool's files may hold at once, from before
	// their download to the end of their upload (WECOM_MEDIA_MAX_BYTES);
	// MediaTenantMaxBytes is one tenant's share of it
	// (WECOM_MEDIA_TENANT_MAX_BYTES). Defaults 192 MiB and 64 MiB.
	MediaMaxBytes, MediaTenantMaxBytes int64
}

// Validate fills defaults and checks the wiring.
func (c *Config) Validate() error {
	if c.Model == nil || c.Claims == nil || c.Status == nil || c.Templates == nil || c.Keys == nil || c.Delayed == nil || c.Limiter == nil || c.Redis == nil {
		return errors.New("dispatch: missing dependency")
	}
	if c.Mail == nil && c.SMS == nil && c.WeCom == nil {
		return errors.New("dispatch: no provider")
	}
	if c.AppRate == (ratelimit.Bounds{}) {
		c.AppRate = DefaultAppRate
	}
	if c.RobotRate == (ratelimit.Bounds{}) {
		c.RobotRate = DefaultRobotRate
	}
	if !c.AppRate.Valid() || !c.RobotRate.Valid() {
		return errors.New("dispatch: invalid adaptive rate bounds")
	}
	c.Retry.setDefaults()
	if c.Retry.MaxRetries < 0 {
		return errors.New("dispatch: MaxRetries must not be negative")
	}
	if c.SendTimeout == 0 {
		c.SendTimeout = 30 * time.Second
	}
	if c.MaxMessageBytes == 0 {
		c.MaxMessageBytes = 1 << 20
	}
	if c.MergeMax == 0 {
		c.MergeMax = wecom.MaxUsers
	}
	if c.MediaWorkers == 0 {
		c.MediaWorkers = config.DefaultMediaWorkers
	}
	if c.MediaTenantWorkers == 0 {
		c.MediaTenantWorkers = config.DefaultMediaTenantWorkers
	}
	if c.MediaMaxBytes == 0 {
		c.MediaMaxBytes = config.DefaultMediaMaxBytes
	}
	if c.MediaTenantMaxBytes == 0 {
		c.MediaTenantMaxBytes = min(config.DefaultMediaTenantMaxBytes, c.MediaMaxBytes)
	}
	// A share below the largest file would never hold one: its messages
	// would come back for ever.
	if c.MediaTenantMaxBytes < media.MaxFileBytes || c.MediaTenantMaxBytes > c.MediaMaxBytes || c.MediaMaxBytes > config.MaxMediaBytes {
		return fmt.Errorf("dispatch: MediaMaxBytes %d or MediaTenantMaxBytes %d out of range (at least %d, the largest file; a tenant's at most the whole)", c.MediaMaxBytes, c.MediaTenantMaxBytes, media.MaxFileBytes)
	}
	if c.MergeMax < 1 || c.MergeMax > config.MaxMergeHeld || c.MediaWorkers < 1 || c.MediaWorkers > config.MaxMediaWorkers ||
		c.MediaTenantWorkers < 1 || c.MediaTenantWorkers > c.MediaWorkers {
		return fmt.Errorf("dispatch: MergeMax %d, MediaWorkers %d or MediaTenantWorkers %d out of range", c.MergeMax, c.MediaWorkers, c.MediaTenantWorkers)
	}
	if c.MaxMessageBytes > envelope.MaxBrokerBytes {
		return fmt.Errorf("dispatch: MaxMessageBytes %d over %d, RabbitMQ 4.x's default max_message_size: no broker left at its default delivers one", c.MaxMessageBytes, envelope.MaxBrokerBytes)
	}
	if c.Owner == "" {
		return errors.New("dispatch: Owner is required")
	}
	if c.Metrics == nil {
		c.Metrics = NewMetrics(nil)
	}
	if c.DelayMetrics == nil {
		c.DelayMetrics = delay.NewMetrics(nil)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Dispatcher processes deliveries.
type Dispatcher struct {
	cfg   Config
	log   *zap.Logger
	now   func() time.Time
	merge *merger // nil = WeCom sends are not merged
	// media downloads and uploads WeCom media files off the send path.
	media *mediaPool
	// uploads: one WeCom media upload per file at a time in this process
	// (the fleet's is Media.Upload's lock).
	uploads flight
	// accounts are the WeCom accounts, each resolved once (accounts.go).
	accounts *accounts
	// renew keeps every lease of this consumer alive in one round trip per
	// tick, instead of a goroutine per message (issue 22).
	renew *claim.Renewer
	hot   hotMetrics
	// burst sends the claims, and the sent marks, of deliveries arriving
	// together as one script (burst.go).
	burst *burst
}

// New validates cfg and returns a Dispatcher.
func New(cfg Config) (*Dispatcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	d := &Dispatcher{cfg: cfg, log: cfg.Logger, now: time.Now, renew: cfg.Claims.NewRenewer(), hot: newHotMetrics(cfg.Metrics), burst: newBurst(cfg.Redis), accounts: newAccounts(&cfg)}
	if cfg.MergeWindow > 0 {
		d.merge = newMerger(d, cfg.MergeWindow, cfg.MergeMax)
	}
	d.media = newMediaPool(d, cfg.MediaWorkers, cfg.MediaTenantWorkers, cfg.MediaMaxBytes, cfg.MediaTenantMaxBytes)
	return d, nil
}

// Drain makes the work handed on (merge buffer, media pool) finish as soon
// as it can: merged sends go at once, and media not yet downloading come
// back later (a snooze). Call it when the consumers start to stop; they
// wait for the deliveries it holds (broker.Hold), within their grace.
func (d *Dispatcher) Drain() {
	if d.merge != nil {
		d.merge.drain()
	}
	d.media.drain()
}

// job is one delivery on its way through the pipeline.
type job struct {
	channel  string
	level    topology.Level // of the queue it came from
	del      *amqp.Delivery
	msg      *envelope.Message // nil when the body is malformed
	provider string            // the provider that sent or failed

	claim           *claim.Claim // ours, once the provider accepted the message
	sendingRecorded bool         // the "sending" status rode with the claim
	// sending is closed once a batch's "sending" statuses, written while
	// its call is in flight, are in (nil when none is being written).
	sending chan struct{}
	// rejected: recipients of a WeCom message that WeCom refused for good
	// (invaliduser, unlicenseduser), by userid, with the reason.
	rejected map[string]string
	// groupRules: the provider limits of a message that waits to be merged,
	// taken once for its merged send.
	groupRules []ratelimit.Rule
	// acct is a WeCom job's account, resolved once (accounts.resolve) and
	// handed down to everything that needs it.
	acct *account

	// A WeCom job may be handed on (to the merge buffer, to the media
	// pool) and finished by whoever holds it (finish). queue names its
	// queue, span is the handler's; hold is its delivery's broker.Hold
	// (nil: its queue has no room to hand on, see handsOnQueue);
	// noHandOff: after a Redis pause it finishes where it is.
	queue     string
	span      telemetry.Span
	hold      *broker.Hold
	noHandOff bool
	// claimed is the claim held while the send is in flight, and
	// stopRenew stops renewing its lease (afterSend).
	claimed   *claim.Claim
	stopRenew func()
	sendStart time.Time
	// media is the job's place in the media pool (mediaPool.reserve), and
	// mediaFile the file it holds there.
	media     mediaSlot
	mediaFile *mediaFile
}

// taskIDs are the status records a job's outcome is written to: the
// message's own, or each recipient's of a WeCom batch.
func (j *job) taskIDs() []string {
	if j.msg == nil {
		return []string{j.del.MessageId}
	}
	if len(j.msg.Recipients) == 0 {
		return []string{j.msg.TaskID}
	}
	ids := make([]string, len(j.msg.Recipients))
	for i, r := range j.msg.Recipients {
		ids[i] = r.TaskID
	}
	return ids
}

// waitSending waits for a batch's "sending" statuses (see send) before any
// other status of the job is written, so that one never lands over an
// outcome.
func (j *job) waitSending() {
	if j.sending != nil {
		<-j.sending
		j.sending = nil
	}
}

// LevelHandler returns the broker handler for one level's queue of a
// channel: the pipeline is the same, the level labels its metrics.
func (d *Dispatcher) LevelHandler(channel string, level topology.Level) broker.Handler {
	queue := d.queueName(channel, level)
	return func(ctx context.Context, del *amqp.Delivery) broker.Action {
		ctx, span := telemetry.StartProcess(ctx, queue, del)
		d.cfg.Metrics.InFlight.Inc()
		d.hot.consumed(channel, level).Inc()
		if due, ok := envelope.HeaderTime(del.Headers, envelope.HeaderDueAt); ok {
			d.cfg.DelayMetrics.Accuracy.Observe(d.now().Sub(due).Seconds())
		}
		j := &job{channel: channel, level: level, del: del, provider: d.providerName(channel), queue: queue, span: span}
		if d.handsOnQueue(channel, level) {
			j.hold = broker.HoldDelivery(ctx)
		}
		handedOn := false
		defer func() {
			if !handedOn {
				d.end(j)
			}
		}()
		for {
			err := d.process(ctx, j)
			if errors.Is(err, errHandedOn) {
				handedOn = true
				return broker.Held // whoever holds it finishes it
			}
			if !errors.Is(err, errRedis) {
				return d.settle(ctx, queue, j, err)
			}
			if !d.pause(ctx, err) {
				return broker.Requeue
			}
		}
	}
}

// OnPanic records a handler panic; the consumer then rejects the delivery.
func (d *Dispatcher) OnPanic(channel string) func(*amqp.Delivery, any) {
	return func(del *amqp.Delivery, recovered any) {
		d.log.Error("panic while processing; dead-lettering", zap.String("task_id", del.MessageId), telemetry.HeaderField(del.Headers), zap.Any("panic", recovered))
		// A WeCom batch's records are its recipients', not its own.
		j := &job{channel: channel, level: topology.Code, del: del}
		if msg, err := envelope.Decode(del.Body); err == nil && msg.TaskID == del.MessageId {
			j.msg = msg
			if msg.Level != "" {
				j.level = topology.Level(msg.Level)
			}
		}
		d.cfg.Metrics.DeadLettered.WithLabelValues(channel, string(j.level), d.providerName(channel), ReasonPanic).Inc()
		d.recordJob(context.Background(), j, status.Update{Status: status.Failed, Reason: ptr(ReasonPanic), ErrorClass: ptr("panic"), LastError: ptr(fmt.Sprint("panic: ", recovered))})
	}
}

func (d *Dispatcher) providerName(channel string) string {
	if channel == topology.Mail && d.cfg.Mail != nil {
		return d.cfg.Mail.Name()
	}
	if channel == topology.SMS && d.cfg.SMS != nil {
		return d.cfg.SMS.Name()
	}
	if channel == topology.WeCom && d.cfg.WeCom != nil {
		return d.cfg.WeCom.Name()
	}
	return "none"
}

// process runs the pipeline up to and including the send. It returns nil
// when the provider accepted the message, or an error whose kind tells
// decide what to do.
func (d *Dispatcher) process(ctx context.Context, j *job) error {
	if n := len(j.del.Body); n > d.cfg.MaxMessageBytes {
		// The API never writes one this big: rendering and sending it would
		// only spend the provider's time and the recipient's patience.
		return fmt.Errorf("%w: body of %d bytes exceeds MAX_MESSAGE_BYTES (%d)", envelope.ErrMalformed, n, d.cfg.MaxMessageBytes)
	}
	msg, err := envelope.Decode(j.del.Body)
	if err != nil {
		return err
	}
	if msg.Channel != j.channel {
		return fmt.Errorf("%w: a %s message in the %s queue", envelope.ErrMalformed, msg.Channel, j.channel)
	}
	if msg.Level != "" {
		if _, err := topology.ParseLevel(msg.Level); err != nil {
			return fmt.Errorf("%w: %w", envelope.ErrMalformed, err)
		}
	}
	j.msg = msg
	if msg.Expired(d.now()) {
		return ErrDeadline
	}
	key := d.cfg.Claims.TaskKey(j.channel, msg.TaskID)
	if msg.Kind == envelope.Verification {
		key = d.cfg.Claims.VerificationKey(j.channel, msg.Recipient, msg.CodeDigest, msg.Purpose, msg.TaskID)
	}
	var rules []ratelimit.Rule
	if d.cfg.RateLimits != nil {
		rules = d.cfg.RateLimits.Rules(j.provider)
	}
	if j.channel == topology.WeCom && d.cfg.WeCom != nil {
		if j.acct == nil { // once per job, even when a Redis pause runs it again
			if j.acct, err = d.accounts.resolve(msg); err != nil {
				return err
			}
		}
		if err := d.accountUp(ctx, j.acct); err != nil {
			return err
		}
		if !d.mergeable(j) {
			// A merged send reads its account's rate once, for the
			// group, when it goes out (merger.send): not once a member.
			more, err := d.accountRules(ctx, j.acct)
			if err != nil {
				return fmt.Errorf("%w: adaptive rate: %w", errRedis, err)
			}
			rules = append(rules, more...)
		}
		if msg.Media != nil && d.cfg.Media != nil && d.handsOn(j) {
			// Before the claim: a snooze when the pool has no room,
			// nothing attempted, nothing recorded.
			if err := d.media.reserve(j); err != nil {
				return err
			}
		}
	}
	if j.level != topology.Code {
		rules = reserveForCodes(rules) // every provider limit keeps its last tokens for codes
	}
	if d.mergeable(j) {
		// A merged send is one call: its limits are taken once, for the
		// group, when it goes out, with its account's rate added then.
		j.groupRules, rules = rules, nil
	}
	// The sending mark rides with the claim only for a message of one task:
	// a batch's id has no status record of its own.
	cctx, cspan := telemetry.Start(ctx, "claim")
	res, err := d.claim(cctx, j, key, len(rules) == 0 && len(j.msg.Recipients) == 0)
	cspan.End()
	if err != nil {
		return fmt.Errorf("%w: claim: %w", errRedis, notDurableIf(key, err))
	}
	switch res.Outcome {
	case claim.AlreadySent:
		return ErrAlreadySent
	case claim.Held:
		// Another consumer is sending it now. Come back once its lease
		// can have expired: by then it is either marked sent or free.
		return Snooze(res.HeldFor+time.Second, "claimed by "+res.HeldBy)
	}
	cl := res.Claim
	if err := d.durable(ctx, cl); err != nil {
		return err
	}
	if len(rules) > 0 {
		if _, err := d.cfg.Limiter.Take(ctx, ratelimit.Request{Rules: rules}); err != nil {
			d.release(ctx, cl)
			var le *ratelimit.LimitError
			if errors.As(err, &le) {
				return Snooze(le.RetryAfter, "provider "+j.provider+" "+le.Error())
			}
			return fmt.Errorf("%w: provider limit: %w", errRedis, err)
		}
	}
	j.claimed, j.stopRenew = cl, d.renew.Hold(cl)
	err = d.send(ctx, j)
	if errors.Is(err, errHandedOn) {
		return err // finish completes it
	}
	return d.afterSend(ctx, j, err)
}

// afterSend stops renewing the claim of a send that is done, releasing it
// when the send failed.
func (d *Dispatcher) afterSend(ctx context.Context, j *job, err error) error {
	j.stopRenew()
	if err != nil {
		d.release(ctx, j.claimed)
		return err
	}
	// decide marks the claim sent at once, together with the status: the
	// gap between the provider's yes and that write is the only window in
	// which a crash leads to a duplicate.
	j.claim = j.claimed
	return nil
}

// end ends what the handler started for j (its span, the in-flight
// count, its media place): when the handler returns, or, for a job handed
// on, when it is finished.
func (d *Dispatcher) end(j *job) {
	// Also on a panic: OnPanic then writes "failed", which a late
	// "sending" must not overwrite.
	j.waitSending()
	d.media.unreserve(j)
	d.cfg.Metrics.InFlight.Dec()
	j.span.End()
}

// finish completes a job that was handed on, once its send is done, in
// the goroutine of whoever held it: the rest of process and of the
// handler (a Redis pause runs the pipeline again, here), then the settle.
func (d *Dispatcher) finish(ctx context.Context, j *job, rcpt provider.Receipt, err error) {
	defer d.end(j)
	err = d.afterSend(ctx, j, d.sent(j, rcpt, err))
	for errors.Is(err, errRedis) {
		if !d.pause(ctx, err) {
			j.hold.Settle(broker.Requeue)
			return
		}
		j.noHandOff = true
		err = d.process(ctx, j)
	}
	if a := d.settle(ctx, j.queue, j, err); a != broker.Held { // held: its publish settles it (holdLater)
		j.hold.Settle(a)
	}
}

// handsOn reports whether j may be handed on rather than wait in its
// worker.
func (d *Dispatcher) handsOn(j *job) bool { return j.hold != nil && !j.noHandOff }

// handsOnQueue says whether a queue of channel and level has room for what
// its handler hands on (broker.QueueShare.Hold, given in Pools): WeCom's
// notices' queues, with a WeCom provider, for the merge buffer and the
// media pool. Never the codes' queue: a code has no media and is never
// merged, so its queue keeps the plain prefetch and its deliveries no Hold.
func (d *Dispatcher) handsOnQueue(channel string, l topology.Level) bool {
	return channel == topology.WeCom && d.cfg.WeCom != nil && l != topology.Code
}

// claim acquires the message's idempotency claim. With withSending, the
// "sending" status update rides in the same round trip, guarded by the
// claim's lease so that it changes nothing unless the claim is ours; it is
// left for send when a provider limit may still hold the message back.
//
// Only the claim's result decides: a status write never decides a
// message's fate, and retrying the pipeline after the claim ran would find
// our own lease.
func (d *Dispatcher) claim(ctx context.Context, j *job, key string, withSending bool) (claim.Result, error) {
	var res claim.Result
	err := d.burst.Do(urgent(j.level), func(p redis.Scripter) (func() error, error) {
		a, err := d.cfg.Claims.QueueAcquire(ctx, p, key, d.cfg.Owner)
		if err != nil {
			return nil, err
		}
		var sending func() (status.Record, error)
		j.sendingRecorded = false
		if withSending {
			u := d.sendingUpdate(j)
			u.Guard = &status.Guard{Key: key, Value: a.Lease}
			if sending, err = d.cfg.Status.QueueUpdate(ctx, p, j.msg.TaskID, u); err != nil {
				return nil, err
			}
		}
		return func() error {
			if res, err = a.Result(); err != nil {
				return err
			}
			if sending != nil && res.Outcome == claim.Claimed {
				_, serr := sending()
				d.logStatusError(j.msg.TaskID, status.Sending, serr)
				j.sendingRecorded = serr == nil
			}
			return nil
		}, nil
	})
	return res, err
}

func (d *Dispatcher) sendingUpdate(j *job) status.Update {
	return status.Update{Status: status.Sending, IncAttempts: true, Provider: ptr(j.provider), Blind: true}
}

// markSent marks the claim sent and records the outcome in one round
// trip, then fires the callbacks. The outcome is sent, except for the
// recipients of a WeCom message that WeCom refused for good: failed, with
// the reason. Only the claim's mark is retried after a NOSCRIPT: a
// repeated status update is harmless.
func (d *Dispatcher) markSent(ctx context.Context, j *job) {
	// The burst bounds its own round trip and the calls below only record,
	// so no timer of ours is needed. The outcome is written even when the
	// delivery's context ended: the message went out.
	ctx = context.WithoutCancel(ctx)
	now := d.now()
	blind := j.msg.CallbackURL == "" || d.cfg.Callbacks == nil
	sent := status.Update{Status: status.Sent, SentAt: &now, Provider: ptr(j.provider), LastError: ptr(""), Blind: blind}
	ids := j.taskIDs()
	updates := make([]status.Update, len(ids))
	for i := range ids {
		updates[i] = sent
		if why, ok := j.rejected[d.recipientAt(j, i)]; ok {
			updates[i] = status.Update{Status: status.Failed, Provider: ptr(j.provider), Reason: ptr(ReasonPermanent), ErrorClass: ptr(string(provider.Permanent)), LastError: ptr(why), Blind: blind}
		}
	}
	var recs []status.Record
	var recErr error
	err := d.burst.Do(urgent(j.level), func(p redis.Scripter) (func() error, error) {
		marked := j.claim.QueueMarkSent(ctx, p)
		results := make([]func() (status.Record, error), len(ids))
		for i, id := range ids {
			var err error
			if results[i], err = d.cfg.Status.QueueUpdate(ctx, p, id, updates[i]); err != nil {
				return nil, err
			}
		}
		return func() error {
			recs, recErr = recs[:0], nil
			for _, res := range results {
				rec, err := res()
				if err != nil {
					recErr = err
					continue
				}
				recs = append(recs, rec)
			}
			return marked()
		}, nil
	})
	if err != nil && !errors.Is(err, claim.ErrLost) {
		d.log.Error("sent, but could not mark the claim sent; a redelivery within the lease could send again",
			zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Error(err))
	}
	d.logStatusError(j.msg.TaskID, status.Sent, recErr)
	if !blind {
		for _, rec := range recs {
			d.cfg.Callbacks.Send(ctx, j.msg.CallbackURL, j.msg.Tenant, rec) // queues; its workers bound delivery
		}
	}
	if n := len(j.rejected); n > 0 {
		d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, ReasonPermanent).Add(float64(n))
		d.log.Warn("WeCom refused some recipients for good; they are failed", zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Int("refused", n), zap.Int("recipients", len(ids)))
	}
}

// reject adds recipients refused for good, with the reason, to those
// already refused (the consumer's own refusals come before WeCom's).
func (j *job) reject(why map[string]string) {
	if len(why) == 0 {
		return
	}
	if j.rejected == nil {
		j.rejected = make(map[string]string, len(why))
	}
	maps.Copy(j.rejected, why)
}

// recipientAt is the i-th recipient of a job (see taskIDs).
func (d *Dispatcher) recipientAt(j *job, i int) string {
	if len(j.msg.Recipients) == 0 {
		return j.msg.Recipient
	}
	return j.msg.Recipients[i].Recipient
}

func (d *Dispatcher) logStatusError(taskID string, st status.State, err error) {
	if err != nil && !errors.Is(err, status.ErrFinal) && !errors.Is(err, status.ErrGuard) {
		d.log.Warn("could not update the status record", zap.String("task_id", taskID), zap.String("status", string(st)), zap.Error(err))
	}
}

func (d *Dispatcher) release(ctx context.Context, cl *claim.Claim) {
	if err := cl.Release(context.WithoutCancel(ctx)); err != nil && !errors.Is(err, claim.ErrLost) {
		d.log.Warn("could not release the claim; it expires with its lease", zap.String("key", cl.Key()), zap.Error(err))
	}
}

// send renders and sends. Status moves to sending, with one more attempt.
func (d *Dispatcher) send(ctx context.Context, j *job) error {
	msg := j.msg
	vars := maps.Clone(msg.Variables)
	if vars == nil {
		vars = map[string]string{}
	}
	if msg.Kind == envelope.Verification {
		code, err := d.cfg.Keys.Open(msg.SealedCode, msg.TaskID)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		vars["code"] = code
	} else if d.cfg.Templates.IsCode(msg.Template) {
		// The API refuses these; a message that got here anyway (an older
		// API, a hand-made publish) would carry a code its sender chose.
		return fmt.Errorf("%w: template %s carries a verification code and is sent only by POST /api/verification-codes", ErrTemplate, msg.Template)
	}
	switch {
	case j.sendingRecorded:
	case len(msg.Recipients) > 0:
		// A batch's records, up to 1,000, take Redis tens of milliseconds
		// on a busy machine: the call does not wait for them (issue 22:
		// they were a fifth of a WeCom batch's time to its recipients).
		// The goroutine is the job's: decide, and the handler on its way
		// out, wait for it (waitSending).
		done := make(chan struct{})
		ids, u := j.taskIDs(), d.sendingUpdate(j)
		go func() {
			defer close(done)
			d.recordAll(ctx, msg.TaskID, ids, u)
		}()
		j.sending = done
	default:
		d.recordJob(ctx, j, d.sendingUpdate(j))
	}
	sctx, cancel := context.WithTimeout(ctx, d.cfg.SendTimeout)
	defer cancel()
	j.sendStart = d.now()
	var rcpt provider.Receipt
	var err error
	switch j.channel {
	case topology.Mail:
		if d.cfg.Mail == nil {
			return fmt.Errorf("%w: this consumer has no mail provider", ErrTemplate)
		}
		var e template.RenderedEmail
		_, rspan := telemetry.Start(ctx, "render")
		e, err = d.cfg.Templates.RenderEmail(msg.Template, msg.Locale, vars)
		rspan.End()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		pctx, pspan := telemetry.StartProviderCall(sctx, j.channel, j.provider)
		rcpt, err = d.cfg.Mail.SendMail(pctx, provider.Mail{To: msg.Recipient, Subject: e.Subject, HTML: e.HTML, Text: e.Text, TaskID: msg.TaskID})
		endCall(pspan, err)
	case topology.SMS:
		if d.cfg.SMS == nil {
			return fmt.Errorf("%w: this consumer has no SMS provider", ErrTemplate)
		}
		var text string
		_, rspan := telemetry.Start(ctx, "render")
		text, err = d.cfg.Templates.RenderSMS(msg.Template, msg.Locale, vars)
		rspan.End()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrTemplate, err)
		}
		pctx, pspan := telemetry.StartProviderCall(sctx, j.channel, j.provider)
		rcpt, err = d.cfg.SMS.SendSMS(pctx, provider.SMS{To: msg.Recipient, Text: text, TaskID: msg.TaskID, Template: msg.Template, Params: vars})
		endCall(pspan, err)
	case topology.WeCom:
		pctx, pspan := telemetry.StartProviderCall(sctx, j.channel, j.provider)
		rcpt, err = d.sendWeCom(ctx, pctx, j, vars)
		if errors.Is(err, errHandedOn) {
			pspan.End() // its call is made by whoever holds it
			return err
		}
		endCall(pspan, err)
	}
	return d.sent(j, rcpt, err)
}

// sent notes which provider answered a send, and how long it took.
func (d *Dispatcher) sent(j *job, rcpt provider.Receipt, err error) error {
	var pe *provider.Error
	switch {
	case err == nil && rcpt.Provider != "":
		j.provider = rcpt.Provider
	case errors.As(err, &pe) && pe.Provider != "":
		j.provider = pe.Provider
	}
	d.hot.sendDuration(j.channel, j.provider).Observe(d.now().Sub(j.sendStart).Seconds())
	return err
}

// jobFields are the log fields of a job's outcome: the recipient and
// attempt only once its message is decoded.
func jobFields(ctx context.Context, taskID string, j *job) []zap.Field {
	f := []zap.Field{zap.String("task_id", taskID), zap.String("channel", j.channel), zap.String("provider", j.provider), telemetry.LogField(ctx)}
	if j.msg != nil {
		f = append(f, zap.String("recipient", logging.Mask(j.msg.Recipient)), zap.Int("attempt", j.msg.Attempt+1))
	}
	return f
}

// decide is the one place that turns a step's outcome into ack, retry or
// dead-letter.
func (d *Dispatcher) decide(ctx context.Context, j *job, err error) broker.Action {
	j.waitSending()
	var snooze *SnoozeError
	taskID := j.del.MessageId
	if j.msg != nil {
		taskID = j.msg.TaskID
	}
	if err == nil {
		d.markSent(ctx, j)
		d.hot.sent(j.channel, j.level, j.provider).Add(float64(len(j.taskIDs()) - len(j.rejected)))
		// Debug: a line per message cost more than the rest of the
		// handler's own work (issue 22); msgpulse_sent_total and the
		// status record say the same. Failures are always logged. Checked
		// first, so that a success builds no logger.
		if ce := d.log.Check(zap.DebugLevel, "sent"); ce != nil {
			ce.Write(jobFields(ctx, taskID, j)...)
		}
		return broker.Ack
	}
	log := d.log.WithLazy(jobFields(ctx, taskID, j)...)
	switch {
	case errors.Is(err, ErrAlreadySent):
		d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "duplicate").Inc()
		log.Info("already sent; acking the duplicate delivery")
		return broker.Ack

	case errors.As(err, &snooze):
		a := d.later(ctx, j, snooze.For, false)
		if a != broker.Requeue {
			d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "snoozed").Inc()
			log.Info("snoozed", zap.Duration("for", snooze.For), zap.String("why", snooze.Reason))
		}
		return a

	case errors.Is(err, envelope.ErrMalformed):
		return d.deadLetter(ctx, j, log, ReasonMalformed, "malformed", err)

	case errors.Is(err, ErrDeadline):
		d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, ReasonDeadline).Inc()
		d.final(ctx, j, status.Update{Status: status.Expired, Reason: ptr(ReasonDeadline), ErrorClass: ptr("deadline"),
			LastError: ptr("not sent: its deadline " + j.msg.Deadline.UTC().Format(time.RFC3339) + " had passed")})
		log.Warn("past its deadline; dead-lettering without sending")
		return broker.Reject

	case errors.Is(err, ErrAccountDown):
		return d.waitForAccount(ctx, j, log, err)

	case errors.Is(err, ErrTemplate), errors.Is(err, provider.ErrPermanent):
		return d.deadLetter(ctx, j, log, ReasonPermanent, classOf(err), err)

	case errors.Is(err, breaker.ErrOpen):
		// Nothing was attempted: an open breaker refused the send. Come
		// back when it may let a probe through, without spending one of
		// the message's retries on a send that never happened.
		wait := time.Second
		var pe *provider.Error
		if errors.As(err, &pe) && pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		wait += time.Duration(rand.Int64N(int64(wait/4) + 1)) //nolint:gosec // spreading returns, not a secret
		a := d.retryLater(ctx, j, wait, false, status.Update{Status: status.Retrying, ErrorClass: ptr("circuit_open"), LastError: ptr(err.Error())})
		if a != broker.Requeue {
			d.cfg.Metrics.Skipped.WithLabelValues(j.channel, string(j.level), "breaker_open").Inc()
			log.Info("circuit breaker open; the message comes back later", zap.Duration("in", wait))
		}
		return a
	}

	// Transient (timeouts, 4xx SMTP, throttling, vendor 5xx) and anything
	// unclassified: retry through the delay queues, up to MaxRetries.
	class := classOf(err)
	retry := j.msg.Attempt + 1
	if retry > d.cfg.Retry.MaxRetries {
		return d.deadLetter(ctx, j, log, ReasonExhausted, class, fmt.Errorf("after %d attempts: %w", retry, err))
	}
	var pe *provider.Error
	var hint time.Duration
	if errors.As(err, &pe) {
		hint = pe.RetryAfter
	}
	wait := d.cfg.Retry.Wait(retry, errors.Is(err, provider.ErrThrottled), hint)
	a := d.retryLater(ctx, j, wait, true, status.Update{Status: status.Retrying, ErrorClass: ptr(class), LastError: ptr(err.Error())})
	if a != broker.Requeue {
		d.cfg.Metrics.Retried.WithLabelValues(j.channel, string(j.level), j.provider, class).Inc()
		log.Warn("send failed; retry scheduled", zap.String("class", class), zap.Duration("in", wait), zap.Error(err))
	}
	return a
}

func (d *Dispatcher) deadLetter(ctx context.Context, j *job, log *zap.Logger, reason, class string, err error) broker.Action {
	d.cfg.Metrics.DeadLettered.WithLabelValues(j.channel, string(j.level), j.provider, reason).Inc()
	d.final(ctx, j, status.Update{Status: status.Failed, Reason: ptr(reason), ErrorClass: ptr(class), LastError: ptr(err.Error())})
	log.Warn("dead-lettering", zap.String("reason", reason), zap.String("class", class), zap.Error(err))
	return broker.Reject
}

func classOf(err error) string {
	switch {
	case errors.Is(err, ErrTemplate):
		return "template"
	case errors.Is(err, envelope.ErrMalformed):
		return "malformed"
	}
	return string(provider.Classify(err))
}

// retryLater records u (a "retrying" status) and then schedules the
// message for later (see later).
//
// In that order: the copy can be back at once (a wait cut short by its
// deadline comes back in a millisecond) and reach a final status in
// another worker, expired or failed. A "retrying" written after that
// overwrote it for good (the status script keeps only "sent" from being
// overwritten): TestRefusedAccountWaitsAndExpiresWithoutSlowingTheOther
// once found a message dead-lettered for its deadline whose record still
// said retrying. When the publish fails the delivery is held until it
// works, so "retrying" is still true.
func (d *Dispatcher) retryLater(ctx context.Context, j *job, wait time.Duration, isRetry bool, u status.Update) broker.Action {
	d.recordJob(ctx, j, u)
	return d.later(ctx, j, wait, isRetry)
}

// later publishes the message again, to arrive after wait: Ack once the
// broker confirmed the copy. When the broker refuses or blocks it (a full
// delay queue, a resource alarm), the delivery is held and the publish
// tried again in the background until it works (Held; see holdLater),
// never handed back to spend a delivery attempt. A retry counts the
// attempt it follows.
func (d *Dispatcher) later(ctx context.Context, j *job, wait time.Duration, isRetry bool) broker.Action {
	out, err := d.laterMessage(j, isRetry)
	if err != nil {
		// Not the broker's refusal: nothing to wait for. Hand it back after
		// a pause rather than ack a message whose next attempt exists
		// nowhere.
		d.log.Error("could not build the message's next attempt; handing it back", zap.String("task_id", j.msg.TaskID), telemetry.LogField(ctx), zap.Error(err))
		sleep(ctx, time.Second)
		return broker.Requeue
	}
	due := d.now().Add(min(max(wait, time.Millisecond), d.cfg.Model.Delay.Max))
	if err = d.publishLater(ctx, out, due); err == nil {
		return broker.Ack
	}
	return d.holdLater(ctx, j, out, due, err)
}

// laterMessage is the copy later publishes: back to the level it left (an
// empty level is the channel's first, codes'), with the attempt counted for
// a retry.
func (d *Dispatcher) laterMessage(j *job, isRetry bool) (broker.Outgoing, error) {
	m := *j.msg
	if isRetry {
		m.Attempt++
	}
	pub, err := envelope.Publishing(&m)
	if err != nil {
		return broker.Outgoing{}, err
	}
	if isRetry {
		pub.Headers[envelope.HeaderRetryOf] = int32(j.msg.Attempt + 1)
	}
	if r, ok := j.del.Headers[envelope.HeaderReplays]; ok {
		pub.Headers[envelope.HeaderReplays] = r
	}
	ct, err := d.cfg.Model.Channel(j.channel)
	if err != nil {
		return broker.Outgoing{}, err
	}
	return broker.Outgoing{Exchange: ct.Exchange, RoutingKey: ct.Level(topology.Level(m.Level)).RoutingKey, Msg: pub}, nil
}

// publishLater publishes out through the delay queues, to be delivered at
// due (at once when due has passed), and waits for the confirm.
func (d *Dispatcher) publishLater(ctx context.Context, out broker.Outgoing, due time.Time) error {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	// The copy carries this attempt's trace context: its own spans join the
	// request's trace after the delay queues. Headers are copied: a held
	// delivery publishes out again.
	out.Msg.Headers = maps.Clone(out.Msg.Headers)
	pctx, pspan := telemetry.StartPublish(pctx, out.Exchange, out.RoutingKey, &out.Msg)
	err := d.cfg.Delayed.PublishDelayed(pctx, out, max(due.Sub(d.now()), time.Millisecond))
	endCall(pspan, err)
	return err
}

// final records a final status and fires the callbacks, if any.
func (d *Dispatcher) final(ctx context.Context, j *job, u status.Update) {
	recs := d.recordJob(ctx, j, u)
	if d.cfg.Callbacks != nil && j.msg != nil && j.msg.CallbackURL != "" {
		for _, rec := range recs {
			d.cfg.Callbacks.Send(ctx, j.msg.CallbackURL, j.msg.Tenant, rec)
		}
	}
}

// recordJob updates the status records of a job (see taskIDs); a batch's
// go in one round trip. Like record, a failure is logged, never decides.
func (d *Dispatcher) recordJob(ctx context.Context, j *job, u status.Update) []status.Record {
	ids := j.taskIDs()
	if len(ids) == 1 {
		if rec := d.record(ctx, ids[0], u); rec != nil {
			return []status.Record{*rec}
		}
		return nil
	}
	return d.recordAll(ctx, j.msg.TaskID, ids, u)
}

// recordAll writes u to the status records ids of the batch taskID, in
// one round trip, and returns those it updated. The updates run as
// composites of the burst's Composer (issue 22): a WeCom batch's 1,000
// records cost Redis 1,000 EVALSHA as separate scripts, about 25 ms of its
// time, and about 8 composites as these (rdb.CompositeMax).
func (d *Dispatcher) recordAll(ctx context.Context, taskID string, ids []string, u status.Update) []status.Record {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	rec := d.burst.comp.Recorder()
	results := make([]func() (status.Record, error), 0, len(ids))
	var recs []status.Record
	var first error
	for _, id := range ids {
		res, err := d.cfg.Status.QueueUpdate(ctx, rec, id, u)
		if err != nil {
			first, results = err, nil
			break
		}
		results = append(results, res)
	}
	if len(results) > 0 {
		// Each update carries its own reply or error; a failure of the
		// round trip reaches every one of them.
		_ = d.burst.comp.Exec(ctx, d.cfg.Redis, rec)
	}
	for _, res := range results {
		r, err := res()
		switch {
		case err == nil:
			recs = append(recs, r)
		case first == nil && !errors.Is(err, status.ErrFinal):
			first = err
		}
	}
	if first != nil {
		d.log.Warn("could not update the status records of a batch", zap.String("task_id", taskID), telemetry.LogField(ctx), zap.String("status", string(u.Status)), zap.Error(first))
	}
	return recs
}

// record updates a status record. A status write never decides a
// message's fate: a failure is logged and the message goes on.
func (d *Dispatcher) record(ctx context.Context, taskID string, u status.Update) *status.Record {
	if taskID == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	rec, err := d.cfg.Status.Update(ctx, taskID, u)
	if err != nil && !errors.Is(err, status.ErrFinal) {
		d.log.Warn("could not update the status record", zap.String("task_id", taskID), telemetry.LogField(ctx), zap.String("status", string(u.Status)), zap.Error(err))
		return nil
	}
	return &rec
}

// pause waits until Redis answers again. It returns false when ctx ended
// first; the delivery then goes back to the queue untouched.
func (d *Dispatcher) pause(ctx context.Context, cause error) bool {
	d.cfg.Metrics.Paused.Set(1)
	defer d.cfg.Metrics.Paused.Set(0)
	d.log.Warn("Redis unavailable: pausing (nothing is sent or acked without the idempotency check)", zap.Error(cause))
	// A master that answers but cannot make a claim durable answers a
	// PING too: it is asked for what failed, a durable write.
	probe := func(ctx context.Context) error { return d.cfg.Redis.Ping(ctx).Err() }
	var nd *notDurableError
	if errors.As(cause, &nd) && d.cfg.Fence.Replicas() > 0 {
		probe = func(ctx context.Context) error { return d.cfg.Fence.Wait(ctx, nd.key) }
	}
	wait := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(wait):
		}
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := probe(pctx)
		cancel()
		if err == nil {
			d.log.Info("Redis is back: resuming")
			return true
		}
		wait = min(wait*2, 5*time.Second)
	}
}

func ptr[T any](v T) *T { return &v }
