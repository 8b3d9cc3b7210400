package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/msgpulse/msgpulse/internal/mailcatcher"
	"github.com/msgpulse/msgpulse/internal/status"
	"github.com/msgpulse/msgpulse/internal/telemetry/otlptest"
	"github.com/msgpulse/msgpulse/internal/testenv"
	"github.com/msgpulse/msgpulse/pkg/client"
)

var traceresponseRE = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-0[01]$`)

// post sends a JSON request to the API as a caller would, with extra
// headers, and returns the answer's envelope data and traceresponse.
func (s *system) post(t *testing.T, path string, body any, header http.Header) (map[string]any, string) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(testenv.Context(t, 10*time.Second), http.MethodPost, s.apiURL+path, bytes.NewReader(b))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-API-Key", apiKey)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer func() { _ = resp.Body.Close() }()
	var env struct {
		Code int            `json:"code"`
		Msg  string         `json:"msg"`
		Data map[string]any `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&env))
	require.Lessf(t, resp.StatusCode, 300, "%s: %s", path, env.Msg)
	return env.Data, resp.Header.Get("traceresponse")
}

// One verification code, and one notice delayed by 2 s whose first send
// fails transiently, each make one trace that runs from the API's request
// through RabbitMQ (the delay queues, the relay, the retry) to the
// consumer's provider calls; the answers' traceresponse names it; no span
// says the recipient, the code, a variable's value or the key.
func TestOneTraceFromRequestToProviderAcrossProcesses(t *testing.T) {
	otlp := otlptest.New(t)
	s := newSystem(t, "OTEL_EXPORTER_OTLP_ENDPOINT="+otlp.URL, "OTEL_BSP_SCHEDULE_DELAY=100")
	s.api()
	cons := s.consumer("traced", "LOG_LEVEL=debug") // the per-message "sent" line is at debug
	const codeRcpt, noticeRcpt, replayRcpt = "trace-code@example.com", "trace-notice@example.com", "trace-replay@example.com"
	const title, content = "Quarterly-figures-7731", "Body-text-5522"
	var failed atomic.Int32
	var refuse atomic.Bool
	refuse.Store(true)
	s.mail.SetHook(func(e mailcatcher.Envelope) error {
		if e.Stage == mailcatcher.StageData && e.To[0] == noticeRcpt && failed.Add(1) == 1 {
			return mailcatcher.Reject(451, "4.3.0 try again later")
		}
		if e.Stage == mailcatcher.StageData && e.To[0] == replayRcpt && refuse.Load() {
			return mailcatcher.Reject(550, "5.1.1 mailbox "+replayRcpt+" unknown")
		}
		return nil
	})

	// The code: the API starts the trace.
	data, tr := s.post(t, "/api/verification-codes", client.VerificationCodeRequest{Channel: client.ChannelEmail, Recipient: codeRcpt, Purpose: "login"}, nil)
	m := traceresponseRE.FindStringSubmatch(tr)
	require.NotNil(t, m, "traceresponse %q", tr)
	codeTrace, codeTask := m[1], data["taskId"].(string)

	// The notice: the caller's own traceparent is honoured.
	const callerTrace, callerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	delay := 2.0
	sentAt := time.Now()
	data, tr = s.post(t, "/api/messages/send", client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: noticeRcpt,
		Variables: map[string]string{"title": title, "content": content}, DelaySeconds: &delay},
		http.Header{"Traceparent": {"00-" + callerTrace + "-" + callerSpan + "-01"}})
	m = traceresponseRE.FindStringSubmatch(tr)
	require.NotNil(t, m, "traceresponse %q", tr)
	require.Equal(t, callerTrace, m[1], "the answer continues the caller's trace")
	require.NotEqual(t, callerSpan, m[2], "traceresponse names the API's own span")
	noticeTask := data["taskId"].(string)

	testenv.WaitFor(t, 30*time.Second, "both mails", func() bool { return s.mailsTo(codeRcpt) == 1 && s.mailsTo(noticeRcpt) == 1 })
	took := time.Since(sentAt)
	require.GreaterOrEqual(t, took, 2*time.Second, "the notice waited its delay")
	require.Equal(t, int32(2), failed.Load(), "the notice's first send failed, the retry went through")
	var code string
	for _, msg := range s.mail.Messages() {
		if msg.To[0] == codeRcpt {
			code = strings.TrimSpace(msg.Subject[strings.LastIndex(msg.Subject, " "):])
		}
	}
	require.Regexp(t, `^[0-9]{6}$`, code)

	check := func(name, traceID, task string, providerCalls int) {
		t.Helper()
		var spans []otlptest.Span
		// A span is exported when it ends, so a delivery's process span,
		// which ends last (after its ack or reject), comes after its
		// children: wait for every attempt's.
		testenv.WaitFor(t, 15*time.Second, name+": spans of both processes", func() bool {
			spans = otlp.Trace(traceID)
			calls, processed, published := 0, 0, 0
			for _, sp := range spans {
				if sp.Service == "msgpulse-api" && sp.Kind == tracepb.Span_SPAN_KIND_PRODUCER {
					published++
				}
				if sp.Service == "msgpulse-consumer" && sp.Kind == tracepb.Span_SPAN_KIND_CLIENT && strings.HasPrefix(sp.Name, "send ") {
					calls++
				}
				if sp.Service == "msgpulse-consumer" && sp.Kind == tracepb.Span_SPAN_KIND_CONSUMER && strings.HasPrefix(sp.Name, "process ") {
					processed++
				}
			}
			return published == 1 && calls == providerCalls && processed == providerCalls
		})
		var publish *otlptest.Span
		services := map[string]int{}
		for i, sp := range spans {
			services[sp.Service]++
			if sp.Service == "msgpulse-api" && sp.Kind == tracepb.Span_SPAN_KIND_PRODUCER {
				require.Nil(t, publish, "one publish by the API")
				publish = &spans[i]
				require.Equal(t, "rabbitmq", sp.Attributes["messaging.system"])
				require.Equal(t, "send", sp.Attributes["messaging.operation.type"])
				require.Equal(t, task, sp.Attributes["messaging.message.id"])
				require.NotEmpty(t, sp.Attributes["messaging.destination.name"])
			}
		}
		require.NotNil(t, publish, "%s: the API's publish span", name)
		var calls []string
		for _, sp := range spans {
			switch {
			case sp.Kind == tracepb.Span_SPAN_KIND_CLIENT && strings.HasPrefix(sp.Name, "send "):
				require.True(t, otlptest.IsAncestor(spans, publish.SpanID, sp.SpanID), "%s: the API's publish is an ancestor of %s", name, sp.Name)
				calls = append(calls, sp.StatusCode.String())
			case sp.Kind == tracepb.Span_SPAN_KIND_CONSUMER && strings.HasPrefix(sp.Name, "process "):
				require.Equal(t, "process", sp.Attributes["messaging.operation.type"])
				require.Equal(t, task, sp.Attributes["messaging.message.id"])
			}
		}
		// Every span about this message, in either process, is in this trace.
		for _, sp := range otlp.Spans() {
			if sp.Attributes["messaging.message.id"] == task {
				require.Equal(t, traceID, sp.TraceID, "%s: %s is in another trace", name, sp.Name)
			}
		}
		t.Logf("%s: trace %s: %d spans %v; provider calls %v", name, traceID, len(spans), services, calls)
		require.Positive(t, services["msgpulse-api"])
		require.Positive(t, services["msgpulse-consumer"])
	}
	check("code", codeTrace, codeTask, 1)
	check("notice", callerTrace, noticeTask, 2)

	// A message refused for good is dead-lettered; `dlq replay` sends it
	// again, in the same trace.
	data, tr = s.post(t, "/api/messages/send", client.SendRequest{MessageType: client.MessageEmail, TemplateCode: "notice", Recipient: replayRcpt,
		Variables: map[string]string{"title": title, "content": content}}, nil)
	m = traceresponseRE.FindStringSubmatch(tr)
	require.NotNil(t, m, "traceresponse %q", tr)
	replayTrace, replayTask := m[1], data["taskId"].(string)
	statuses, err := status.New(s.redis.Client, status.Config{Prefix: s.redis.Prefix})
	require.NoError(t, err)
	// Failed is recorded as the consumer rejects it; the broker moves it
	// to the DLQ a moment later (a quorum queue's at-least-once
	// dead-lettering takes its own round), and the replay reads the DLQ.
	testenv.WaitFor(t, 15*time.Second, "dead-lettered", func() bool {
		rec, err := statuses.Get(context.Background(), replayTask)
		return err == nil && rec.Status == status.Failed && s.depth("queue.mail.dlq") > 0
	})
	refuse.Store(false)
	code2, out := s.run("dlq", "replay", "--channel", "mail", "--id", replayTask)
	require.Equal(t, 0, code2, out)
	testenv.WaitFor(t, 15*time.Second, "the replayed mail", func() bool { return s.mailsTo(replayRcpt) == 1 })
	check("replay", replayTrace, replayTask, 2)
	var rejects int
	for _, sp := range otlp.Trace(replayTrace) {
		if strings.HasPrefix(sp.Name, "reject ") {
			rejects++
		}
	}
	require.Equal(t, 1, rejects, "the first attempt was rejected to the DLQ")

	// Log lines about a message carry its trace id.
	for _, tid := range []string{codeTrace, callerTrace, replayTrace} {
		require.Regexp(t, `"msg":"sent".*"trace_id":"`+tid+`"`, cons.Output())
	}
	require.Regexp(t, `"msg":"send failed; retry scheduled".*"trace_id":"`+callerTrace+`"`, cons.Output())

	// Every answer carries traceresponse: errors and probes too.
	for _, tc := range []struct {
		path, key string
		code      int
	}{{"/api/messages/" + codeTask, "wrong-key", http.StatusUnauthorized}, {"/api/messages/" + codeTask, apiKey, http.StatusOK},
		{"/api/nothing-here", apiKey, http.StatusNotFound}, {"/healthz", "", http.StatusOK}, {"/metrics", "", http.StatusOK}} {
		req, err := http.NewRequestWithContext(testenv.Context(t, 5*time.Second), http.MethodGet, s.apiURL+tc.path, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", tc.key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, tc.code, resp.StatusCode, tc.path)
		require.Regexp(t, traceresponseRE, resp.Header.Get("traceresponse"), "%s answered %d", tc.path, tc.code)
	}

	// The status record names the trace (the console shows it).
	for task, want := range map[string]string{codeTask: codeTrace, noticeTask: callerTrace, replayTask: replayTrace} {
		rec, err := statuses.Get(context.Background(), task)
		require.NoError(t, err)
		require.Equal(t, want, rec.TraceID)
	}

	// What a span must never hold.
	for _, sp := range otlp.Spans() {
		text := sp.Text()
		for _, secret := range []string{codeRcpt, noticeRcpt, replayRcpt, "trace-", title, content, apiKey, code} {
			require.NotContains(t, text, secret, "span %q of %s", sp.Name, sp.Service)
		}
	}
	t.Logf("notice delivered %v after the request (delay 2s, one transient failure); %d spans in all", took.Round(time.Millisecond), len(otlp.Spans()))
}
