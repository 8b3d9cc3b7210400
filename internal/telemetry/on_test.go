package telemetry

import (
	"context"
	"net"
	"net/http"
	"sync"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/msgpulse/msgpulse/internal/telemetry/otlptest"
)

type grpcReceiver struct {
	collectorpb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	names []string
}

func (g *grpcReceiver) Export(_ context.Context, req *collectorpb.ExportTraceServiceRequest) (*collectorpb.ExportTraceServiceResponse, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				g.names = append(g.names, s.GetName())
			}
		}
	}
	return &collectorpb.ExportTraceServiceResponse{}, nil
}

// exercise publishes and consumes one message in-process: the consumer's
// span must be the child of the publish, through the AMQP headers alone.
func exercise(t *testing.T) {
	pub := amqp.Publishing{MessageId: "task-1"}
	ctx, srv := StartServer(context.Background(), http.MethodPost, http.Header{}, http.Header{})
	_, ps := StartPublish(ctx, "x.mail", "mail.high", &pub)
	ps.End()
	srv.End()
	require.Contains(t, pub.Headers, "traceparent")
	del := &amqp.Delivery{MessageId: "task-1", Headers: pub.Headers}
	pctx, s := StartProcess(context.Background(), "queue.mail", del)
	require.Equal(t, TraceID(ctx), TraceID(pctx), "the consumer joins the publisher's trace")
	s.End()
}

func TestOnOverGRPC(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	recv := &grpcReceiver{}
	gs := grpc.NewServer()
	collectorpb.RegisterTraceServiceServer(gs, recv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+lis.Addr().String())
	stop, err := Setup(context.Background(), Config{Endpoint: "http://" + lis.Addr().String(), Protocol: GRPC, ServiceName: "grpc-test"}, zap.NewNop())
	require.NoError(t, err)
	require.True(t, Enabled())
	exercise(t)
	stop() // flushes
	require.False(t, Enabled())
	recv.mu.Lock()
	defer recv.mu.Unlock()
	require.ElementsMatch(t, []string{"POST", "publish x.mail", "process queue.mail"}, recv.names)
}

func TestOnOverHTTP(t *testing.T) {
	recv := otlptest.New(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL)
	stop, err := Setup(context.Background(), Config{Endpoint: recv.URL, ServiceName: "http-test"}, zap.NewNop())
	require.NoError(t, err)
	exercise(t)
	stop()
	spans := recv.Spans()
	require.Len(t, spans, 3)
	for _, s := range spans {
		require.Equal(t, "http-test", s.Service)
	}
}
