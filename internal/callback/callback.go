// Package callback POSTs a message's status to the callbackUrl its sender
// gave, signed with the key of the message's tenant (callbackkey): the
// consumer's outcomes (sent, failed, expired) and, in the API process, the
// receipts that follow (delivered, undelivered, bounced, complained). One
// sender, so that both processes sign, retry and refuse internal
// addresses alike.
//
// It must never follow a redirect (it would carry the body and its
// signature elsewhere), never dial an internal address the egress policy
// refuses, never block its caller (a full queue drops and counts), and
// never log a callback URL's path or query, which may hold a secret.
package callback

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/callbackkey"
	"github.com/msgpulse/msgpulse/internal/egress"
	"github.com/msgpulse/msgpulse/internal/redact"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry"
	"github.com/msgpulse/msgpulse/pkg/client"
)

// Config configures status callbacks (seed 000).
type Config struct {
	// Keys sign each tenant's callbacks with that tenant's own key; a
	// callback whose tenant has none is not sent (the API refuses such a
	// callbackUrl, so only a message accepted under older settings has one).
	Keys     callbackkey.Keys
	Timeout  time.Duration // per POST; default 5s
	Attempts int           // default 3
	Backoff  time.Duration // first wait between attempts, doubling; default 1s
	Workers  int           // default 4
	Queue    int           // callbacks waiting at most; default 1000
	Logger   *zap.Logger
	// Results counts callbacks by result (NewResults); nil = a counter of
	// its own, registered nowhere.
	Results *prometheus.CounterVec
	// Egress refuses to connect to loopback, link-local, private and other
	// internal addresses (unless it allows them), checked on the address
	// being dialled, whatever the API saw when it accepted the URL.
	Egress egress.Policy
}

// Validate fills defaults.
func (c *Config) Validate() error {
	if c.Timeout == 0 {
		c.Timeout = 5 * time.Second
	}
	if c.Attempts == 0 {
		c.Attempts = 3
	}
	if c.Backoff == 0 {
		c.Backoff = time.Second
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Queue == 0 {
		c.Queue = 1000
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Results == nil {
		c.Results = NewResults()
	}
	return nil
}

// NewResults is msgpulse_callbacks_total, for the caller to register.
func NewResults() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "msgpulse_callbacks_total", Help: "Status callbacks by result (delivered, failed, refused: an internal address, nokey: the tenant has no callback key, dropped: the queue was full)."}, []string{"result"})
}

// Payload is the JSON a callbackUrl receives when a message reaches a
// final status, or a receipt changes it: pkg/client's StatusCallback, the
// very type a Go tenant reads it into, so the two cannot drift.
type Payload = client.StatusCallback

type callbackJob struct {
	url    string
	tenant string
	key    string
	body   []byte
	task   string
	parent trace.SpanContext // the outcome's span, for the POST's (zero when tracing is off)
}

// Sender POSTs final statuses, signed, with a few retries. They are best
// effort: a callback still queued when the process dies is not sent (the
// status stays readable through GET /api/messages/{taskId}).
type Sender struct {
	cfg    Config
	client *http.Client
	jobs   chan callbackJob
	mu     sync.Mutex
	closed bool
	wg     sync.WaitGroup
	stop   chan struct{}
}

// New starts the workers; Close stops them.
func New(cfg Config) (*Sender, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.Proxy = nil // a proxy would dial for us, past the check
	transport.DialContext = cfg.Egress.DialContext(&net.Dialer{Timeout: cfg.Timeout, KeepAlive: 30 * time.Second})
	// A redirect is not followed: it would carry the body and its
	// signature to a host the caller never named, perhaps over plain http.
	// The 3xx itself is the answer, and a failed attempt (post).
	client := &http.Client{Timeout: cfg.Timeout, Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	c := &Sender{cfg: cfg, client: client, jobs: make(chan callbackJob, cfg.Queue), stop: make(chan struct{})}
	for range cfg.Workers {
		c.wg.Add(1)
		go c.work()
	}
	return c, nil
}

// Send queues a callback for rec, to be signed with tenant's key ("" is
// the default tenant). It never blocks the pipeline: when the queue is
// full the callback is dropped and counted. ctx's span, if any, is the
// parent of the POST's.
func (c *Sender) Send(ctx context.Context, url, tenant string, rec status.Record) {
	if tenant == "" {
		tenant = apikey.DefaultTenant
	}
	key, kerr := c.cfg.Keys.For(tenant)
	if kerr != nil {
		c.cfg.Results.WithLabelValues("nokey").Inc()
		c.cfg.Logger.Warn("callback not sent: its tenant has no callback key (set CALLBACK_SECRETS or CALLBACK_SECRET)",
			zap.String("task_id", rec.TaskID), zap.String("tenant", tenant))
		return
	}
	body, err := json.Marshal(PayloadOf(rec))
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	select {
	case c.jobs <- callbackJob{url: url, tenant: tenant, key: key, body: body, task: rec.TaskID, parent: telemetry.Parent(ctx)}:
	default:
		c.cfg.Results.WithLabelValues("dropped").Inc()
		c.cfg.Logger.Warn("callback queue full; dropping callback", zap.String("task_id", rec.TaskID), telemetry.LogField(ctx))
	}
}

// PayloadOf is the callback body of rec.
func PayloadOf(rec status.Record) Payload {
	return Payload{Event: "message.status", TaskID: rec.TaskID, Status: client.Status(rec.Status), Channel: client.Channel(rec.Channel),
		Recipient: rec.Recipient, Attempts: rec.Attempts, Provider: rec.Provider, SentAt: rec.SentAt, LastError: rec.LastError,
		ErrorClass: rec.ErrorClass, Reason: rec.Reason, UpdatedAt: rec.UpdatedAt,
		ReceiptCode: rec.ReceiptCode, ReceiptDetail: rec.ReceiptDetail, ReceiptSource: rec.ReceiptSource, DeliveredAt: rec.DeliveredAt}
}

func (c *Sender) work() {
	defer c.wg.Done()
	for j := range c.jobs {
		c.deliver(j)
	}
}

func (c *Sender) deliver(j callbackJob) {
	wait := c.cfg.Backoff
	var last error
	for attempt := 1; attempt <= c.cfg.Attempts; attempt++ {
		retry, err := c.post(j)
		if err == nil {
			c.cfg.Results.WithLabelValues("delivered").Inc()
			return
		}
		last = err
		if !retry || attempt == c.cfg.Attempts {
			break
		}
		select {
		case <-c.stop: // shutting down: one attempt each for what is left
			attempt = c.cfg.Attempts
		case <-time.After(wait):
		}
		wait *= 2
	}
	if errors.Is(last, egress.ErrBlocked) {
		c.cfg.Results.WithLabelValues("refused").Inc()
		c.cfg.Logger.Warn("callback refused: its host is not a public address", zap.String("task_id", j.task), telemetry.ParentField(j.parent),
			zap.String("url", redact.URL(j.url)), zap.String("error", redact.Text(last.Error())))
		return
	}
	c.cfg.Results.WithLabelValues("failed").Inc()
	c.cfg.Logger.Warn("callback failed", zap.String("task_id", j.task), telemetry.ParentField(j.parent), zap.String("error", redact.Text(last.Error())))
}

func (c *Sender) post(j callbackJob) (retry bool, err error) {
	ts := time.Now().Unix()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.url, bytes.NewReader(j.body))
	if err != nil {
		return false, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "msgpulse-callback/1")
	req.Header.Set("X-Msgpulse-Event", "message.status")
	req.Header.Set(callbackkey.TimestampHeader, strconv.FormatInt(ts, 10))
	req.Header.Set(callbackkey.TenantHeader, j.tenant)
	req.Header.Set(callbackkey.SignatureHeader, callbackkey.Sign(j.key, ts, j.tenant, j.url, j.body))
	_, span := telemetry.StartCallback(j.parent, req)
	defer span.End()
	resp, err := c.client.Do(req) //nolint:gosec // callback URLs come from authenticated callers; the dialer refuses internal addresses
	if err != nil {
		span.Fail("unreachable")
		return !errors.Is(err, egress.ErrBlocked), err
	}
	span.SetInt("http.response.status_code", resp.StatusCode)
	if resp.StatusCode >= 300 {
		span.Fail("answered " + strconv.Itoa(resp.StatusCode))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	switch {
	case resp.StatusCode < 300:
		return false, nil
	case resp.StatusCode < 400: // a redirect, not followed: failed, and tried again like a 5xx
		return true, fmt.Errorf("callback answered %d (redirects are not followed)", resp.StatusCode)
	case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500:
		return true, fmt.Errorf("callback answered %d", resp.StatusCode)
	}
	return false, fmt.Errorf("callback answered %d (not retried)", resp.StatusCode)
}

// Close stops taking callbacks and waits for the queued ones, until ctx
// ends.
func (c *Sender) Close(ctx context.Context) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.jobs)
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		close(c.stop)
		<-done
	}
}
