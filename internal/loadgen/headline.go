package loadgen

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Seed 004's headline: ten thousand messages a second with p99 under
// 100 ms. The headline mode finds, by stepping the offered load, the
// highest rate whose every message went from the API's 202 to the sink
// with p99 under --p99 for a whole step (--step, 60 s by default), and
// none lost: for single mail sends (POST /api/messages/send, one
// recipient each, through the SMTP sink) and for WeCom batches of --batch
// recipients (POST /api/messages/batch through the WeCom test server),
// both counted in recipients per second.

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
	Drain               time.Duration // longest wait for a step's tail
	Kinds               []string      // "mail", "wecom"
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
	Best  float64        `json:"bestRecipientsPerSec"` // 0: not even the first step held
}

// HeadlineResult is the headline mode's section of the report.
type HeadlineResult struct {
	P99Ms   float64           `json:"p99Ms"`
	StepSec float64           `json:"stepSec"`
	Batch   int               `json:"batch"`
	Config  map[string]string `json:"config"`
	Kinds   []HeadlineKind    `json:"kinds"`
}

// Headline runs the real api and consumer (mail and WeCom) and steps the
// offered load of each kind until a step does not hold.
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
	for _, kind := range h.Kinds {
		k := HeadlineKind{Kind: kind}
		arr := sys.arr
		per := 1
		if kind == "wecom" {
			arr, per = wecomArr, h.Batch
		}
		for rate := h.Start; rate <= h.Max && ctx.Err() == nil; rate *= h.Factor {
			st, err := headlineStep(ctx, h, cl, arr, kind, run, rate, per, sys)
			if err != nil {
				return res, fmt.Errorf("headline %s at %.0f/s: %w", kind, rate, err)
			}
			k.Steps = append(k.Steps, st)
			o.progress("headline %s: offered %.0f recipients/s, accepted %.0f/s, p99 %.2f ms, lost %d: %s", kind, rate, st.Rate, st.Latency.P99, st.Lost, map[bool]string{true: "held", false: "did not hold (" + st.Why + ")"}[st.Held])
			if !st.Held {
				break
			}
			k.Best = st.Rate
		}
		res.Kinds = append(res.Kinds, k)
	}
	return res, nil
}

// headlineStep offers rate recipients/s of kind for one step, then waits
// for the tail and measures every accepted recipient's 202 → sink time.
func headlineStep(ctx context.Context, h HeadlineOptions, cl *client, arr *Arrivals, kind, run string, rate float64, per int, sys *system) (HeadlineStep, error) {
	st := HeadlineStep{Offered: rate}
	_, _, _ = arr.Take()
	var (
		mu   sync.Mutex
		accs = map[string]time.Time{} // the id each recipient arrives under → its 202
		seq  int64
	)
	step := strconv.FormatInt(time.Now().UnixNano(), 36)
	do := func(ctx context.Context, _ int, _ int64) (int, error) {
		mu.Lock()
		seq++
		n := seq
		mu.Unlock()
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
		if code == 202 {
			now := time.Now()
			mu.Lock()
			if kind == "wecom" {
				for _, u := range users {
					accs[u] = now
				}
			} else if id := taskIDOf(resp); id != "" {
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
	// Over the whole step: an open loop starts its first request at once,
	// so the requests started span a little less than it.
	st.Rate = round2(float64(st.Accepted) / max(d.ElapsedSec, h.Step.Seconds()))
	deadline := time.Now().Add(h.Drain)
	for arr.Count() < st.Accepted && time.Now().Before(deadline) {
		for _, p := range []*Proc{sys.api, sys.cons} {
			if exited, _ := p.Exited(); exited {
				return st, p.exitError()
			}
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
	switch {
	case st.Lost > 0:
		st.Why = fmt.Sprintf("%d recipients not at the sink within %s", st.Lost, h.Drain)
	case st.Rate < 0.95*rate:
		st.Why = fmt.Sprintf("the API accepted only %.0f/s (%v)", st.Rate, codesString(d.Codes))
	case st.Latency.P99 >= float64(h.P99)/float64(time.Millisecond):
		st.Why = fmt.Sprintf("p99 %.2f ms", st.Latency.P99)
	default:
		st.Held = true
	}
	return st, nil
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
		p("Highest offered rate whose every recipient went from the API's 202 to the sink with p99 under %.0f ms for a whole step of %.0f s, none lost; the offered load steps up until one does not hold. Mail: single sends (`POST /api/messages/send`) through the SMTP sink. WeCom: batches of %d recipients (`POST /api/messages/batch`) through the WeCom test server (answering in %s). In recipients per second.", h.P99Ms, h.StepSec, h.Batch, WeComLatency)
		p("")
		p("| kind | best held, recipients/s | steps (offered → accepted/s, p99 ms) |")
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
