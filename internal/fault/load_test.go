package fault

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/msgpulse/msgpulse/pkg/client"
)

// outcome is what one request of the load got.
type outcome struct {
	seq       int
	recipient string
	start     time.Time
	took      time.Duration
	status    int // 202, 503, ...; 0 when no HTTP answer came (transport error, client timeout)
	taskID    string
	err       error
}

func (o outcome) end() time.Time { return o.start.Add(o.took) }

// load sends requests at a steady rate until stopped: mostly templated
// emails, every fifth a verification code, each to a recipient of its own,
// so that a mail can be traced to its request even when the request was
// answered 503 (and so carries no taskId).
type load struct {
	t     *testing.T
	c     *client.Client
	name  string
	every time.Duration
	// delayEvery, when set, schedules every delayEvery-th email (by
	// sequence) delay later, through the delay exchange and the relay.
	delayEvery int
	delay      time.Duration
	// idempotent, when set, sends every request with its recipient as its
	// Idempotency-Key, so that a scenario can send it again (again).
	idempotent bool

	stopOnce sync.Once
	stopc    chan struct{}
	done     chan struct{}

	mu      sync.Mutex
	outs    []outcome
	skipped int // ticks with every worker busy (requests hanging)
}

// maxOutstanding bounds requests in flight: a hanging API must not make
// the test spawn goroutines without limit.
const maxOutstanding = 128

func startLoad(t *testing.T, c *client.Client, name string, perSecond int, opts ...func(*load)) *load {
	t.Helper()
	l := &load{t: t, c: c, name: name, every: time.Second / time.Duration(perSecond), stopc: make(chan struct{}), done: make(chan struct{})}
	for _, o := range opts {
		o(l)
	}
	go l.run()
	t.Cleanup(l.stop)
	return l
}

func (l *load) run() {
	defer close(l.done)
	var wg sync.WaitGroup
	defer wg.Wait()
	sem := make(chan struct{}, maxOutstanding)
	tick := time.NewTicker(l.every) // paces the load; no outcome is awaited here
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-l.stopc:
			return
		case <-tick.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			l.mu.Lock()
			l.skipped++
			l.mu.Unlock()
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			o := l.request(seq, fmt.Sprintf("%s-%d@example.com", l.name, seq))
			l.mu.Lock()
			l.outs = append(l.outs, o)
			l.mu.Unlock()
		}()
	}
}

// one sends one templated email to recipient, outside the pacing, and
// counts it with the load.
func (l *load) one(recipient string) outcome {
	o := l.request(-1, recipient)
	l.mu.Lock()
	l.outs = append(l.outs, o)
	l.mu.Unlock()
	return o
}

func (l *load) request(seq int, recipient string) outcome {
	o := outcome{seq: seq, recipient: recipient, start: time.Now()}
	ctx := context.Background() // the client bounds each call (30 s)
	var opts []client.CallOption
	if l.idempotent {
		opts = append(opts, client.WithIdempotencyKey(recipient))
	}
	var err error
	if isCode(seq) {
		var vc *client.VerificationCode
		vc, err = l.c.RequestVerificationCode(ctx, client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: o.recipient, Purpose: "login"}, opts...)
		if err == nil {
			o.taskID = vc.TaskID
		}
	} else {
		var res *client.SendResult
		req := client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: o.recipient,
			Variables: map[string]string{"title": l.name, "content": fmt.Sprint("request ", seq)}}
		if l.delayEvery > 0 && seq%l.delayEvery == 0 {
			d := l.delay.Seconds()
			req.DelaySeconds = &d
		}
		res, err = l.c.SendMessage(ctx, req, opts...)
		if err == nil {
			o.taskID = res.TaskID
		}
	}
	o.took = time.Since(o.start)
	var ae *client.APIError
	switch {
	case err == nil:
		o.status = 202
	case errors.As(err, &ae):
		o.status = ae.StatusCode
	}
	o.err = err
	return o
}

// again sends request o once more, as a caller retrying it would (with
// its Idempotency-Key when the load is idempotent), outside the load's
// counting.
func (l *load) again(o outcome) outcome {
	return l.request(o.seq, o.recipient)
}

// isCode says whether the load's request seq asked for a verification code.
func isCode(seq int) bool { return seq%5 == 4 }

// stop stops sending and waits for the requests in flight.
func (l *load) stop() {
	l.stopOnce.Do(func() { close(l.stopc) })
	<-l.done
}

// outcomes returns a copy of the outcomes so far.
func (l *load) outcomes() []outcome {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]outcome(nil), l.outs...)
}

// accepted is how many requests got a 202 so far.
func (l *load) accepted() int {
	n := 0
	for _, o := range l.outcomes() {
		if o.status == 202 {
			n++
		}
	}
	return n
}

// acceptedAfter reports whether a request that started after t got a 202.
func (l *load) acceptedAfter(t time.Time) bool {
	for _, o := range l.outcomes() {
		if o.status == 202 && o.start.After(t) {
			return true
		}
	}
	return false
}

// startedIn returns the outcomes of requests started in [from, to).
func (l *load) startedIn(from, to time.Time) []outcome {
	var out []outcome
	for _, o := range l.outcomes() {
		if !o.start.Before(from) && o.start.Before(to) {
			out = append(out, o)
		}
	}
	return out
}

func slowest(outs []outcome) time.Duration {
	var m time.Duration
	for _, o := range outs {
		m = max(m, o.took)
	}
	return m
}

func withStatus(outs []outcome, status int) []outcome {
	var out []outcome
	for _, o := range outs {
		if o.status == status {
			out = append(out, o)
		}
	}
	return out
}
