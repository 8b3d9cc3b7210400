package loadgen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// ErrLost is returned (wrapped) when an e2e run lost messages.
var ErrLost = errors.New("messages were lost")

// E2EOptions shape the end-to-end run.
type E2EOptions struct {
	Rate                float64       // verification codes per second
	Duration            time.Duration // per round
	Concurrency         int           // HTTP connections
	SMSShare            float64       // fraction of codes sent by SMS (0..1)
	ConsumerConcurrency int
	Rounds              int
	Drain               time.Duration // longest wait for the tail after the load stops
}

// E2EResult is the e2e mode's section of the report.
type E2EResult struct {
	Rate        float64           `json:"rate"`
	DurationSec float64           `json:"durationSec"`
	Concurrency int               `json:"concurrency"`
	SMSShare    float64           `json:"smsShare"`
	Limits      string            `json:"limits"`
	Config      map[string]string `json:"config"`
	Rounds      []E2ERound        `json:"rounds"`
	Median      E2EMedian         `json:"median"`
}

// E2ERound is one round: counts, and API accept → received latency.
type E2ERound struct {
	Accept       DriveResult `json:"accept"` // the API requests themselves
	Accepted     int         `json:"accepted"`
	Received     int         `json:"received"` // distinct accepted task ids the sinks got
	Duplicates   int64       `json:"duplicates"`
	DeadLettered int         `json:"deadLettered"`
	DeadMaxlen   int         `json:"deadLetteredMaxlen"` // of DeadLettered: dropped by a full queue (drop-head)
	// Refused is the 503s (admission or a full queue: nothing accepted),
	// and NoRetryAfter those of them without a Retry-After header.
	Refused       int     `json:"unavailable503"`
	NoRetryAfter  int     `json:"unavailable503WithoutRetryAfter"`
	Expired       int     `json:"expired"`
	Lost          int     `json:"lost"`
	Unmatched     int     `json:"unmatched"`         // received, but not among the accepted (a 202 the client never saw)
	Early         int     `json:"receivedBefore202"` // reached the sink before the client had read its 202 (latency 0)
	BadSignatures int64   `json:"badSignatures"`
	All           Latency `json:"latency"`
	Mail          Latency `json:"mailLatency"`
	SMS           Latency `json:"smsLatency"`
	DrainSec      float64 `json:"drainSec"`
	APIMem        Mem     `json:"apiMem"`
	ConsumerMem   Mem     `json:"consumerMem"`
}

// E2EMedian holds the medians over rounds.
type E2EMedian struct {
	All        Latency `json:"latency"`
	Mail       Latency `json:"mailLatency"`
	SMS        Latency `json:"smsLatency"`
	Accept     Latency `json:"acceptLatency"`
	AcceptedPS float64 `json:"acceptedPerSec"`
}

// TotalAccepted sums accepted over rounds.
func (e *E2EResult) TotalAccepted() int {
	n := 0
	for _, r := range e.Rounds {
		n += r.Accepted
	}
	return n
}

type accepted struct {
	id  string
	at  time.Time
	sms bool
}

// E2E runs the real api and consumer against built-in SMTP and SMS
// webhook sinks, sends verification codes at a fixed rate, and follows
// every accepted one to the sink, the dead-letter queue, or nowhere (lost).
func E2E(ctx context.Context, o *Options, e E2EOptions) (*E2EResult, error) {
	res := &E2EResult{Rate: e.Rate, DurationSec: e.Duration.Seconds(), Concurrency: e.Concurrency, SMSShare: e.SMSShare, Limits: limitsNote(true)}
	sys, err := startSystem(ctx, o, "e2e", e.ConsumerConcurrency, nil)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	res.Config = sys.config
	arr, hook, conn, api, cons, apiPprof, consPprof := sys.arr, sys.hook, sys.conn, sys.api, sys.cons, sys.apiPprof, sys.consPprof
	mailQ, smsQ := queueIn(sys.m, topology.Mail), queueIn(sys.m, topology.SMS)
	cl := newClient("http://"+sys.addr, benchKey, e.Concurrency)
	defer cl.close()
	q := newRequests()
	var failures []string
	for r := 1; r <= e.Rounds; r++ {
		profiled := []func(){
			o.profiler().fetch(ctx, apiPprof, "e2e-api", e.Duration-time.Second, o.progress),
			o.profiler().fetch(ctx, consPprof, "e2e-consumer", e.Duration-time.Second, o.progress),
		}
		rd, err := e2eRound(ctx, e, cl, q, arr, conn, []string{mailQ.DeadLetterQueue, smsQ.DeadLetterQueue}, api, cons)
		for _, wait := range profiled {
			wait()
		}
		if err != nil {
			return nil, fmt.Errorf("e2e round %d: %w", r, err)
		}
		rd.BadSignatures = hook.BadSignatures()
		res.Rounds = append(res.Rounds, rd)
		o.progress("e2e round %d: %d accepted at %.0f/s (api p99 %.2f ms), %d refused 503 (%d without Retry-After), received %d, dead %d (maxlen %d), expired %d, lost %d, dups %d; accept→received p50 %.2f p99 %.2f max %.2f ms (mail p99 %.2f, sms p99 %.2f); rss api %.0f MB consumer %.0f MB",
			r, rd.Accepted, rd.Accept.AcceptedRPS, rd.Accept.Latency.P99, rd.Refused, rd.NoRetryAfter, rd.Received, rd.DeadLettered, rd.DeadMaxlen, rd.Expired, rd.Lost, rd.Duplicates,
			rd.All.P50, rd.All.P99, rd.All.Max, rd.Mail.P99, rd.SMS.P99, rd.APIMem.Peak(), rd.ConsumerMem.Peak())
		if rd.Lost > 0 {
			failures = append(failures, fmt.Sprintf("round %d lost %d of %d", r, rd.Lost, rd.Accepted))
		}
	}
	var all, mail, sms, acc []Latency
	var aps []float64
	for _, rd := range res.Rounds {
		all, mail, sms, acc = append(all, rd.All), append(mail, rd.Mail), append(sms, rd.SMS), append(acc, rd.Accept.Latency)
		aps = append(aps, rd.Accept.AcceptedRPS)
	}
	res.Median = E2EMedian{All: medianLatency(all), Mail: medianLatency(mail), SMS: medianLatency(sms), Accept: medianLatency(acc), AcceptedPS: round2(median(aps))}
	if len(failures) > 0 {
		return res, fmt.Errorf("%w: %v", ErrLost, failures)
	}
	return res, nil
}

// system is a running api and consumer in a throwaway vhost with the
// production topology, and the sinks they deliver to.
type system struct {
	m                   *topology.Model
	conn                *amqp.Connection
	arr                 *Arrivals
	smtp                *SMTPSink
	hook                *WebhookSink
	api, cons           *Proc
	addr                string            // the api's
	config              map[string]string // what the report shows of both
	apiPprof, consPprof string
	closers             []func()
}

// Close stops everything, in the reverse order of starting.
func (s *system) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
}

// startSystem starts the api and a consumer of consumerConcurrency
// (extra overrides its environment) and waits until both serve.
func startSystem(ctx context.Context, o *Options, name string, consumerConcurrency int, extra map[string]string) (_ *system, err error) {
	s := &system{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	env, err := NewEnv(ctx, *o, name)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, env.Close)
	model := topology.DefaultConfig() // production queues: TTL, max length, dead-lettering
	if err := declare(ctx, env, model); err != nil {
		return nil, err
	}
	if s.m, err = topology.Build(model, ""); err != nil {
		return nil, err
	}
	if s.conn, err = broker.Dial(ctx, broker.Config{URL: env.AMQPURL}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = s.conn.Close() })
	bins, err := o.Binaries(ctx)
	if err != nil {
		return nil, err
	}
	s.arr = NewArrivals()
	if s.smtp, err = NewSMTPSink(s.arr); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.smtp.Close)
	if s.hook, err = NewWebhookSink(s.arr, 0); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, s.hook.Close)
	if s.addr, err = freeAddr(); err != nil {
		return nil, err
	}
	acfg := apiEnv(env, s.addr)
	for _, k := range []string{"MAIL_QUEUE_TTL", "MAIL_QUEUE_MAX_LENGTH", "SMS_QUEUE_TTL", "SMS_QUEUE_MAX_LENGTH"} {
		delete(acfg, k) // production defaults, as declared
	}
	host, port, _ := net.SplitHostPort(s.smtp.Addr())
	ccfg := map[string]string{
		"AMQP_URL": env.AMQPURL, "REDIS_URL": env.RedisURL, "REDIS_MODE": env.RedisMode, "REDIS_PREFIX": env.Prefix, "RABBITMQ_MANAGEMENT_URL": env.ManagementURL,
		"CHANNELS": "mail,sms", "CONCURRENCY": strconv.Itoa(consumerConcurrency), "METRICS_ADDR": "off", "LOG_FORMAT": "json",
		"SMTP_HOST": host, "SMTP_PORT": port, "SMTP_TLS": "none", "SMTP_POOL_SIZE": strconv.Itoa(min(consumerConcurrency, 1000)),
		"SMS_PROVIDER": "webhook", "SMS_WEBHOOK_URL": s.hook.URL(), "SMS_WEBHOOK_SECRET": s.hook.Secret,
	}
	for k, v := range extra {
		ccfg[k] = v
	}
	s.config = map[string]string{}
	for k, v := range publicConfig(acfg, o.ExtraEnv) {
		s.config["api "+k] = v
	}
	for k, v := range publicConfig(ccfg, o.ExtraEnv) {
		s.config["consumer "+k] = v
	}
	s.apiPprof, s.consPprof = o.profiler().addr(), o.profiler().addr()
	if s.apiPprof != "" {
		acfg["PPROF_ADDR"], ccfg["PPROF_ADDR"] = s.apiPprof, s.consPprof
	}
	if s.api, err = Start("api", filepath.Join(bins.Dir, "api"), nil, append(envList(acfg), o.ExtraEnv...), bins.LogDir); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = s.api.Stop(20 * time.Second) })
	if s.cons, err = Start("consumer", filepath.Join(bins.Dir, "consumer"), nil, append(envList(ccfg), o.ExtraEnv...), bins.LogDir); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { _ = s.cons.Stop(40 * time.Second) })
	if err := waitHTTP(ctx, "http://"+s.addr+"/readyz", s.api); err != nil {
		return nil, err
	}
	for _, ch := range []string{topology.Mail, topology.SMS} { // CHANNELS
		for _, lt := range queueIn(s.m, ch).Levels {
			if err := waitConsumers(ctx, s.conn, lt.Queue, s.cons, 30*time.Second); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

func queueIn(m *topology.Model, channel string) topology.ChannelTopology {
	ct, _ := m.Channel(channel)
	return ct
}

func e2eRound(ctx context.Context, e E2EOptions, cl *client, q *requests, arr *Arrivals, conn *amqp.Connection, dlqs []string, api, cons *Proc) (E2ERound, error) {
	var rd E2ERound
	_, _, _ = arr.Take()
	accs := make([][]accepted, max(e.Concurrency, 1))
	refused, noRetry := make([]int, len(accs)), make([]int, len(accs))
	smsEvery := 0
	if e.SMSShare > 0 {
		smsEvery = max(int(1/e.SMSShare+0.5), 1)
	}
	do := func(ctx context.Context, w int, seq int64) (int, error) {
		sms := smsEvery > 0 && seq%int64(smsEvery) == 0
		st, hdr, body, err := cl.postH(ctx, "/api/verification-codes", q.code(sms), true)
		switch st {
		case 202:
			if id := taskIDOf(body); id != "" {
				accs[w] = append(accs[w], accepted{id: id, at: time.Now(), sms: sms})
			}
		case 503:
			refused[w]++
			if hdr.Get("Retry-After") == "" {
				noRetry[w]++
			}
		}
		return st, err
	}
	apiRSS, consRSS := SampleRSS(ctx, api.Pid()), SampleRSS(ctx, cons.Pid())
	rd.Accept = Drive{Concurrency: e.Concurrency, Duration: e.Duration, Rate: e.Rate}.Run(ctx, do)
	for w, a := range accs {
		rd.Accepted += len(a)
		rd.Refused += refused[w]
		rd.NoRetryAfter += noRetry[w]
	}
	// The tail: every accepted message is either at a sink or dead-lettered.
	drainStart := time.Now()
	deadline := drainStart.Add(e.Drain)
	for {
		dead := 0
		for _, d := range dlqs {
			n, _, err := depth(conn, d)
			if err != nil {
				return rd, err
			}
			dead += n
		}
		if arr.Count()+dead >= rd.Accepted || time.Now().After(deadline) {
			break
		}
		for _, p := range []*Proc{api, cons} {
			if exited, _ := p.Exited(); exited {
				return rd, p.exitError()
			}
		}
		if !pace(ctx, 20*time.Millisecond) {
			return rd, ctx.Err()
		}
	}
	rd.DrainSec = round2(time.Since(drainStart).Seconds())
	rd.APIMem, rd.ConsumerMem = apiRSS.Stop(), consRSS.Stop()
	got, dups, _ := arr.Take()
	rd.Duplicates = dups
	deadIDs, err := drainDLQ(conn, dlqs)
	if err != nil {
		return rd, err
	}
	all, mail, sms := NewHist(), NewHist(), NewHist()
	seen := map[string]bool{}
	for _, as := range accs {
		for _, a := range as {
			seen[a.id] = true
			if at, ok := got[a.id]; ok {
				rd.Received++
				lat := at.Sub(a.at)
				if lat < 0 { // the message beat the 202 back to the client
					rd.Early++
					lat = 0
				}
				all.Record(lat)
				if a.sms {
					sms.Record(lat)
				} else {
					mail.Record(lat)
				}
				continue
			}
			switch deadIDs[a.id] {
			case "":
				rd.Lost++
			case "expired":
				rd.Expired++
			case "maxlen":
				rd.DeadMaxlen++
				rd.DeadLettered++
			default:
				rd.DeadLettered++
			}
		}
	}
	for id := range got {
		if !seen[id] {
			rd.Unmatched++
		}
	}
	rd.All, rd.Mail, rd.SMS = all.Summary(), mail.Summary(), sms.Summary()
	return rd, nil
}

// taskIDOf finds data.taskId in a 202 answer.
func taskIDOf(body []byte) string {
	var r struct {
		Data struct {
			TaskID string `json:"taskId"`
		} `json:"data"`
	}
	if !bytes.Contains(body, []byte(`"taskId"`)) || json.Unmarshal(body, &r) != nil {
		return ""
	}
	return r.Data.TaskID
}

// drainDLQ takes every dead letter (the vhost is the run's own) and returns
// task id → why: "expired" for the broker's TTL, else the x-first-death
// reason (rejected by the consumer, maxlen).
func drainDLQ(conn *amqp.Connection, dlqs []string) (map[string]string, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer func() { _ = ch.Close() }()
	out := map[string]string{}
	for _, q := range dlqs {
		for {
			d, ok, err := ch.Get(q, true)
			if err != nil {
				return out, fmt.Errorf("read %s: %w", q, err)
			}
			if !ok {
				break
			}
			reason, _ := d.Headers["x-first-death-reason"].(string)
			if reason == "" {
				reason = "dead"
			}
			out[d.MessageId] = reason
		}
	}
	return out, nil
}
