package config

import (
	"github.com/msgpulse/msgpulse/internal/envconf"
	"github.com/msgpulse/msgpulse/internal/telemetry"
)

// loadTelemetry reads the OpenTelemetry variables api and consumer share.
// Only the endpoint, protocol and service name are read here; the OTLP
// exporter and the SDK read the others themselves (listed so that -h and
// docs/commands.md name them), so they mean exactly what the specification
// says.
func loadTelemetry(l *envconf.Loader, service string) telemetry.Config {
	c := telemetry.Config{
		Endpoint:       l.String("OTEL_EXPORTER_OTLP_ENDPOINT", "", "OTLP collector base URL for traces (http/protobuf: http://host:4318, /v1/traces is appended; grpc: http://host:4317); tracing is on only when this or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, and off costs nothing"),
		TracesEndpoint: l.String("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "", "OTLP URL for traces only, used as is (overrides OTEL_EXPORTER_OTLP_ENDPOINT)"),
		ServiceName:    l.String("OTEL_SERVICE_NAME", service, "service.name of this process's spans"),
	}
	protocols := []string{telemetry.HTTPProtobuf, telemetry.GRPC}
	c.Protocol = l.Enum("OTEL_EXPORTER_OTLP_PROTOCOL", telemetry.HTTPProtobuf, protocols, "OTLP transport")
	if p := l.String("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "", "OTLP transport for traces only (overrides OTEL_EXPORTER_OTLP_PROTOCOL)"); p != "" {
		if p != telemetry.HTTPProtobuf && p != telemetry.GRPC {
			l.Fail("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", p, "want %s or %s", telemetry.HTTPProtobuf, telemetry.GRPC)
		}
		c.Protocol = p
	}
	// Read by the SDK; documented here.
	l.String("OTEL_TRACES_SAMPLER", "parentbased_always_on", "sampler (always_on, always_off, traceidratio, parentbased_*): the parentbased ones follow a caller's traceparent")
	l.String("OTEL_TRACES_SAMPLER_ARG", "", "the sampler's argument (traceidratio: the ratio, e.g. 0.1)")
	l.String("OTEL_BSP_SCHEDULE_DELAY", "5000", "milliseconds between span batch exports")
	l.String("OTEL_BSP_EXPORT_TIMEOUT", "30000", "milliseconds one export may take")
	l.String("OTEL_BSP_MAX_QUEUE_SIZE", "2048", "spans buffered for export; more are dropped")
	l.String("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512", "spans per export")
	return c
}
