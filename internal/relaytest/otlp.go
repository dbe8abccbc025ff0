package relaytest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	collector "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	common "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// Span is one span an OTLP receiver got, with its ids in lowercase hex as a traceparent
// writes them.
type Span struct {
	Service              string         // the resource's service.name
	Resource             map[string]any // every attribute of the resource
	Scope                string         // the instrumentation scope's name
	TraceID, SpanID      string
	Parent               string // the parent span's id; empty for a root
	Name                 string
	Kind                 tracepb.Span_SpanKind
	Start, End           time.Time
	Attrs                map[string]any // string, int64, float64 or bool
	Links                []SpanLink
	StatusCode           tracepb.Status_StatusCode
	StatusMessage        string
	DroppedLinks, Events int
}

// SpanLink is a link of a Span.
type SpanLink struct{ TraceID, SpanID string }

// spanStore keeps what a receiver decoded.
type spanStore struct {
	mu       sync.Mutex
	spans    []Span
	requests int
}

// Spans returns a copy of the spans received so far, in the order received.
func (s *spanStore) Spans() []Span {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Span(nil), s.spans...)
}

// Named returns the spans received so far with that name.
func (s *spanStore) Named(name string) []Span {
	var out []Span
	for _, sp := range s.Spans() {
		if sp.Name == name {
			out = append(out, sp)
		}
	}
	return out
}

// Requests is the number of export requests decoded.
func (s *spanStore) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

func (s *spanStore) add(req *collector.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.GetResourceSpans() {
		service, _ := value(attrOf(rs.GetResource().GetAttributes(), "service.name")).(string)
		res := map[string]any{}
		for _, kv := range rs.GetResource().GetAttributes() {
			res[kv.GetKey()] = value(kv.GetValue())
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				s := decodeSpan(service, ss.GetScope().GetName(), sp)
				s.Resource = res
				got = append(got, s)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.spans = append(s.spans, got...)
	s.requests++
}

func decodeSpan(service, scope string, sp *tracepb.Span) Span {
	out := Span{Service: service, Scope: scope, TraceID: hex.EncodeToString(sp.GetTraceId()),
		SpanID: hex.EncodeToString(sp.GetSpanId()), Parent: hex.EncodeToString(sp.GetParentSpanId()), Name: sp.GetName(),
		Kind: sp.GetKind(), Start: time.Unix(0, int64(sp.GetStartTimeUnixNano())), End: time.Unix(0, int64(sp.GetEndTimeUnixNano())),
		Attrs: map[string]any{}, StatusCode: sp.GetStatus().GetCode(), StatusMessage: sp.GetStatus().GetMessage(),
		DroppedLinks: int(sp.GetDroppedLinksCount()), Events: len(sp.GetEvents())}
	for _, kv := range sp.GetAttributes() {
		out.Attrs[kv.GetKey()] = value(kv.GetValue())
	}
	for _, l := range sp.GetLinks() {
		out.Links = append(out.Links, SpanLink{TraceID: hex.EncodeToString(l.GetTraceId()), SpanID: hex.EncodeToString(l.GetSpanId())})
	}
	return out
}

func attrOf(kvs []*common.KeyValue, key string) *common.AnyValue {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func value(v *common.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *common.AnyValue_StringValue:
		return x.StringValue
	case *common.AnyValue_IntValue:
		return x.IntValue
	case *common.AnyValue_DoubleValue:
		return x.DoubleValue
	case *common.AnyValue_BoolValue:
		return x.BoolValue
	}
	return nil
}

// OTLPReceiver is a real OTLP/HTTP receiver: an HTTP server that takes what an OTLP exporter
// posts to /v1/traces (protobuf, gzip or not), decodes it with the OTLP protobuf definitions
// and keeps its spans, answering as a collector does. Its URL is the base URL an exporter is
// given (OTEL_EXPORTER_OTLP_ENDPOINT, --otel-endpoint).
type OTLPReceiver struct {
	*httptest.Server
	spanStore
}

// NewOTLPReceiver starts an OTLP/HTTP receiver.
func NewOTLPReceiver() *OTLPReceiver {
	r := &OTLPReceiver{}
	r.Server = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

func (r *OTLPReceiver) serve(w http.ResponseWriter, req *http.Request) {
	switch {
	case req.URL.Path != "/v1/traces":
		http.Error(w, "not an OTLP traces path", http.StatusNotFound)
		return
	case req.Method != http.MethodPost:
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	case req.Header.Get("Content-Type") != "application/x-protobuf":
		http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	body := io.Reader(req.Body)
	if req.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	var er collector.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &er); err != nil {
		http.Error(w, fmt.Sprintf("not an ExportTraceServiceRequest: %v", err), http.StatusBadRequest)
		return
	}
	r.add(&er)
	out, _ := proto.Marshal(&collector.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// OTLPGRPCReceiver is a real OTLP/gRPC receiver: the collector's TraceService on a gRPC server
// of its own, keeping the spans exported to it.
type OTLPGRPCReceiver struct {
	spanStore
	collector.UnimplementedTraceServiceServer
	// URL is the base URL an exporter is given: http://127.0.0.1:<port> (no TLS).
	URL  string
	srv  *grpc.Server
	done chan struct{}
}

// NewOTLPGRPCReceiver starts an OTLP/gRPC receiver on a free loopback port.
func NewOTLPGRPCReceiver() (*OTLPGRPCReceiver, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &OTLPGRPCReceiver{URL: "http://" + ln.Addr().String(), srv: grpc.NewServer(), done: make(chan struct{})}
	collector.RegisterTraceServiceServer(r.srv, r)
	go func() {
		defer close(r.done)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

// Export implements the TraceService.
func (r *OTLPGRPCReceiver) Export(_ context.Context, req *collector.ExportTraceServiceRequest) (*collector.ExportTraceServiceResponse, error) {
	r.add(req)
	return &collector.ExportTraceServiceResponse{}, nil
}

// Close stops the server and waits for it.
func (r *OTLPGRPCReceiver) Close() {
	r.srv.Stop()
	<-r.done
}
