// Package otlptest is an OTLP/HTTP trace receiver for tests: an httptest
// server that decodes the protobuf export requests the real exporters send
// and keeps every span, flattened, with its process's service.name. It is
// for tests only and must never be imported by a program.
package otlptest

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	collectorpb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span.
type Span struct {
	Service      string
	TraceID      string
	SpanID       string
	ParentSpanID string
	Name         string
	Kind         tracepb.Span_SpanKind
	Attributes   map[string]string
	Events       []string // names, then each event's attributes as k=v
	StatusCode   tracepb.Status_StatusCode
	StatusMsg    string
	Resource     map[string]string
}

// Text is everything a span says, for checks that nothing secret is in it.
func (s Span) Text() string {
	return fmt.Sprint(s.Name, " ", s.Attributes, " ", s.Events, " ", s.StatusMsg, " ", s.Resource)
}

// Receiver collects spans.
type Receiver struct {
	URL string // base URL: set OTEL_EXPORTER_OTLP_ENDPOINT to it

	mu    sync.Mutex
	spans []Span
}

// New starts a receiver, closed at the end of the test.
func New(t testing.TB) *Receiver {
	r := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" {
		http.NotFound(w, req)
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var in collectorpb.ExportTraceServiceRequest
	if err := proto.Unmarshal(body, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var got []Span
	for _, rs := range in.GetResourceSpans() {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := Span{Service: res["service.name"], Resource: res, TraceID: hex.EncodeToString(sp.GetTraceId()),
					SpanID: hex.EncodeToString(sp.GetSpanId()), ParentSpanID: hex.EncodeToString(sp.GetParentSpanId()),
					Name: sp.GetName(), Kind: sp.GetKind(), Attributes: attrs(sp.GetAttributes()),
					StatusCode: sp.GetStatus().GetCode(), StatusMsg: sp.GetStatus().GetMessage()}
				for _, e := range sp.GetEvents() {
					s.Events = append(s.Events, e.GetName(), fmt.Sprint(attrs(e.GetAttributes())))
				}
				got = append(got, s)
			}
		}
	}
	r.mu.Lock()
	r.spans = append(r.spans, got...)
	r.mu.Unlock()
	out, _ := proto.Marshal(&collectorpb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.GetKey()] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.GetKey()] = fmt.Sprint(x.IntValue)
		case *commonpb.AnyValue_BoolValue:
			m[kv.GetKey()] = fmt.Sprint(x.BoolValue)
		case *commonpb.AnyValue_DoubleValue:
			m[kv.GetKey()] = fmt.Sprint(x.DoubleValue)
		default:
			m[kv.GetKey()] = v.String()
		}
	}
	return m
}

// Spans returns every span received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Trace returns the spans of one trace.
func (r *Receiver) Trace(traceID string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == traceID {
			out = append(out, s)
		}
	}
	return out
}

// IsAncestor reports whether the span ancestor is an ancestor of the span
// descendant within spans (one trace).
func IsAncestor(spans []Span, ancestor, descendant string) bool {
	byID := make(map[string]Span, len(spans))
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	cur, ok := byID[descendant]
	for hops := 0; ok && hops < len(spans); hops++ {
		if cur.ParentSpanID == ancestor {
			return true
		}
		cur, ok = byID[cur.ParentSpanID]
	}
	return false
}
