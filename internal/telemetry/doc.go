// Package telemetry is msgpulse's OpenTelemetry tracing: Setup turns it on
// for a process from the standard OTEL_* variables (api and consumer), and
// the helpers carry one trace from the HTTP request through the AMQP
// headers (W3C traceparent and tracestate), the delay queues, the relay,
// retries and dlq replay, to the provider call and the callback.
//
// Off (no OTLP endpoint set) it installs nothing: every helper returns after
// one atomic load and a nil check, allocating nothing, so the hot paths pay
// nothing measurable.
//
// It must never put a recipient, a code, a template variable's value or a
// key into a span name, attribute, event or status: spans carry only names
// from the topology (exchanges, queues, routing keys), task ids, provider
// names, routes and error classes. Errors are recorded by class, never by
// their text, which can quote a recipient (an SMTP 550, a vendor's answer).
package telemetry
