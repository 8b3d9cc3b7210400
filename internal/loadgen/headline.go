package loadgen

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/msgpulse/msgpulse/internal/envelope"
	"github.com/msgpulse/msgpulse/internal/topology"
)

// Seed 004's headline: ten thousand messages a second with p99 under
// 100 ms. The headline mode finds, by stepping the offered load, the
// highest rate whose every message went from the API's 202 to the sink
// with p99 under --p99 for a whole step (--step, 60 s by default), and
// none lost: for single mail sends (POST /api/messages/send, one
// recipient each, through the SMTP sink) and for WeCom batches of --batch
// recipients (POST /api/messages/batch through the WeCom test server),
// both counted in recipients per second; and, as their baseline, the raw
// broker path's rate at the same p99 (rawPath).

// HeadlineOptions shape the headline run.
type HeadlineOptions struct {
	Start               float64       // first offered rate, recipients/s
	Factor              float64       // each next step offers this much more
	Max                 float64       // highest rate tried
	Step                time.Duration // how long each rate is held
	P99                 time.Duration // the latency a step must hold
	Concurrency         int           // HTTP connections
	ConsumerConcurrency int
	Batch               int           // WeCom recipients per batch
	RawStart            float64       // first offered rate of the raw kind, messages/s
	Drain               time.Duration // longest wait for a step's tail
	Kinds               []string      // "mail", "wecom", "raw"
	Refine              int           // steps between the best rate that held and the lowest that did not
	// Targets are the first offered rate of a kind (mail, wecom): its
	// target, so that the very rate the issue asks for is one of the steps.
	// A kind without one starts at Start.
	Targets map[string]float64
}

// HeadlineStep is one offered rate held for one step.
type HeadlineStep struct {
	Offered  float64 `json:"offeredRecipientsPerSec"`
	Accepted int     `json:"acceptedRecipients"`
	Received int     `json:"receivedRecipients"`
	Lost     int     `json:"lostRecipients"`
	Rate     float64 `json:"acceptedRecipientsPerSec"`
	Latency  Latency `json:"latency"` // API 202 → sink, per recipient
	Held     bool    `json:"held"`
	Why      string  `json:"why,omitempty"` // why it did not hold
}

// HeadlineKind is one kind's steps and the best rate that held.
type HeadlineKind struct {
	Kind  string         `json:"kind"`
	Steps []HeadlineStep `json:"steps"`
	// Best is the highest offered rate that held, what seed 004 and the
	// issue ask for; a step holds only when the API took at least
	// headlineAcceptFloor of it (each step's accepted rate is beside it).
	Best float64 `json:"bestRecipientsPerSec"` // 0: not even the first step held
}

// headlineAcceptFloor is the share of a step's offered recipients the API
// must accept, over the step, for the step to hold: the best held is an
// offered rate, so the load must really have been taken, not only offered.
const headlineAcceptFloor = 0.99

// HeadlineResult is the headline mode's section of the report.
type HeadlineResult struct {
	P99Ms   float64           `json:"p99Ms"`
	StepSec float64           `json:"stepSec"`
	Batch   int               `json:"batch"`
	Config  map[string]string `json:"config"`
	Kinds   []HeadlineKind    `json:"kinds"`
}

// Headline runs the real api and consumer (mail and WeCom) and steps the
// offered load of each kind until a step does not hold; the kind "raw"
// steps the broker path alone (rawPath) from RawStart, the baseline the
// other kinds are read against.
func Headline(ctx context.Context, o *Options, h HeadlineOptions) (*HeadlineResult, error) {
	res := &HeadlineResult{P99Ms: float64(h.P99) / float64(time.Millisecond), StepSec: h.Step.Seconds(), Batch: h.Batch}
	wecomArr := NewArrivals()
	sink, err := NewWeComSink(wecomArr, WeComLatency)
	if err != nil {
		return nil, err
	}
	defer sink.Close()
	extra := map[string]string{
		"CHANNELS":       "mail,sms,wecom",
		"WECOM_API_BASE": sink.URL(), "WECOM_CORP_ID": "loadgen", "WECOM_CORP_SECRET": "loadgen-secret", "WECOM_AGENT_ID": "1000002",
	}
	sys, err := startSystem(ctx, o, "headline", h.ConsumerConcurrency, extra)
	if err != nil {
		return nil, err
	}
	defer sys.Close()
	res.Config = sys.config
	cl := newClient("http://"+sys.addr, benchKey, h.Concurrency)
	defer cl.close()
	run := randomID()
	alive := func() error {
		for _, p := range []*Proc{sys.api, sys.cons} {
			if exited, _ := p.Exited(); exited {
				return p.exitError()
			}
		}
		return nil
	}
	for _, kind := range h.Kinds {
		k := HeadlineKind{Kind: kind}
		arr, per, start := sys.arr, 1, h.Start
		var send offer
		switch kind {
		case "raw":
			raw, err := newRawPath(ctx, sys.conn, run)
			if err != nil {
				return res, fmt.Errorf("headline raw: %w", err)
			}
			defer raw.close()
			arr, send, start = raw.arr, raw.offer, h.RawStart
		case "wecom":
			arr, per = wecomArr, h.Batch
			send = apiOffer(cl, kind, run, per)
		default:
			send = apiOffer(cl, kind, run, per)
		}
		if t, ok := h.Targets[kind]; ok && kind != "raw" {
			start = t
		}
		err := searchRates(ctx, start, h.Factor, h.Max, h.Refine, func(rate float64) (bool, error) {
			// --profile: the api, the consumer and this process (the
			// sinks, the offered load) during each kind's first step.
			name := "headline-" + kind
			var profiled []func()
			if kind != "raw" { // the raw path does not go through them
				profiled = append(profiled,
					o.profiler().fetch(ctx, sys.apiPprof, name+"-api", h.Step-time.Second, o.progress),
					o.profiler().fetch(ctx, sys.consPprof, name+"-consumer", h.Step-time.Second, o.progress))
			}
			stopSelf := o.profiler().self(name+"-loadgen", o.progress)
			st, err := headlineStep(ctx, h, arr, rate, per, send, alive)
			stopSelf()
			for _, wait := range profiled {
				wait()
			}
			if err != nil {
				return false, fmt.Errorf("headline %s at %.0f/s: %w", kind, rate, err)
			}
			k.add(st)
			o.progress("headline %s: offered %.0f recipients/s, accepted %.0f/s, p99 %.2f ms, lost %d: %s", kind, rate, st.Rate, st.Latency.P99, st.Lost, map[bool]string{true: "held", false: "did not hold (" + st.Why + ")"}[st.Held])
			return st.Held, nil
		})
		res.Kinds = append(res.Kinds, k)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// searchRates steps one kind's offered load: from first up by factor while
// the steps hold (up to highest), or, when first does not hold, down by
// factor until one does (at most four steps down); then refine more steps,
// each at the geometric mean of the best rate that held and the lowest
// that did not, so that the limit is found within factor^(1/2^refine).
// try runs one step and says whether it held.
func searchRates(ctx context.Context, first, factor, highest float64, refine int, try func(rate float64) (bool, error)) error {
	held, failed := 0.0, 0.0 // the best rate that held, the lowest that did not (0: none yet)
	step := func(rate float64) error {
		ok, err := try(rate)
		switch {
		case err != nil:
			return err
		case ok:
			held = max(held, rate)
		case failed == 0 || rate < failed:
			failed = rate
		}
		return nil
	}
	if err := step(first); err != nil {
		return err
	}
	for rate := first; ctx.Err() == nil; {
		if held == rate {
			if rate *= factor; rate > highest {
				break
			}
		} else if rate /= factor; rate < first/math.Pow(factor, 4) {
			break
		}
		if err := step(rate); err != nil {
			return err
		}
		if held > 0 && failed > 0 {
			break
		}
	}
	for range refine {
		if held == 0 || failed == 0 || ctx.Err() != nil {
			break
		}
		if err := step(math.Sqrt(held * failed)); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// offer sends the n-th request of a step: the ids its recipients arrive
// under once accepted, and its status code (202 when accepted).
type offer func(ctx context.Context, n int64) (ids []string, code int, err error)

// apiOffer sends single mail notices (POST /api/messages/send) or WeCom
// batches of per users (POST /api/messages/batch).
func apiOffer(cl *client, kind, run string, per int) offer {
	step := strconv.FormatInt(time.Now().UnixNano(), 36)
	return func(ctx context.Context, n int64) ([]string, int, error) {
		var path string
		var body []byte
		var users []string
		if kind == "wecom" {
			users = make([]string, per)
			for i := range users {
				users[i] = "u" + run + step + "-" + strconv.FormatInt(n, 36) + "-" + strconv.Itoa(i)
			}
			path = "/api/messages/batch"
			body = []byte(`{"messageType":"WECOM","templateCode":"notice","recipients":["` + strings.Join(users, `","`) +
				`"],"variables":{"title":"Maintenance","content":"Tonight 22:00-23:00"}}`)
		} else {
			path = "/api/messages/send"
			body = []byte(`{"messageType":"EMAIL","templateCode":"notice","recipient":"hl` + run + step + "-" + strconv.FormatInt(n, 10) +
				`@example.com","variables":{"title":"Maintenance","content":"Tonight 22:00-23:00"}}`)
		}
		code, resp, err := cl.post(ctx, path, body, kind != "wecom")
		if code != 202 {
			return nil, code, err
		}
		if kind == "wecom" {
			return users, code, err
		}
		if id := taskIDOf(resp); id != "" {
			return []string{id}, code, err
		}
		return nil, code, err
	}
}

// headlineStep offers rate recipients/s for one step (per recipients a
// request), then waits for the tail and measures every accepted
// recipient's accept → arrival time.
func headlineStep(ctx context.Context, h HeadlineOptions, arr *Arrivals, rate float64, per int, send offer, alive func() error) (HeadlineStep, error) {
	st := HeadlineStep{Offered: rate}
	_, _, _ = arr.Take()
	var (
		mu   sync.Mutex
		accs = map[string]time.Time{} // the id each recipient arrives under → its acceptance
		seq  atomic.Int64
	)
	do := func(ctx context.Context, _ int, _ int64) (int, error) {
		ids, code, err := send(ctx, seq.Add(1))
		if len(ids) > 0 {
			now := time.Now()
			mu.Lock()
			for _, id := range ids {
				accs[id] = now
			}
			mu.Unlock()
		}
		return code, err
	}
	d := Drive{Concurrency: h.Concurrency, Duration: h.Step, Rate: rate / float64(per)}.Run(ctx, do)
	mu.Lock()
	st.Accepted = len(accs)
	mu.Unlock()
	// Over the whole step (an open loop starts its first request at once,
	// so the requests started span a little less than it), or over the
	// time it took to send them all when the offered load fell behind.
	// Not until the last answer: that is latency, not rate; dividing by
	// it made a step that took every one of 3,000/s × 60 s read
	// 2,999.7/s.
	st.Rate = round2(float64(st.Accepted) / max(d.LaunchSec, h.Step.Seconds()))
	deadline := time.Now().Add(h.Drain)
	for arr.Count() < st.Accepted && time.Now().Before(deadline) {
		if err := alive(); err != nil {
			return st, err
		}
		if !pace(ctx, 20*time.Millisecond) {
			return st, ctx.Err()
		}
	}
	got, _, _ := arr.Take()
	hist := NewHist()
	for id, at := range accs {
		t, ok := got[id]
		if !ok {
			st.Lost++
			continue
		}
		st.Received++
		hist.Record(max(t.Sub(at), 0))
	}
	st.Latency = hist.Summary()
	st.judge(h.P99, h.Drain, codesString(d.Codes))
	return st, nil
}

// add records a step; the best is the highest offered rate that held.
func (k *HeadlineKind) add(st HeadlineStep) {
	k.Steps = append(k.Steps, st)
	if st.Held {
		k.Best = max(k.Best, st.Offered)
	}
}

// judge says whether the step held: nothing lost, at least
// headlineAcceptFloor of the offered rate accepted, p99 under p99.
func (st *HeadlineStep) judge(p99, drain time.Duration, codes string) {
	switch {
	case st.Lost > 0:
		st.Why = fmt.Sprintf("%d recipients not at the sink within %s", st.Lost, drain)
	case st.Rate < headlineAcceptFloor*st.Offered:
		st.Why = fmt.Sprintf("only %.0f/s accepted (%v)", st.Rate, codes)
	case st.Latency.P99 >= float64(p99)/float64(time.Millisecond):
		st.Why = fmt.Sprintf("p99 %.2f ms", st.Latency.P99)
	default:
		st.Held = true
	}
}

// rawPath is the headline's baseline (issue 22): the broker path alone on
// the same machine, in the same run. Messages of the size of a notice are
// published with confirms (amqp091-go, a window of 256, as the raw
// publish reference) to a queue of their own, of the type the topology
// model gives the mail notices' queue (quorum by default), and consumed in
// this process with a prefetch of 256, acked (multiple) whenever the
// consumer has caught up; each is timed from its confirm, the raw path's
// 202, to its delivery.
type rawPath struct {
	conn  *amqp.Connection
	pub   *ConfirmPublisher
	ch    *amqp.Channel
	queue string
	arr   *Arrivals
	body  []byte
	done  chan struct{}
}

func newRawPath(ctx context.Context, conn *amqp.Connection, run string) (*rawPath, error) {
	qt, err := noticeQueueType()
	if err != nil {
		return nil, err
	}
	b, err := envelope.Encode(sampleMessage(topology.Mail, 0))
	if err != nil {
		return nil, err
	}
	r := &rawPath{conn: conn, queue: "loadgen.headline.raw." + run, arr: NewArrivals(), body: b}
	if r.ch, err = conn.Channel(); err != nil {
		return nil, err
	}
	fail := func(err error) (*rawPath, error) {
		r.close()
		return nil, err
	}
	if _, err := r.ch.QueueDeclare(r.queue, true, false, false, false, amqp.Table{topology.ArgQueueType: string(qt)}); err != nil {
		return fail(fmt.Errorf("declare %s: %w", r.queue, err))
	}
	if err := r.ch.Qos(256, 0, false); err != nil {
		return fail(err)
	}
	deliveries, err := r.ch.ConsumeWithContext(ctx, r.queue, "", false, false, false, false, nil)
	if err != nil {
		return fail(err)
	}
	r.done = make(chan struct{})
	go func() { // ends when the channel closes (close)
		defer close(r.done)
		for d := range deliveries {
			r.arr.Add(d.MessageId, time.Now())
			if len(deliveries) == 0 {
				_ = d.Ack(true)
			}
		}
	}()
	if r.pub, err = NewConfirmPublisher(conn, 256); err != nil {
		return fail(err)
	}
	return r, nil
}

// noticeQueueType is the type of the queue the API puts mail notices in.
func noticeQueueType() (topology.QueueType, error) {
	m, err := topology.Build(benchTopology(), "")
	if err != nil {
		return "", err
	}
	ct, err := m.Channel(topology.Mail)
	if err != nil {
		return "", err
	}
	name := ct.Level(noticeLevel).Queue
	for _, q := range m.Queues {
		if q.Name == name {
			return q.Type, nil
		}
	}
	return "", fmt.Errorf("no queue %s in the topology model", name)
}

func (r *rawPath) offer(ctx context.Context, n int64) ([]string, int, error) {
	id := "raw-" + strconv.FormatInt(n, 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	err := r.pub.Publish(ctx, "", r.queue, amqp.Publishing{MessageId: id, DeliveryMode: amqp.Persistent, ContentType: "application/json", Body: r.body})
	if err != nil {
		return nil, 503, err
	}
	return []string{id}, 202, nil
}

func (r *rawPath) close() {
	if r.pub != nil {
		r.pub.Close()
	}
	if ch, err := r.conn.Channel(); err == nil {
		_, _ = ch.QueueDelete(r.queue, false, false, false)
		_ = ch.Close()
	}
	_ = r.ch.Close()
	if r.done != nil {
		<-r.done
	}
}

// writeHeadline renders the headline section (markdown when md, else
// text) with p.
func writeHeadline(p func(string, ...any), h *HeadlineResult, md bool) {
	if h == nil {
		return
	}
	p("")
	if md {
		p("## Seed 004's headline")
		p("")
		p("Highest offered rate whose every recipient went from the API's 202 to the sink with p99 under %.0f ms for a whole step of %.0f s, none lost, the API accepting at least 99%% of it over the step. Each kind is first offered its target (`--targets`; raw, which has none, `--raw-start`), then twice as much while steps hold, or half as much until one does, then the geometric mean of the best rate that held and the lowest that did not (`--refine` times); steps are listed in the order they ran. Mail: single sends (`POST /api/messages/send`) through the SMTP sink. WeCom: batches of %d recipients (`POST /api/messages/batch`) through the WeCom test server (answering in %s). In recipients per second.", h.P99Ms, h.StepSec, h.Batch, WeComLatency)
		p("")
		p("raw: the broker path alone on the same machine in the same run, the baseline: a notice-sized message published with confirms (amqp091-go, window 256) by as many publishers as the API kinds' connections, each waiting for its confirm, to a quorum queue consumed in-process (prefetch 256, multiple acks), timed from its confirm to its delivery; messages per second.")
		p("")
		p("| kind | best offered rate held, recipients/s | steps (offered → accepted/s, p99 ms) |")
		p("|---|---:|---|")
	} else {
		p("Seed 004 headline (p99 < %.0f ms for %.0f s steps, recipients/s)", h.P99Ms, h.StepSec)
	}
	for _, k := range h.Kinds {
		var steps []string
		for _, s := range k.Steps {
			v := fmt.Sprintf("%.0f → %.0f, %.2f", s.Offered, s.Rate, s.Latency.P99)
			if !s.Held {
				v += " (" + s.Why + ")"
			}
			steps = append(steps, v)
		}
		if md {
			p("| %s | %.0f | %s |", k.Kind, k.Best, strings.Join(steps, "; "))
		} else {
			p("  %-8s best %.0f/s; %s", k.Kind, k.Best, strings.Join(steps, "; "))
		}
	}
}
