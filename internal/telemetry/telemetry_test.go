package telemetry

import (
	"context"
	"net/http"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
)

// Off, the helpers on the hot paths allocate nothing and change nothing:
// tracing that nobody turned on must cost nothing measurable.
func TestOffAllocatesNothing(t *testing.T) {
	require.False(t, Enabled())
	ctx := context.Background()
	pub := amqp.Publishing{MessageId: "t1"}
	del := &amqp.Delivery{MessageId: "t1", Headers: amqp.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
	in, out := http.Header{}, http.Header{}
	allocs := testing.AllocsPerRun(1000, func() {
		c, s := StartPublish(ctx, "x.mail", "mail.high", &pub)
		s.Fail("transient")
		s.End()
		c, s = StartProcess(c, "queue.mail", del)
		_, cs := Start(c, "claim")
		cs.End()
		_, ps := StartProviderCall(c, "mail", "smtp")
		ps.End()
		_, ss := StartSettle(c, "queue.mail", "t1")
		ss.Settled("ack", "queue.mail")
		ss.End()
		s.End()
		_, hs := StartServer(ctx, http.MethodPost, in, out)
		hs.Served(http.MethodPost, "/api/messages/send", 202)
		hs.End()
		_ = LogField(c)
		_ = Parent(c)
	})
	require.Zero(t, allocs)
	require.Nil(t, pub.Headers, "no headers added while off")
	require.Empty(t, out, "no traceresponse while off")
}

func TestSetupOffWithoutEndpoint(t *testing.T) {
	stop, err := Setup(context.Background(), Config{ServiceName: "x"}, zap.NewNop())
	require.NoError(t, err)
	stop()
	require.False(t, Enabled())
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg Config
		ok  bool
	}{
		{Config{Endpoint: "http://h:4318", ServiceName: "a"}, true},
		{Config{Endpoint: "http://h:4317", Protocol: GRPC, ServiceName: "a"}, true},
		{Config{Endpoint: "http://h:4318", Protocol: "http/json", ServiceName: "a"}, false},
		{Config{Endpoint: "http://h:4318"}, false},
	} {
		err := tc.cfg.Validate()
		require.Equal(t, tc.ok, err == nil, "%+v: %v", tc.cfg, err)
	}
}

func BenchmarkOffPublishAndProcess(b *testing.B) {
	ctx := context.Background()
	pub := amqp.Publishing{MessageId: "t1"}
	del := &amqp.Delivery{MessageId: "t1"}
	b.ReportAllocs()
	for b.Loop() {
		c, s := StartPublish(ctx, "x.mail", "mail.high", &pub)
		s.End()
		c, s = StartProcess(c, "queue.mail", del)
		_ = LogField(c)
		s.End()
	}
}

func TestHeaderField(t *testing.T) {
	for _, tc := range []struct {
		h    amqp.Table
		want string
	}{
		{amqp.Table{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, "4bf92f3577b34da6a3ce929d0e0e4736"},
		{amqp.Table{"traceparent": "00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, ""},
		{amqp.Table{"traceparent": "garbage"}, ""},
		{amqp.Table{"traceparent": []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}, ""},
		{nil, ""},
	} {
		f := HeaderField(tc.h)
		if tc.want == "" {
			require.Equal(t, zap.Skip(), f)
		} else {
			require.Equal(t, zap.String("trace_id", tc.want), f)
		}
	}
}

// The same calls as BenchmarkOffPublishAndProcess minus the helpers: the
// difference is what tracing off costs a message.
func BenchmarkOffBaseline(b *testing.B) {
	ctx := context.Background()
	pub := amqp.Publishing{MessageId: "t1"}
	del := &amqp.Delivery{MessageId: "t1"}
	b.ReportAllocs()
	for b.Loop() {
		_, _ = ctx, &pub
		_ = del
	}
}
