package client

import (
	"errors"
	"net/http"
	"time"
)

// HeaderIdempotencyKey is the request header WithIdempotencyKey sets.
const HeaderIdempotencyKey = "Idempotency-Key"

// CallOption sets something on one call of SendMessage, SendBatch or
// RequestVerificationCode.
type CallOption func(*callOptions)

type callOptions struct{ idempotencyKey string }

// WithIdempotencyKey sends the call with an Idempotency-Key (1 to 255
// printable ASCII characters; a UUID is a good choice), which makes it
// safe to retry:
//
//   - Within the server's IDEMPOTENCY_TTL (default 24 h), the same key with
//     the same request answers what the first call got (same taskId or
//     batchId), and nothing is sent again.
//   - After a 503, retry with the same key and the same request: when the
//     failed call may have queued the message (a confirm that did not
//     arrive), the retry publishes it under the same taskId, and it is
//     delivered once.
//   - 409 (IsConflict) means a call with the key is still being handled:
//     wait Retry-After and retry with the same key.
//   - 422 means the key was used for another request: a new request needs a
//     new key.
//
// Generate one key per logical message and keep it across retries; the
// key is per tenant.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idempotencyKey = key }
}

// idempotencyKey is the key opts set, as the generated core's parameter;
// nil (no header) when none does.
func idempotencyKey(opts []CallOption) *string {
	co := &callOptions{}
	for _, o := range opts {
		o(co)
	}
	if co.idempotencyKey == "" {
		return nil
	}
	return &co.idempotencyKey
}

// IsConflict reports whether err is (or wraps) a 409 answer: a call with
// the same Idempotency-Key is still being handled. Retry with the same key
// after retryAfter.
func IsConflict(err error) (retryAfter time.Duration, ok bool) {
	var ae *APIError
	if errors.As(err, &ae) && ae.StatusCode == http.StatusConflict {
		return ae.RetryAfter, true
	}
	return 0, false
}
