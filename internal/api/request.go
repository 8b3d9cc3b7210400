package api

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v5"
	"go.uber.org/zap"

	"github.com/msgpulse/msgpulse/internal/apikey"
	"github.com/msgpulse/msgpulse/internal/ratelimit"
)

// Reading a sending request (its content type, its JSON body, its
// Idempotency-Key) and answering it under that key.

// Idempotency-Key (Stripe's header; IETF httpapi draft "The
// Idempotency-Key HTTP Header Field") on the three sending endpoints. The
// entry is ratelimit.Once: it is looked up and reserved by the limiter
// script the request runs anyway, so a request with the header costs one
// write more than one without (the answer, after the publish), and a
// request without it costs nothing at all.
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderIdempotentReplayed marks an answer given again from the entry.
	HeaderIdempotentReplayed = "Idempotent-Replayed"
	maxIdempotencyKey        = 255
)

// idem is one request's Idempotency-Key, read before its body.
type idem struct {
	header string    // as the client sent it, for messages
	key    string    // the entry's key: tenant and header, hashed
	h      hash.Hash // the request's digest, fed while the body is decoded
	digest string
	ttl    time.Duration
}

// readIdempotencyKey returns nil when the request has no Idempotency-Key,
// and 400 when it has an invalid one. The tenant is in the entry's key, so
// that two tenants' keys never meet.
func (s *Server) readIdempotencyKey(c *echo.Context) (*idem, *apiError) {
	vs := c.Request().Header.Values(HeaderIdempotencyKey)
	if len(vs) == 0 {
		return nil, nil
	}
	v := vs[0]
	if len(vs) > 1 || v == "" || len(v) > maxIdempotencyKey {
		return nil, badRequest("%s must be one value of 1 to %d printable ASCII characters", HeaderIdempotencyKey, maxIdempotencyKey)
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return nil, badRequest("%s must be 1 to %d printable ASCII characters (byte %d is not)", HeaderIdempotencyKey, maxIdempotencyKey, i)
		}
	}
	tenant := cmp.Or(Caller(c).Tenant, apikey.DefaultTenant)
	sum := sha256.Sum256([]byte(tenant + "\x00" + v))
	in := &idem{header: v, key: hex.EncodeToString(sum[:20]), h: sha256.New(), ttl: s.opts.IdempotencyTTL}
	// The request's identity: method, path and the body's exact bytes.
	fmt.Fprintf(in.h, "%s %s\n", c.Request().Method, c.Request().URL.Path)
	return in, nil
}

// decodeBody is decodeJSON behind checkContentType that also reads the
// Idempotency-Key and, when there is one, digests the body as it is read.
func (s *Server) decodeBody(c *echo.Context, limit int64, v any) (*idem, *apiError) {
	if e := checkContentType(c.Request()); e != nil {
		return nil, e
	}
	in, e := s.readIdempotencyKey(c)
	if e != nil {
		return nil, e
	}
	var body io.Reader = c.Request().Body
	if in != nil {
		body = io.TeeReader(body, in.h)
	}
	if e := decodeJSON(body, limit, v); e != nil {
		return nil, e
	}
	if in != nil {
		// decodeJSON read up to EOF (it checks for trailing data), so the
		// digest covers the whole body.
		in.digest = hex.EncodeToString(in.h.Sum(nil))
	}
	return in, nil
}

// once is the entry for a request publishing under ids; nil without a key.
// lease bounds how long a second request is told "in progress": the
// longest the first can take, so that an API process that died mid-request
// frees its key.
func (in *idem) once(ids string, lease time.Duration) *ratelimit.Once {
	if in == nil {
		return nil
	}
	return &ratelimit.Once{Key: in.key, Digest: in.digest, IDs: ids, Lease: lease, TTL: in.ttl}
}

// lease is how long a request publishing n messages may hold its key.
func (s *Server) lease(n int) time.Duration {
	rounds := (n + batchPublishers - 1) / batchPublishers
	return time.Duration(rounds+1)*s.opts.PublishTimeout + 5*time.Second
}

// answer writes a success and, for a request with a key, stores it first
// for the requests that repeat it. Storing is the one write a keyed
// request adds, after its publish: the answer does not exist before, and
// no other write of the request comes after the publish to carry it. It
// is one MULTI (answer, TTL, end of the lease) on the entry's slot. If it
// fails, the entry keeps its lease and then counts as released: a retry
// publishes under the same ids, and the consumer's claim sends once.
func (s *Server) answer(c *echo.Context, in *idem, res *ratelimit.Reservation, status int, msg string, data any) error {
	if in == nil || res == nil || res.OnceKey == "" {
		return reply(c, status, msg, data)
	}
	b, err := json.Marshal(Envelope{Code: status, Msg: msg, Data: data})
	if err != nil {
		return internal(err)
	}
	b = append(b, '\n')
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), 2*time.Second)
	defer cancel()
	if err := s.d.Limiter.Finish(ctx, res, in.ttl, status, b); err != nil {
		s.log.Warn("could not store the answer of an idempotent request; a retry publishes again under the same task ids", zap.Error(err))
	} else {
		s.answerDurable(ctx, res.OnceKey)
	}
	s.metrics.idempotent.WithLabelValues("stored").Inc()
	return c.Blob(status, echo.MIMEApplicationJSON, b)
}

// derivedTaskID is the task id of recipient in batch batchID, for a batch
// with an Idempotency-Key: a retry of the batch derives the same ids from
// the batchId its entry kept, whichever recipients the first attempt
// admitted. It keeps the batch id's time prefix, so ids still sort by
// creation.
func derivedTaskID(batchID, recipient string) string {
	ns, err := uuid.Parse(batchID)
	if err != nil {
		ns = uuid.Nil
	}
	id := uuid.NewHash(sha256.New(), ns, []byte(recipient), 7)
	copy(id[:6], ns[:6]) // UUIDv7's 48-bit millisecond time
	return id.String()
}

// decodeJSON reads exactly one JSON object from r into v, refusing unknown
// fields, trailing data and bodies over limit, with messages that say what
// is wrong and where.
func decodeJSON(r io.Reader, limit int64, v any) *apiError {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	dec := json.NewDecoder(lr)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if lr.N <= 0 {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Msg: "request body larger than " + itoa(limit) + " bytes"}
	}
	if err != nil {
		return jsonError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if lr.N <= 0 {
			return &apiError{Status: http.StatusRequestEntityTooLarge, Msg: "request body larger than " + itoa(limit) + " bytes"}
		}
		return badRequest("unexpected data after the JSON object")
	}
	return nil
}

func jsonError(err error) *apiError {
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.Is(err, io.EOF):
		return badRequest("empty body: expected a JSON object")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: the body ends early")
	case errors.As(err, &syn):
		return badRequest("malformed JSON at byte %d: %s", syn.Offset, syn.Error())
	case errors.As(err, &typ):
		if typ.Field == "" {
			return badRequest("the body must be a JSON object")
		}
		return badRequest("field %q must be %s, not %s", typ.Field, jsonType(typ.Type.Kind().String()), typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	}
	return badRequest("malformed JSON: %v", err)
}

func jsonType(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "int", "int64", "int32", "float64", "float32", "uint8":
		return "a number"
	case "bool":
		return "true or false"
	case "map", "struct":
		return "an object"
	case "slice":
		return "an array"
	case "ptr":
		return "a value of the documented type"
	}
	return kind
}

// checkContentType accepts JSON bodies (and a missing Content-Type, which
// many backend HTTP clients omit); anything else is a clear 415.
func checkContentType(req *http.Request) *apiError {
	ct := req.Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return &apiError{Status: http.StatusUnsupportedMediaType, Msg: "Content-Type must be application/json, not " + ct + " (with curl: -H 'Content-Type: application/json')"}
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Caller is the authenticated key of the request; the zero Key (no
// scopes, no tenant) outside Authenticate.
func Caller(c *echo.Context) apikey.Key {
	k, _ := c.Get(ctxCaller).(apikey.Key)
	return k
}
