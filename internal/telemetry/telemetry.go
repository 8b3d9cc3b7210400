package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL that the Go exporters speak.
const (
	HTTPProtobuf = "http/protobuf"
	GRPC         = "grpc"
)

// Config says whether and how a process exports traces. The exporters and
// the SDK read the rest of the standard variables themselves
// (OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT, _INSECURE, OTEL_TRACES_SAMPLER and
// _ARG, OTEL_BSP_*, OTEL_RESOURCE_ATTRIBUTES), so their meaning is exactly
// the specification's.
type Config struct {
	Endpoint       string // OTEL_EXPORTER_OTLP_ENDPOINT
	TracesEndpoint string // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
	Protocol       string // http/protobuf (default) or grpc
	ServiceName    string // OTEL_SERVICE_NAME
}

// Enabled reports whether an endpoint is set: tracing is on only then.
func (c Config) Enabled() bool { return c.Endpoint != "" || c.TracesEndpoint != "" }

// Validate fills defaults and checks the configuration.
func (c *Config) Validate() error {
	c.Protocol = cmp.Or(c.Protocol, HTTPProtobuf)
	if c.Protocol != HTTPProtobuf && c.Protocol != GRPC {
		return fmt.Errorf("telemetry: protocol %q: want %s or %s", c.Protocol, HTTPProtobuf, GRPC)
	}
	if c.ServiceName == "" {
		return errors.New("telemetry: ServiceName is required")
	}
	return nil
}

// flushTimeout bounds the export of the last spans at exit: a dead
// collector must not hold a shutdown up.
const flushTimeout = 5 * time.Second

// state is what Setup installed; nil while tracing is off.
type state struct {
	tracer trace.Tracer
}

var (
	current atomic.Pointer[state]
	prop    = propagation.TraceContext{}
)

// on returns the tracer, or nil when tracing is off: the one check every
// helper makes before doing anything.
func on() trace.Tracer {
	if s := current.Load(); s != nil {
		return s.tracer
	}
	return nil
}

// Enabled reports whether Setup turned tracing on in this process.
func Enabled() bool { return current.Load() != nil }

// Setup turns tracing on when cfg names an endpoint and returns the
// function that flushes and stops it: defer it first thing after Setup so
// that it runs last, when every span has ended; it waits up to
// flushTimeout for the collector. Off, it installs nothing and the
// returned function does nothing.
func Setup(ctx context.Context, cfg Config, log *zap.Logger) (func(), error) {
	nothing := func() {}
	if !cfg.Enabled() {
		return nothing, nil
	}
	if err := cfg.Validate(); err != nil {
		return nothing, err
	}
	var client otlptrace.Client
	if cfg.Protocol == GRPC {
		client = otlptracegrpc.NewClient()
	} else {
		client = otlptracehttp.NewClient()
	}
	// New does not dial: an unreachable collector costs dropped spans
	// (counted by the SDK's own error handler below), never a failed start.
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nothing, fmt.Errorf("telemetry: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.ServiceName)))
	if err != nil {
		return nothing, fmt.Errorf("telemetry: resource: %w", err)
	}
	// The sampler comes from OTEL_TRACES_SAMPLER (default parentbased_always_on,
	// so a caller's sampled flag is honoured) and the batching from OTEL_BSP_*.
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(prop)
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed; spans are dropped", zap.Error(err))
	}))
	current.Store(&state{tracer: tp.Tracer("github.com/msgpulse/msgpulse")})
	log.Info("tracing on", zap.String("protocol", cfg.Protocol), zap.String("service", cfg.ServiceName))
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
		defer cancel()
		if err := tp.Shutdown(ctx); err != nil {
			log.Warn("tracing: spans still buffered at exit were dropped", zap.Error(err))
		}
		current.Store(nil)
	}, nil
}
