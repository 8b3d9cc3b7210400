package loadgen

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/phone"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// APIOptions shape the API run.
type APIOptions struct {
	Rate        float64 // fixed (open-loop) rate; 0 with Max: half of the measured max
	Max         bool    // closed loop for Duration: max throughput
	Duration    time.Duration
	Concurrency int
	Rounds      int
	Endpoint    string // codes, send or mix
	Baseline    bool   // also the raw path, raw publish and raw consume+ack
	Target      string // drive this deployment instead of starting the api
	APIKey      string // for Target
	Window      int    // raw publish window
	RawMessages int    // raw consume+ack sample
}

// Endpoints the api mode drives.
const (
	EndpointCodes = "codes"
	EndpointSend  = "send"
	EndpointMix   = "mix"
)

// APIResult is the api mode's section of the report.
type APIResult struct {
	Target      string            `json:"target"`
	Endpoint    string            `json:"endpoint"`
	Concurrency int               `json:"concurrency"`
	DurationSec float64           `json:"durationSec"`
	Limits      string            `json:"limits"`
	Config      map[string]string `json:"config,omitempty"`
	HalfMax     bool              `json:"fixedAtHalfMax"`
	Window      int               `json:"rawPublishWindow,omitempty"`
	Rounds      []APIRound        `json:"rounds"`
	Median      APIMedian         `json:"median"`
}

// APIRound is one round's numbers.
type APIRound struct {
	Max      *DriveResult `json:"max,omitempty"`
	Fixed    *DriveResult `json:"fixed,omitempty"`
	Baseline *DriveResult `json:"baseline,omitempty"`
	// BaselineFixed is the raw path at the API's fixed rate: the floor the
	// p99 target is held against on this machine.
	BaselineFixed *DriveResult `json:"baselineFixed,omitempty"`
	RawPublish    float64      `json:"rawPublishPerSec,omitempty"`
	RawConsume    float64      `json:"rawConsumePerSec,omitempty"`
	APIMem        Mem          `json:"apiMem"`
	BaselineMem   Mem          `json:"baselineMem"`
	// MaxCPU and BaselineCPU are the CPU time of the api (the raw path
	// server), Redis, RabbitMQ and the load generator over the max phases,
	// per accepted request.
	MaxCPU      *CPU `json:"maxCpu,omitempty"`
	BaselineCPU *CPU `json:"baselineCpu,omitempty"`
}

// APIMedian holds the medians over rounds.
type APIMedian struct {
	MaxRPS               float64 `json:"maxAcceptedPerSec"`
	MaxLatency           Latency `json:"maxLatency"`
	FixedRate            float64 `json:"fixedRate"`
	FixedRPS             float64 `json:"fixedAcceptedPerSec"`
	FixedLatency         Latency `json:"fixedLatency"`
	BaselineRPS          float64 `json:"baselinePerSec"`
	BaselineLatency      Latency `json:"baselineLatency"`
	BaselineFixedRPS     float64 `json:"baselineFixedPerSec,omitempty"`
	BaselineFixedLatency Latency `json:"baselineFixedLatency"`
	RawPublish           float64 `json:"rawPublishPerSec"`
	RawConsume           float64 `json:"rawConsumePerSec"`
	Ratio                float64 `json:"apiOverBaseline"`
	APIRSSMB             float64 `json:"apiPeakRssMb"`
}

const benchKey = "loadgen-key-0123456789abcdefgh"

// raisedLimits are the API settings the load needs: recipients and client
// IPs are spread so per-recipient and per-IP limits never trigger, but one
// API key and one channel carry all the load, so those caps are raised
// (not disabled: the script still checks and records every dimension).
var raisedLimits = map[string]string{
	"LIMIT_PER_API_KEY_PER_MINUTE": "100000000",
	"LIMIT_EMAIL_PER_SECOND":       "1000000",
	"LIMIT_SMS_PER_SECOND":         "1000000",
	"LIMIT_WECOM_PER_SECOND":       "1000000", // the headline's WeCom batches count each recipient
}

func limitsNote(local bool) string {
	if !local {
		return "the target's own; recipients (unique per request) and clientIp (198.18.0.0/15) are spread so per-recipient and per-IP limits do not reject"
	}
	return "recipients unique per request and clientIp spread over 198.18.0.0/15, so per-recipient, resend and per-IP limits stay at their defaults; " +
		"raised through config: LIMIT_PER_API_KEY_PER_MINUTE=100000000, LIMIT_EMAIL_PER_SECOND=1000000, LIMIT_SMS_PER_SECOND=1000000, LIMIT_WECOM_PER_SECOND=1000000 (still checked)"
}

// requests builds request bodies with unique recipients and spread IPs.
type requests struct {
	run string
	seq atomic.Int64
}

func newRequests() *requests {
	usExchanges() // once, before any request is timed
	return &requests{run: randomID()}
}

// clientIP spreads n over 198.18.0.0/15 (the benchmarking range).
func clientIP(n int64) string {
	n %= 1 << 17
	return "198." + strconv.FormatInt(18+n>>16, 10) + "." + strconv.FormatInt((n>>8)&255, 10) + "." + strconv.FormatInt(n&255, 10)
}

// code is a verification-code request: email, or SMS when sms is set.
func (q *requests) code(sms bool) []byte {
	n := q.seq.Add(1)
	b := make([]byte, 0, 160)
	if sms {
		b = append(b, `{"channel":"sms","recipient":"`...)
		b = append(b, smsNumber(n)...)
		b = append(b, '"')
	} else {
		b = append(b, `{"channel":"email","recipient":"lg`...)
		b = append(b, q.run...)
		b = append(b, '-')
		b = strconv.AppendInt(b, n, 10)
		b = append(b, `@example.com"`...)
	}
	b = append(b, `,"purpose":"login","clientIp":"`...)
	b = append(b, clientIP(n)...)
	return append(b, `"}`...)
}

// usExchanges are 6-digit NANP prefixes (area code and exchange, NPA-NXX)
// that libphonenumber says the United States assigns: every area code
// with up to 48 exchanges each (a pair is checked whole: an exchange valid
// in one area code may not be in another), for smsNumber.
var usExchanges = sync.OnceValue(func() []string {
	var out []string
	for npa := 200; npa < 1000; npa++ {
		for nxx := 234; nxx < 1000; nxx += 16 {
			p := strconv.Itoa(npa) + strconv.Itoa(nxx)
			if n, err := phone.Parse("+1" + p + "4567"); err == nil && n.Region == "US" {
				out = append(out, p)
			}
		}
	}
	return out
})

// smsNumber is the n-th of distinct valid US numbers spread over
// exchanges (the fraud guard's prefixes): consecutive n change the
// exchange, then the line, so a load of never-verified codes gives each
// prefix one in some ten thousands, as real users would, and is judged by
// the guard at its defaults without being pumping.
func smsNumber(n int64) string {
	ps := usExchanges()
	k := int64(len(ps))
	return "+1" + ps[n%k] + fmt.Sprintf("%04d", (n/k)%10_000)
}

func (q *requests) send() []byte {
	n := q.seq.Add(1)
	return []byte(`{"messageType":"EMAIL","templateCode":"notice","recipient":"lg` + q.run + "-" + strconv.FormatInt(n, 10) +
		`@example.com","variables":{"title":"Maintenance","content":"Tonight 22:00-23:00"}}`)
}

// client is a keep-alive HTTP client with at most conns connections.
type client struct {
	hc   *http.Client
	base string
	key  string
}

func newClient(base, key string, conns int) *client {
	tr := &http.Transport{MaxConnsPerHost: conns, MaxIdleConnsPerHost: conns, MaxIdleConns: conns, DisableCompression: true, IdleConnTimeout: time.Minute}
	return &client{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}, base: strings.TrimRight(base, "/"), key: key}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// post sends body and returns the status, and the response body when keep.
func (c *client) post(ctx context.Context, path string, body []byte, keep bool) (int, []byte, error) {
	st, _, b, err := c.postH(ctx, path, body, keep)
	return st, b, err
}

// postH is post that also returns the answer's header.
func (c *client) postH(ctx context.Context, path string, body []byte, keep bool) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("X-API-Key", c.key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if keep {
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header, nil, err
}

func (c *client) doer(q *requests, endpoint string) DoFunc {
	return func(ctx context.Context, _ int, seq int64) (int, error) {
		path, body := "/api/verification-codes", []byte(nil)
		switch {
		case endpoint == EndpointSend || (endpoint == EndpointMix && seq%2 == 1):
			path, body = "/api/messages/send", q.send()
		default:
			body = q.code(false)
		}
		st, _, err := c.post(ctx, path, body, false)
		return st, err
	}
}

// API measures the API: max throughput (closed loop), latency at a fixed
// rate (open loop; half of the max when no rate is given), and with
// Baseline the raw path and the raw broker limits, round by round.
func API(ctx context.Context, o *Options, a APIOptions) (*APIResult, error) {
	res := &APIResult{Endpoint: a.Endpoint, Concurrency: a.Concurrency, DurationSec: a.Duration.Seconds(), Limits: limitsNote(a.Target == "")}
	if !a.Max && a.Rate <= 0 {
		a.Max = true
		res.HalfMax = true
	}
	if a.Max && a.Rate <= 0 {
		res.HalfMax = true
	}
	q := newRequests()
	var (
		api, base *client
		proc      *Proc
		baseProc  *Proc
		conn      *amqp.Connection
		queues    []string
		pprofAddr string
	)
	if a.Target != "" {
		res.Target = a.Target
		api = newClient(a.Target, a.APIKey, a.Concurrency)
	} else {
		env, err := NewEnv(ctx, *o, "api")
		if err != nil {
			return nil, err
		}
		defer env.Close()
		if err := declare(ctx, env, benchTopology()); err != nil {
			return nil, err
		}
		bins, err := o.Binaries(ctx)
		if err != nil {
			return nil, err
		}
		addr, err := freeAddr()
		if err != nil {
			return nil, err
		}
		cfg := apiEnv(env, addr)
		res.Config = publicConfig(cfg, o.ExtraEnv)
		if pprofAddr = o.profiler().addr(); pprofAddr != "" {
			cfg["PPROF_ADDR"] = pprofAddr
		}
		res.Target = "the api binary"
		proc, err = Start("api", filepath.Join(bins.Dir, "api"), nil, append(envList(cfg), o.ExtraEnv...), bins.LogDir)
		if err != nil {
			return nil, err
		}
		defer func() { _ = proc.Stop(20 * time.Second) }()
		if err := waitHTTP(ctx, "http://"+addr+"/readyz", proc); err != nil {
			return nil, err
		}
		api = newClient("http://"+addr, benchKey, a.Concurrency)
		if conn, err = broker.Dial(ctx, broker.Config{URL: env.AMQPURL}); err != nil {
			return nil, err
		}
		defer func() { _ = conn.Close() }()
		queues = mainQueues()
		if a.Baseline {
			self, err := loadgenBinary(o.Self, bins.Dir)
			if err != nil {
				return nil, err
			}
			bp, baddr, err := startBaseline(ctx, self, env, bins.LogDir)
			if err != nil {
				return nil, err
			}
			defer func() { _ = bp.Stop(10 * time.Second) }()
			base = newClient(baddr, "", a.Concurrency)
			defer base.close()
			baseProc = bp
		}
	}
	defer api.close()
	if a.Baseline && a.Target != "" {
		o.progress("api: --baseline needs the local broker and Redis; skipped with --target")
		a.Baseline = false
	}
	clean := func() error {
		if conn == nil {
			return nil
		}
		_, err := purge(conn, queues...)
		return err
	}
	apiDo := api.doer(q, a.Endpoint)
	// Warm-up: connections, caches and the scheduler, discarded.
	warm := Drive{Concurrency: a.Concurrency, Duration: time.Second}
	if w := warm.Run(ctx, apiDo); w.Accepted == 0 {
		return nil, fmt.Errorf("api warm-up: nothing accepted (%s) %s", codesString(w.Codes), w.FirstError)
	}
	var baseDo DoFunc
	if a.Baseline && base != nil {
		baseDo = func(ctx context.Context, _ int, _ int64) (int, error) {
			st, _, err := base.post(ctx, "/raw", q.code(false), false)
			return st, err
		}
		warm.Run(ctx, baseDo)
	}
	if err := clean(); err != nil {
		return nil, err
	}
	for r := 1; r <= a.Rounds; r++ {
		var rd APIRound
		rate := a.Rate
		if a.Max {
			var (
				sampler *RSSSampler
				meter   *measured
			)
			if proc != nil {
				meter = o.measure(ctx, map[string]int{RoleAPI: proc.Pid()}, "api max")
				sampler = SampleRSS(ctx, proc.Pid())
			}
			profiled := o.profiler().fetch(ctx, pprofAddr, "api-max", a.Duration-time.Second, o.progress)
			m := Drive{Concurrency: a.Concurrency, Duration: a.Duration}.Run(ctx, apiDo)
			rd.MaxCPU = meter.stop(int(m.Accepted))
			profiled()
			if sampler != nil {
				rd.APIMem = sampler.Stop()
			}
			rd.Max = &m
			o.progress("api round %d: max %.0f req/s accepted at %d connections, p99 %.2f ms, codes %s, rss %.0f MB",
				r, m.AcceptedRPS, a.Concurrency, m.Latency.P99, codesString(m.Codes), rd.APIMem.Peak())
			if m.Accepted == 0 {
				return nil, fmt.Errorf("api: nothing accepted in the max phase (%s) %s", codesString(m.Codes), m.FirstError)
			}
			if err := clean(); err != nil {
				return nil, err
			}
			if rate <= 0 {
				rate = m.AcceptedRPS / 2
			}
		}
		if rate > 0 {
			f := Drive{Concurrency: a.Concurrency, Duration: a.Duration, Rate: rate}.Run(ctx, apiDo)
			rd.Fixed = &f
			o.progress("api round %d: fixed %.0f req/s: p50 %.2f p90 %.2f p99 %.2f max %.2f ms, codes %s",
				r, rate, f.Latency.P50, f.Latency.P90, f.Latency.P99, f.Latency.Max, codesString(f.Codes))
			if err := clean(); err != nil {
				return nil, err
			}
		}
		if baseDo != nil {
			meter := o.measure(ctx, map[string]int{RoleRawPath: baseProc.Pid()}, "raw path max")
			sampler := SampleRSS(ctx, baseProc.Pid())
			b := Drive{Concurrency: a.Concurrency, Duration: a.Duration}.Run(ctx, baseDo)
			rd.BaselineCPU = meter.stop(int(b.Accepted))
			rd.BaselineMem = sampler.Stop()
			rd.Baseline = &b
			if err := clean(); err != nil {
				return nil, err
			}
			if rate > 0 {
				bf := Drive{Concurrency: a.Concurrency, Duration: a.Duration, Rate: rate}.Run(ctx, baseDo)
				rd.BaselineFixed = &bf
				o.progress("api round %d: raw path fixed %.0f req/s: p50 %.2f p90 %.2f p99 %.2f max %.2f ms",
					r, rate, bf.Latency.P50, bf.Latency.P90, bf.Latency.P99, bf.Latency.Max)
				if err := clean(); err != nil {
					return nil, err
				}
			}
			var err error
			if rd.RawPublish, rd.RawConsume, err = rawBroker(ctx, conn, a.Window, a.RawMessages); err != nil {
				return nil, err
			}
			o.progress("api round %d: raw path %.0f req/s (p99 %.2f ms); raw confirmed publish %.0f msg/s (window %d); raw consume+ack %.0f msg/s",
				r, b.AcceptedRPS, b.Latency.P99, rd.RawPublish, a.Window, rd.RawConsume)
		}
		res.Rounds = append(res.Rounds, rd)
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	res.Window = a.Window
	res.Median = apiMedian(res.Rounds)
	return res, nil
}

// apiMedian takes the medians over rounds.
func apiMedian(rounds []APIRound) APIMedian {
	var m APIMedian
	var maxR, fixR, fixRate, baseR, baseFixR, pub, cons, rss []float64
	var maxL, fixL, baseL, baseFixL []Latency
	for _, r := range rounds {
		if r.Max != nil {
			maxR = append(maxR, r.Max.AcceptedRPS)
			maxL = append(maxL, r.Max.Latency)
			rss = append(rss, r.APIMem.Peak())
		}
		if r.Fixed != nil {
			fixR = append(fixR, r.Fixed.AcceptedRPS)
			fixRate = append(fixRate, r.Fixed.TargetRate)
			fixL = append(fixL, r.Fixed.Latency)
		}
		if r.Baseline != nil {
			baseR = append(baseR, r.Baseline.AcceptedRPS)
			baseL = append(baseL, r.Baseline.Latency)
		}
		if r.BaselineFixed != nil {
			baseFixR = append(baseFixR, r.BaselineFixed.AcceptedRPS)
			baseFixL = append(baseFixL, r.BaselineFixed.Latency)
		}
		if r.RawPublish > 0 {
			pub = append(pub, r.RawPublish)
			cons = append(cons, r.RawConsume)
		}
	}
	m.MaxRPS, m.FixedRPS, m.FixedRate, m.BaselineRPS = round2(median(maxR)), round2(median(fixR)), round2(median(fixRate)), round2(median(baseR))
	m.RawPublish, m.RawConsume, m.APIRSSMB = round2(median(pub)), round2(median(cons)), round2(median(rss))
	if len(maxL) > 0 {
		m.MaxLatency = medianLatency(maxL)
	}
	if len(fixL) > 0 {
		m.FixedLatency = medianLatency(fixL)
	}
	if len(baseL) > 0 {
		m.BaselineLatency = medianLatency(baseL)
	}
	if len(baseFixL) > 0 {
		m.BaselineFixedRPS, m.BaselineFixedLatency = round2(median(baseFixR)), medianLatency(baseFixL)
	}
	// The ratio of the medians, so the table's three numbers agree.
	if m.BaselineRPS > 0 && m.MaxRPS > 0 {
		m.Ratio = round2(m.MaxRPS / m.BaselineRPS)
	}
	return m
}

// rawBroker measures confirmed publishing with a pipelined window and
// consume+ack with a prefetch of the same size, on messages the size of a
// real verification-code envelope.
func rawBroker(ctx context.Context, conn *amqp.Connection, window, n int) (pub, cons float64, err error) {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return 0, 0, err
	}
	ct, err := m.Channel(topology.Mail)
	if err != nil {
		return 0, 0, err
	}
	body, err := sampleBody(topology.Mail)
	if err != nil {
		return 0, 0, err
	}
	msg := func(int) amqp.Publishing {
		return amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}
	}
	if pub, err = publishN(ctx, conn, window, ct.Exchange, ct.RoutingKey, n, msg); err != nil {
		return 0, 0, fmt.Errorf("raw publish: %w", err)
	}
	if cons, err = consumeN(ctx, conn, ct.Queue, window, n); err != nil {
		return 0, 0, fmt.Errorf("raw consume: %w", err)
	}
	_, err = purge(conn, ct.Queue)
	return round2(pub), round2(cons), err
}

// sampleBody is an encoded notice of the usual size.
func sampleBody(channel string) ([]byte, error) {
	p, err := envelope.Publishing(sampleMessage(channel, 0))
	if err != nil {
		return nil, err
	}
	return p.Body, nil
}

func sampleMessage(channel string, i int) *envelope.Message {
	rcpt := fmt.Sprintf("user%d@example.com", i)
	switch channel {
	case topology.SMS:
		rcpt = fmt.Sprintf("+86139%08d", i)
	case topology.WeCom:
		rcpt = fmt.Sprintf("user%d", i)
	}
	return &envelope.Message{Version: envelope.SchemaVersion, TaskID: fmt.Sprintf("lg-%s-%d", randomID(), i), Kind: envelope.Notification,
		Channel: channel, Recipient: rcpt, Template: "notice", Variables: map[string]string{"title": "Maintenance", "content": "Tonight 22:00-23:00"}, CreatedAt: time.Now()}
}

func mainQueues() []string {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return nil
	}
	var qs []string
	for _, ch := range topology.Channels {
		if ct, err := m.Channel(ch); err == nil {
			for _, lt := range ct.Levels { // codes to the codes' queue, notices to their level's
				qs = append(qs, lt.Queue)
			}
		}
	}
	return qs
}

// apiEnv is the api's configuration for a run in env.
func apiEnv(env *Env, addr string) map[string]string {
	cfg := map[string]string{
		"AMQP_URL": env.AMQPURL, "REDIS_URL": env.RedisURL, "REDIS_MODE": env.RedisMode, "REDIS_PREFIX": env.Prefix, "RABBITMQ_MANAGEMENT_URL": env.ManagementURL,
		"HTTP_ADDR": addr, "API_KEYS": "bench:" + benchKey, "LOG_FORMAT": "json",
		"MAIL_QUEUE_TTL": "0s", "MAIL_QUEUE_MAX_LENGTH": "0", "SMS_QUEUE_TTL": "0s", "SMS_QUEUE_MAX_LENGTH": "0",
	}
	for k, v := range raisedLimits {
		cfg[k] = v
	}
	return cfg
}

func envList(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}

// publicConfig is the configuration worth reporting: not URLs of the
// throwaway vhost, not secrets.
func publicConfig(m map[string]string, extra []string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		switch k {
		case "AMQP_URL", "REDIS_URL", "REDIS_MODE", "REDIS_PREFIX", "RABBITMQ_MANAGEMENT_URL", "HTTP_ADDR", "API_KEYS", "SMTP_HOST", "SMTP_PORT",
			"SMS_WEBHOOK_URL", "SMS_WEBHOOK_SECRET", "METRICS_ADDR", "CONSUMER_ID", "PPROF_ADDR":
			continue
		}
		out[k] = v
	}
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok {
			out[k] = v
		}
	}
	return out
}
