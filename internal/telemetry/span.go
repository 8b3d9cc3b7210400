package telemetry

import (
	"context"
	"net/http"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Span is a span that may not exist: its zero value (tracing off) does
// nothing, so callers need no checks of their own.
type Span struct{ s trace.Span }

// End ends the span.
func (s Span) End() {
	if s.s != nil {
		s.s.End()
	}
}

// Fail marks the span failed with class, a word such as "transient" or
// "permanent". It takes a class, not an error: an error's text can quote a
// recipient.
func (s Span) Fail(class string) {
	if s.s != nil {
		s.s.SetStatus(codes.Error, class)
	}
}

// Rename gives the span the name its outcome decided (ack, reject...).
func (s Span) Rename(name string) {
	if s.s != nil {
		s.s.SetName(name)
	}
}

// Set adds a string attribute; only names and ids (see the package doc).
func (s Span) Set(key, value string) {
	if s.s != nil {
		s.s.SetAttributes(attribute.String(key, value))
	}
}

// start starts a span of kind under ctx's span; a no-op while tracing is
// off, so the callers build no attributes they would throw away.
func start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, Span) {
	t := on()
	if t == nil {
		return ctx, Span{}
	}
	ctx, s := t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
	return ctx, Span{s}
}

// Start starts an internal span (claim, render) under ctx's span.
func Start(ctx context.Context, name string) (context.Context, Span) {
	return start(ctx, name, trace.SpanKindInternal)
}

// StartProviderCall starts the client span of one provider call (an SMTP
// transaction, a vendor's HTTP request), named after the provider.
func StartProviderCall(ctx context.Context, channel, provider string) (context.Context, Span) {
	if !Enabled() {
		return ctx, Span{}
	}
	return start(ctx, "send "+provider, trace.SpanKindClient,
		attribute.String("msgpulse.channel", channel), attribute.String("msgpulse.provider", provider))
}

// StartPublish starts the producer span of one publish to exchange and
// puts its context into msg's headers, so the consumer's spans join the
// trace. Call it where the message is built, before it is published.
func StartPublish(ctx context.Context, exchange, routingKey string, msg *amqp.Publishing) (context.Context, Span) {
	if !Enabled() {
		return ctx, Span{}
	}
	ctx, s := start(ctx, "publish "+exchange, trace.SpanKindProducer,
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName("publish"),
		semconv.MessagingDestinationName(exchange),
		semconv.MessagingRabbitMQDestinationRoutingKey(routingKey),
		semconv.MessagingMessageID(msg.MessageId))
	if msg.Headers == nil {
		msg.Headers = amqp.Table{}
	}
	prop.Inject(ctx, tableCarrier(msg.Headers))
	return ctx, s
}

// StartProcess starts the consumer span of one delivery from queue, as a
// child of the span whose context the message carries (the API's publish,
// or the retry's), so every attempt joins the request's trace.
func StartProcess(ctx context.Context, queue string, d *amqp.Delivery) (context.Context, Span) {
	if !Enabled() {
		return ctx, Span{}
	}
	return start(prop.Extract(ctx, tableCarrier(d.Headers)), "process "+queue, trace.SpanKindConsumer,
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName("process"),
		semconv.MessagingDestinationName(queue),
		semconv.MessagingRabbitMQDestinationRoutingKey(d.RoutingKey),
		semconv.MessagingMessageID(d.MessageId),
		semconv.MessagingRabbitMQMessageDeliveryTag(int(d.DeliveryTag)))
}

// StartSettle starts the span of a delivery's outcome; Settled names it.
// Settlement is a call to the broker: kind client, as the messaging
// conventions have it.
func StartSettle(ctx context.Context, queue, messageID string) (context.Context, Span) {
	if !Enabled() {
		return ctx, Span{}
	}
	return start(ctx, "settle "+queue, trace.SpanKindClient,
		semconv.MessagingSystemRabbitMQ,
		semconv.MessagingOperationTypeSettle,
		semconv.MessagingDestinationName(queue),
		semconv.MessagingMessageID(messageID))
}

// Settled names a settle span after what was done: ack, reject or requeue.
func (s Span) Settled(operation, queue string) {
	if s.s != nil {
		s.s.SetName(operation + " " + queue)
		s.s.SetAttributes(semconv.MessagingOperationName(operation))
	}
}

// Parent is the span context to hand to work done later, elsewhere (a
// callback queued for a worker); it is a value, free to copy.
func Parent(ctx context.Context) trace.SpanContext {
	if on() == nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(ctx)
}

// StartCallback starts the client span of one callback POST under parent
// and puts its context into the request's headers, so the caller's server
// can join the trace too.
func StartCallback(parent trace.SpanContext, req *http.Request) (context.Context, Span) {
	t := on()
	if t == nil || !parent.IsValid() {
		return req.Context(), Span{}
	}
	ctx := trace.ContextWithRemoteSpanContext(req.Context(), parent)
	ctx, s := t.Start(ctx, "callback", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("http.request.method", req.Method)))
	prop.Inject(ctx, propagationHeader(req.Header))
	return ctx, Span{s}
}

// TraceID is ctx's trace id in hex, or "" when there is none.
func TraceID(ctx context.Context) string {
	if on() == nil {
		return ""
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		return sc.TraceID().String()
	}
	return ""
}

// LogField is the trace_id field of a log line about ctx's message; it is
// zap.Skip() when there is no trace, so lines keep their shape.
func LogField(ctx context.Context) zap.Field {
	if id := TraceID(ctx); id != "" {
		return zap.String("trace_id", id)
	}
	return zap.Skip()
}

// StartServer starts the server span of one HTTP request, a child of the
// caller's traceparent when it sent a valid one, and sets the W3C Trace
// Context Level 2 traceresponse header (00-traceid-spanid-flags) on the
// answer before anything is written, so every answer carries it.
func StartServer(ctx context.Context, method string, in, out http.Header) (context.Context, Span) {
	t := on()
	if t == nil {
		return ctx, Span{}
	}
	ctx = prop.Extract(ctx, propagation.HeaderCarrier(in))
	ctx, s := t.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("http.request.method", method)))
	sc := s.SpanContext()
	out.Set("traceresponse", "00-"+sc.TraceID().String()+"-"+sc.SpanID().String()+"-"+sc.TraceFlags().String())
	return ctx, Span{s}
}

// Served names a server span after its route (the pattern, never the path:
// a path holds ids) and records the answer's status.
func (s Span) Served(method, route string, status int) {
	if s.s == nil {
		return
	}
	s.s.SetName(method + " " + route)
	s.s.SetAttributes(semconv.HTTPRoute(route), semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		s.s.SetStatus(codes.Error, http.StatusText(status))
	}
}

// SetInt adds an integer attribute (a status code, a count).
func (s Span) SetInt(key string, value int) {
	if s.s != nil {
		s.s.SetAttributes(attribute.Int(key, value))
	}
}

// HeaderField is the trace_id field of a log line about a message, read
// from its traceparent header: for a process that does not trace itself
// (dlq) or a message it has not started a span for. zap.Skip() without one.
func HeaderField(h amqp.Table) zap.Field {
	// traceparent: 00-<32 hex trace id>-<16 hex span id>-<2 hex flags>
	if tp, ok := h["traceparent"].(string); ok && len(tp) == 55 && tp[2] == '-' && tp[35] == '-' {
		if id := tp[3:35]; id != "00000000000000000000000000000000" {
			return zap.String("trace_id", id)
		}
	}
	return zap.Skip()
}

// ParentField is the trace_id field of a log line about work handed on
// with Parent (a callback).
func ParentField(sc trace.SpanContext) zap.Field {
	if sc.IsValid() {
		return zap.String("trace_id", sc.TraceID().String())
	}
	return zap.Skip()
}
