package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/msgpulse/msgpulse/pkg/client/internal/oapi"
)

// Defaults of New.
const (
	// DefaultTimeout bounds each call unless WithTimeout says otherwise: a
	// caller that forgot a deadline must not hang on a stuck server.
	DefaultTimeout = 10 * time.Second
	// DefaultUserAgent identifies this client in the server's logs.
	DefaultUserAgent = "msgpulse-go-client/1"
)

// maxResponseBytes bounds what is read of a response: the largest answer
// (every rate limit, every queue) is a few KiB, so 1 MiB only stops a
// misbehaving server or proxy from making the caller buffer without limit.
const maxResponseBytes = 1 << 20

// Client calls msgpulse. It is safe for concurrent use.
type Client struct {
	baseURL   string // scheme://host[/prefix], no trailing slash
	apiKey    string
	hc        *http.Client
	api       *oapi.Client // the generated core: builds and sends each request
	userAgent string
	timeout   time.Duration
	now       func() time.Time // for Retry-After dates; a field so tests pin it
}

// Option configures New.
type Option func(*Client)

// WithHTTPClient sets the HTTP client (transport, proxy, TLS). The client is
// copied, and the copy never follows redirects; the original is left as is.
// nil keeps the default.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithUserAgent sets the User-Agent header; "" keeps DefaultUserAgent.
func WithUserAgent(ua string) Option {
	return func(c *Client) {
		if ua != "" {
			c.userAgent = ua
		}
	}
}

// WithTimeout bounds each call (request and reading the answer), on top of
// the caller's context; d <= 0 removes the bound, leaving only the context.
func WithTimeout(d time.Duration) Option {
	return func(c *Client) { c.timeout = max(d, 0) }
}

// New returns a client for the msgpulse server at baseURL (for example
// "https://msgpulse.internal" or "http://gw/msgpulse" behind a path prefix),
// authenticating with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("msgpulse client: base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("msgpulse client: base URL %q: want http(s)://host[/prefix]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		// A query or fragment would be lost or misplaced when paths are
		// appended; credentials in the URL are not how msgpulse authenticates.
		return nil, fmt.Errorf("msgpulse client: base URL %q: must not have a query, fragment or user info", baseURL)
	}
	if apiKey == "" {
		return nil, errors.New("msgpulse client: API key is empty")
	}
	if strings.ContainsFunc(apiKey, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		// Checked here rather than failing every request later with an
		// error that would not say which setting is wrong.
		return nil, errors.New("msgpulse client: API key contains control characters")
	}
	c := &Client{
		baseURL:   strings.TrimRight(u.String(), "/"),
		apiKey:    apiKey,
		hc:        &http.Client{},
		userAgent: DefaultUserAgent,
		timeout:   DefaultTimeout,
		now:       time.Now,
	}
	for _, o := range opts {
		o(c)
	}
	hc := *c.hc
	// Never follow redirects: Go forwards custom headers such as X-API-Key
	// to any redirect target, even on another host. The API has no
	// redirects, so one is reported as an *APIError instead.
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c.hc = &hc
	// The core resolves each operation's path against baseURL+"/", so a
	// path prefix ("http://gw/msgpulse") is kept.
	c.api, err = oapi.NewClient(c.baseURL, oapi.WithHTTPClient(c.hc))
	if err != nil {
		return nil, fmt.Errorf("msgpulse client: base URL: %w", err)
	}
	return c, nil
}

// RequestVerificationCode generates a code and queues its delivery
// (POST /api/verification-codes). A too-early resend or a per-recipient or
// per-IP limit is an *APIError for which IsRateLimited is true.
// With WithIdempotencyKey it is safe to retry (see CallOption).
func (c *Client) RequestVerificationCode(ctx context.Context, req VerificationCodeRequest, opts ...CallOption) (*VerificationCode, error) {
	const path = "/api/verification-codes"
	params := &oapi.RequestVerificationCodeParams{IdempotencyKey: idempotencyKey(opts)}
	return call[VerificationCode](ctx, c, http.MethodPost, path, req, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.RequestVerificationCodeWithBody(ctx, params, jsonType, body, e)
	})
}

// VerifyCode checks a code (POST /api/verification-codes/verify). A wrong
// code is not an error: Valid is false and AttemptsLeft says how many tries
// remain. When too many wrong attempts burned the code the server answers
// 429 with the same data: VerifyCode then returns both the result (Valid
// false, AttemptsLeft 0) and the *APIError. A 429 without data (a request
// rate limit) returns a nil result and the error.
func (c *Client) VerifyCode(ctx context.Context, req VerifyRequest) (*VerifyResult, error) {
	const path = "/api/verification-codes/verify"
	data, err := c.do(ctx, http.MethodPost, path, true, req, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.VerifyCodeWithBody(ctx, jsonType, body, e)
	})
	if err != nil {
		if _, limited := IsRateLimited(err); limited && hasData(data) {
			res, derr := decode[VerifyResult](http.MethodPost, path, data)
			if derr == nil {
				return res, err
			}
		}
		return nil, err
	}
	return decode[VerifyResult](http.MethodPost, path, data)
}

// SendMessage queues a templated message, or schedules it when DelaySeconds
// or SendAt is set (POST /api/messages/send). With WithIdempotencyKey it
// is safe to retry (see CallOption).
func (c *Client) SendMessage(ctx context.Context, req SendRequest, opts ...CallOption) (*SendResult, error) {
	if req.DelaySeconds != nil && req.SendAt != nil {
		// Caught before the round trip: the server would answer 400 anyway.
		return nil, errors.New("msgpulse: send message: DelaySeconds and SendAt are mutually exclusive")
	}
	if req.Variables == nil {
		req.Variables = map[string]string{} // the contract requires the object
	}
	params := &oapi.SendMessageParams{IdempotencyKey: idempotencyKey(opts)}
	return call[SendResult](ctx, c, http.MethodPost, "/api/messages/send", req, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.SendMessageWithBody(ctx, params, jsonType, body, e)
	})
}

// SendBatch sends one templated message to many recipients (POST
// /api/messages/batch). Rejected recipients are in the result; an error
// means none was accepted (or nothing was kept). With WithIdempotencyKey
// it is safe to retry (see CallOption).
func (c *Client) SendBatch(ctx context.Context, req BatchRequest, opts ...CallOption) (*BatchResult, error) {
	if req.DelaySeconds != nil && req.SendAt != nil {
		return nil, errors.New("msgpulse: send batch: DelaySeconds and SendAt are mutually exclusive")
	}
	params := &oapi.SendBatchParams{IdempotencyKey: idempotencyKey(opts)}
	return call[BatchResult](ctx, c, http.MethodPost, "/api/messages/batch", req, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.SendBatchWithBody(ctx, params, jsonType, body, e)
	})
}

// GetBatch counts a batch's recipients by status (GET /api/batches/{batchId}).
func (c *Client) GetBatch(ctx context.Context, batchID string) (*Batch, error) {
	if err := segment("batch id", batchID); err != nil {
		return nil, err
	}
	return call[Batch](ctx, c, http.MethodGet, "/api/batches/"+url.PathEscape(batchID), nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.GetBatch(ctx, batchID, e)
	})
}

// GetMessage reads a message's delivery status (GET /api/messages/{taskId}).
// An unknown task is an *APIError for which IsNotFound is true.
func (c *Client) GetMessage(ctx context.Context, taskID string) (*Message, error) {
	if err := segment("task id", taskID); err != nil {
		return nil, err
	}
	return call[Message](ctx, c, http.MethodGet, "/api/messages/"+url.PathEscape(taskID), nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.GetMessage(ctx, taskID, e)
	})
}

// ListRateLimits returns every rate-limit configuration (GET /api/rate-limits).
func (c *Client) ListRateLimits(ctx context.Context) ([]RateLimit, error) {
	return list[RateLimit](ctx, c, "/api/rate-limits", func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.ListRateLimits(ctx, e)
	})
}

// ListFraudBlocks returns the prefixes the fraud guard blocks now: the
// key's tenant's, or every tenant's with the admin scope
// (GET /api/fraud/blocks).
func (c *Client) ListFraudBlocks(ctx context.Context) ([]FraudBlock, error) {
	return list[FraudBlock](ctx, c, "/api/fraud/blocks", func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.ListFraudBlocks(ctx, e)
	})
}

// LiftFraudBlock ends tenant's block of prefix at once, on every replica
// (DELETE /api/fraud/blocks/{tenant}/{prefix}). A block that is not in
// force, or another tenant's without the admin scope, is a 404 *APIError.
func (c *Client) LiftFraudBlock(ctx context.Context, tenant, prefix string) error {
	if err := segment("tenant", tenant); err != nil {
		return err
	}
	if err := segment("prefix", prefix); err != nil {
		return err
	}
	_, err := c.do(ctx, http.MethodDelete, "/api/fraud/blocks/"+url.PathEscape(tenant)+"/"+url.PathEscape(prefix), true, nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.LiftFraudBlock(ctx, tenant, prefix, e)
	})
	return err
}

// ListSuppressions returns one page of the suppression list
// (GET /api/suppressions): the key's tenant's, or every tenant's with the
// admin scope (f.Tenant narrows it to one). Give the page's Next as
// f.Cursor for the page after; "" means it was the last.
func (c *Client) ListSuppressions(ctx context.Context, f SuppressionFilter) (*SuppressionPage, error) {
	q := url.Values{}
	p := &oapi.ListSuppressionsParams{}
	if f.Channel != "" {
		q.Set("channel", f.Channel)
		ch := oapi.ListSuppressionsParamsChannel(f.Channel)
		p.Channel = &ch
	}
	for _, kv := range []struct {
		name string
		v    string
		dst  **string
	}{{"recipient", f.Recipient, &p.Recipient}, {"tenant", f.Tenant, &p.Tenant}, {"cursor", f.Cursor, &p.Cursor}} {
		if kv.v != "" {
			q.Set(kv.name, kv.v)
			v := kv.v
			*kv.dst = &v
		}
	}
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
		p.Limit = &f.Limit
	}
	path := "/api/suppressions"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return call[SuppressionPage](ctx, c, http.MethodGet, path, nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.ListSuppressions(ctx, p, e)
	})
}

// AddSuppression puts a recipient on the suppression list by hand
// (POST /api/suppressions): reason "manual" unless in.Reason names one.
// It returns the entry as it now is: one already there keeps its reason,
// unless it was an unsubscribe and in's reason stops codes too.
func (c *Client) AddSuppression(ctx context.Context, in SuppressionInput) (*Suppression, error) {
	return call[Suppression](ctx, c, http.MethodPost, "/api/suppressions", in, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.AddSuppressionWithBody(ctx, jsonType, body, e)
	})
}

// DeleteSuppression takes recipient off the channel's ("email" or "sms")
// suppression list of tenant ("" is the key's own; another needs the
// admin scope) (DELETE /api/suppressions/{channel}/{recipient}). A
// recipient not on the list is a 404 *APIError.
func (c *Client) DeleteSuppression(ctx context.Context, channel, recipient, tenant string) error {
	if err := segment("channel", channel); err != nil {
		return err
	}
	if err := segment("recipient", recipient); err != nil {
		return err
	}
	path := "/api/suppressions/" + url.PathEscape(channel) + "/" + url.PathEscape(recipient)
	p := &oapi.DeleteSuppressionParams{}
	if tenant != "" {
		path += "?tenant=" + url.QueryEscape(tenant)
		p.Tenant = &tenant
	}
	_, err := c.do(ctx, http.MethodDelete, path, true, nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.DeleteSuppression(ctx, channel, recipient, p, e)
	})
	return err
}

// list GETs path and decodes its data, an array.
func list[T any](ctx context.Context, c *Client, path string, send sender) ([]T, error) {
	data, err := c.do(ctx, http.MethodGet, path, true, nil, send)
	if err != nil {
		return nil, err
	}
	var out []T
	if err := json.Unmarshal(data, &out); err != nil {
		return nil, fmt.Errorf("msgpulse: GET %s: decoding data: %w", path, err)
	}
	return out, nil
}

// CreateRateLimit creates a configuration (POST /api/rate-limits); an empty
// ID lets the server generate one. An existing ID or provider is a 409
// *APIError.
func (c *Client) CreateRateLimit(ctx context.Context, rl RateLimit) (*RateLimit, error) {
	return call[RateLimit](ctx, c, http.MethodPost, "/api/rate-limits", rl, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.CreateRateLimitWithBody(ctx, jsonType, body, e)
	})
}

// GetRateLimit reads one configuration (GET /api/rate-limits/{id}).
func (c *Client) GetRateLimit(ctx context.Context, id string) (*RateLimit, error) {
	if err := segment("rate limit id", id); err != nil {
		return nil, err
	}
	return call[RateLimit](ctx, c, http.MethodGet, "/api/rate-limits/"+url.PathEscape(id), nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.GetRateLimit(ctx, id, e)
	})
}

// UpdateRateLimit replaces the configuration id with rl
// (PUT /api/rate-limits/{id}). rl.ID is ignored: id names the configuration,
// and the body carries it too so the server sees one consistent request.
func (c *Client) UpdateRateLimit(ctx context.Context, id string, rl RateLimit) (*RateLimit, error) {
	if err := segment("rate limit id", id); err != nil {
		return nil, err
	}
	rl.ID = id
	return call[RateLimit](ctx, c, http.MethodPut, "/api/rate-limits/"+url.PathEscape(id), rl, func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.UpdateRateLimitWithBody(ctx, id, jsonType, body, e)
	})
}

// DeleteRateLimit deletes a configuration (DELETE /api/rate-limits/{id}).
func (c *Client) DeleteRateLimit(ctx context.Context, id string) error {
	if err := segment("rate limit id", id); err != nil {
		return err
	}
	_, err := c.do(ctx, http.MethodDelete, "/api/rate-limits/"+url.PathEscape(id), true, nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.DeleteRateLimit(ctx, id, e)
	})
	return err
}

// QueueStats returns the depth and fill level of every queue
// (GET /api/queues/stats).
func (c *Client) QueueStats(ctx context.Context) (*QueueStats, error) {
	return call[QueueStats](ctx, c, http.MethodGet, "/api/queues/stats", nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.QueueStats(ctx, e)
	})
}

// DLQStats returns what the dead-letter queues hold, by reason
// (GET /api/dlq/stats).
func (c *Client) DLQStats(ctx context.Context) (*DLQStats, error) {
	return call[DLQStats](ctx, c, http.MethodGet, "/api/dlq/stats", nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.DlqStats(ctx, e)
	})
}

// Ready returns nil when the server is ready (GET /readyz answered 200). A
// 503 is returned as an error that names each dependency's state and wraps
// the *APIError. The API key is not sent: /readyz needs none and is often
// exposed to load balancers and their logs.
func (c *Client) Ready(ctx context.Context) error {
	data, err := c.do(ctx, http.MethodGet, "/readyz", false, nil, func(ctx context.Context, _ io.Reader, e oapi.RequestEditorFn) (*http.Response, error) {
		return c.api.Readyz(ctx, e)
	})
	if err == nil {
		return nil
	}
	var r struct {
		AMQP  string `json:"amqp"`
		Redis string `json:"redis"`
	}
	if hasData(data) && json.Unmarshal(data, &r) == nil && (r.AMQP != "" || r.Redis != "") {
		return fmt.Errorf("msgpulse not ready (amqp: %s; redis: %s): %w", r.AMQP, r.Redis, err)
	}
	return err
}

// call makes an authenticated request and decodes its data into a new T.
func call[T any](ctx context.Context, c *Client, method, path string, in any, send sender) (*T, error) {
	data, err := c.do(ctx, method, path, true, in, send)
	if err != nil {
		return nil, err
	}
	return decode[T](method, path, data)
}

// decode reads an object payload; a 2xx without one breaks the contract and
// is an error rather than a zero value the caller would mistake for data.
func decode[T any](method, path string, data json.RawMessage) (*T, error) {
	if !hasData(data) {
		return nil, fmt.Errorf("msgpulse: %s %s: response has no data", method, path)
	}
	out := new(T)
	if err := json.Unmarshal(data, out); err != nil {
		return nil, fmt.Errorf("msgpulse: %s %s: decoding data: %w", method, path, err)
	}
	return out, nil
}

func hasData(data json.RawMessage) bool {
	d := bytes.TrimSpace(data)
	return len(d) > 0 && !bytes.Equal(d, []byte("null"))
}

// segment refuses a path parameter the generated core would send
// somewhere else: empty and dot segments would address another route
// ("/api/rate-limits/") or be rewritten by path cleaning
// ("/api/rate-limits/..") instead of reaching the resource. The core
// escapes the rest.
func segment(what, v string) error {
	if v == "" || v == "." || v == ".." {
		return fmt.Errorf("msgpulse: invalid %s %q", what, v)
	}
	return nil
}

// envelope is every JSON answer's shape.
type envelope struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
}

// sender sends one request through the generated core, body (nil for
// none) as its JSON and e applied to it; each method names its operation
// there, so paths, methods and parameter escaping come from the contract.
type sender func(ctx context.Context, body io.Reader, e oapi.RequestEditorFn) (*http.Response, error)

// jsonType is every request body's content type.
const jsonType = "application/json"

// do makes one request. On 2xx it returns the envelope's data; otherwise an
// *APIError and, when the answer was an envelope, its data (some refusals
// explain themselves there: a burned code, a readiness report). method and
// path only name the call in errors.
func (c *Client) do(ctx context.Context, method, path string, auth bool, in any, send sender) (json.RawMessage, error) {
	if c.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("msgpulse: %s %s: encoding request: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	// The core sets the path, the parameters and Content-Type; the
	// headers every call carries are set here.
	headers := func(_ context.Context, req *http.Request) error {
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", c.userAgent)
		if auth {
			req.Header.Set("X-API-Key", c.apiKey)
		}
		return nil
	}
	resp, err := send(ctx, body, headers)
	if err != nil {
		return nil, fmt.Errorf("msgpulse: %s %s: %w", method, path, err)
	}
	defer func() { _ = resp.Body.Close() }() // read fully or abandoned; nothing to report
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("msgpulse: %s %s: reading response (HTTP %d): %w", method, path, resp.StatusCode, err)
	}
	tooLarge := len(raw) > maxResponseBytes

	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A truncated error body still yields an APIError: its excerpt is
		// all a human needs.
		apiErr := newAPIError(resp, raw[:min(len(raw), maxResponseBytes)], c.now())
		var env envelope
		if !tooLarge && json.Unmarshal(raw, &env) == nil {
			return env.Data, apiErr
		}
		return nil, apiErr
	}
	if tooLarge {
		return nil, fmt.Errorf("msgpulse: %s %s: response larger than %d bytes", method, path, maxResponseBytes)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return nil, fmt.Errorf("msgpulse: %s %s: HTTP %d answer is not a JSON envelope (%s): %w",
			method, path, resp.StatusCode, excerpt(raw, resp.Header.Get("Content-Type")), err)
	}
	return env.Data, nil
}
