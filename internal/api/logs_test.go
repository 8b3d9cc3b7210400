package api

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"

	"github.com/msgpulse/msgpulse/internal/broker"
	"github.com/msgpulse/msgpulse/internal/logging"
)

// switchPublisher publishes, refuses (a nack: the 503 of a full queue) or
// panics, as the test sets it.
type switchPublisher struct {
	Publisher
	mode atomic.Int32 // 0 publish, 1 refuse, 2 panic
}

func (p *switchPublisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error {
	switch p.mode.Load() {
	case 1:
		return broker.ErrNacked
	case 2:
		panic("a bug in the publish path")
	}
	return p.Publisher.Publish(ctx, exchange, key, msg)
}

// A refusal is the system working as designed: a 503 is one warn line, a
// 429 one info line, neither with a stack trace. Only a 500 or a panic is
// an error, with its stack (issue 38: each refusal wrote an error line
// with a stack trace, and a warn line besides).
func TestRequestLinesAreLevelledByWhatHappened(t *testing.T) {
	sw := &switchPublisher{}
	h := setup(t, options{publisher: func(p Publisher) Publisher { sw.Publisher = p; return sw }})
	for _, tc := range []struct {
		name   string
		mode   int32
		send   func() response
		status int
		level  zapcore.Level
		msg    string
	}{
		{"503: the queue refused", 1, func() response { return h.do("POST", "/api/messages/send", notice("a@example.com")) },
			http.StatusServiceUnavailable, zapcore.WarnLevel, "request"},
		{"429: the cooldown", 0, func() response {
			require.Equal(t, http.StatusAccepted, h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login")).Status)
			h.logs.TakeAll()
			return h.do("POST", "/api/verification-codes", codeRequest("c@example.com", "login"))
		}, http.StatusTooManyRequests, zapcore.InfoLevel, "request"},
		{"400: a bad request", 0, func() response { return h.do("POST", "/api/messages/send", map[string]any{"messageType": "EMAIL"}) },
			http.StatusBadRequest, zapcore.InfoLevel, "request"},
		{"500: a panic", 2, func() response { return h.do("POST", "/api/messages/send", notice("p@example.com")) },
			http.StatusInternalServerError, zapcore.ErrorLevel, "panic in handler"},
	} {
		sw.mode.Store(tc.mode)
		h.logs.TakeAll()
		r := tc.send()
		require.Equal(t, tc.status, r.Status, "%s: %s", tc.name, r.Msg)
		var lines []string
		for _, e := range h.logs.TakeAll() {
			if e.Level < zapcore.InfoLevel {
				continue
			}
			lines = append(lines, e.Level.String()+" "+e.Message)
			require.Equal(t, e.Level >= zapcore.ErrorLevel, e.Stack != "", "%s: %q has a stack trace exactly when it is an error", tc.name, e.Message)
		}
		require.Equal(t, []string{tc.level.String() + " " + tc.msg}, lines, "%s: one line", tc.name)
	}
}

// An overload's refusals write a burst of lines per route and status and
// a line counting the rest, while the metric counts every one.
func TestRefusalFloodIsHeldBackAndCounted(t *testing.T) {
	sw := &switchPublisher{}
	sw.mode.Store(1)
	h := setup(t, options{publisher: func(p Publisher) Publisher { sw.Publisher = p; return sw },
		requestLog: logging.ThrottleConfig{Burst: 5, Interval: time.Hour}})
	const n = 60
	for i := range n {
		r := h.do("POST", "/api/messages/send", notice(fmt.Sprintf("f%d@example.com", i)))
		require.Equal(t, http.StatusServiceUnavailable, r.Status, r.Msg)
	}
	require.Equal(t, 5, h.logs.FilterMessage("request").Len(), "the burst")
	require.Contains(t, h.metricsText(), fmt.Sprintf(`msgpulse_http_requests_total{code="503",method="POST",route="/api/messages/send"} %d`, n))

	h.srv.Wait() // what a stop does: the summary still owed is written
	held := h.logs.FilterMessage(logging.HeldBack).All()
	require.Len(t, held, 1)
	require.Equal(t, zapcore.WarnLevel, held[0].Level)
	require.Equal(t, map[string]any{"of": "request", "route": "/api/messages/send", "status": int64(503), "held_back": int64(n - 5), "logged": int64(5), "interval": time.Hour},
		held[0].ContextMap())
}

// metricsText is what /metrics serves.
func (h *harness) metricsText() string {
	h.t.Helper()
	resp, err := http.Get(h.http.URL + "/metrics")
	require.NoError(h.t, err)
	defer func() { _ = resp.Body.Close() }()
	return readAll(h.t, resp)
}
