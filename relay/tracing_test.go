package relay

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/tracing"
	"github.com/outbox-relay/outbox-relay/internal/tracing/otlp"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// traced starts the SDK exporting to a real OTLP/HTTP receiver, as `run --otel-endpoint` does.
func traced(t *testing.T) (*relaytest.OTLPReceiver, *trace.TracerProvider) {
	t.Helper()
	recv := relaytest.NewOTLPReceiver()
	t.Cleanup(recv.Close)
	tp, err := otlp.Start(context.Background(), otlp.Config{Endpoint: recv.URL, Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return recv, tp
}

// waitSpans flushes the provider until the receiver holds n spans named name (the batch
// processor would export them within 5 s by itself), and returns them.
func waitSpans(t *testing.T, tp *trace.TracerProvider, recv *relaytest.OTLPReceiver, name string, n int) []relaytest.Span {
	t.Helper()
	var got []relaytest.Span
	waitFor(t, 20*time.Second, fmt.Sprintf("%d %q spans exported", n, name), func() bool {
		_ = tp.ForceFlush(context.Background())
		got = recv.Named(name)
		return len(got) >= n
	})
	return got
}

// seen is a request as the receiver got it: the event, its X-Attempt and its traceparent.
type seen struct {
	id, trace string
	attempt   int
}

// recordRequests records every request's event, attempt and traceparent, and answers fail's
// status instead of 200 when it returns one.
func recordRequests(r *relaytest.Receiver, fail func(relaytest.Delivery) int) func() []seen {
	var mu sync.Mutex
	var all []seen
	r.SetFailEvents(func(ds []relaytest.Delivery) int {
		mu.Lock()
		defer mu.Unlock()
		code := 0
		for _, d := range ds {
			all = append(all, seen{d.ID, d.Trace, d.Attempt})
			if c := fail(d); c != 0 {
				code = c
			}
		}
		return code
	})
	return func() []seen {
		mu.Lock()
		defer mu.Unlock()
		return append([]seen(nil), all...)
	}
}

// With a TracerProvider, one transaction of two events, one written with the producer's
// traceparent and one without, makes a decode span and an attempt span per attempt: the first
// event's attempts are children of the stored traceparent's span (its trace kept) and link to
// the decode span; the second's are children of the decode span; each request carries its
// attempt's own traceparent; a failed then a successful attempt are two spans, each with its
// attempt number, status code and outcome.
func TestTracesFromCommitToAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	otlpRecv, tp := traced(t)
	const producerTrace, producerSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	stored := "00-" + producerTrace + "-" + producerSpan + "-01"
	var withTrace string
	requests := recordRequests(e.recv, func(d relaytest.Delivery) int {
		if d.ID == withTrace && d.Attempt == 1 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	e.start(func(c *Config) { c.TracerProvider = tp })

	ctx := context.Background()
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		a, err := outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "1", EventType: "order.created",
			Payload: map[string]int{"seq": 1}, TraceParent: stored, TenantID: "t1"})
		withTrace = a.String()
		if err != nil {
			return err
		}
		_, err = outbox.Enqueue(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "2", EventType: "order.created",
			Payload: map[string]int{"seq": 1}})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	decode := waitSpans(t, tp, otlpRecv, "decode transaction", 1)[0]
	attempts := waitSpans(t, tp, otlpRecv, "deliver event", 3)

	// The decode span: its transaction's two events and commit LSN, which is the first half of
	// every X-Event-Sequence of the transaction.
	if decode.Attrs[tracing.KeyTxEvents] != int64(2) || decode.Parent != "" || decode.Kind != tracepb.Span_SPAN_KIND_CONSUMER ||
		decode.Service != "outbox-relay" || decode.Attrs[tracing.KeyPipeline] != "default" {
		t.Fatalf("decode span %+v: want a root consumer span of 2 events in pipeline default, service outbox-relay", decode)
	}
	var byEvent = map[string][]relaytest.Span{}
	for _, s := range attempts {
		id, _ := s.Attrs[tracing.KeyEventID].(string)
		byEvent[id] = append(byEvent[id], s)
	}
	a := byEvent[withTrace]
	if len(a) != 2 || len(byEvent) != 2 {
		t.Fatalf("attempt spans by event: %d for the event with a traceparent (want 2: a failure, then a success), %d events (want 2)",
			len(a), len(byEvent))
	}
	var b []relaytest.Span
	for id, s := range byEvent {
		if id != withTrace {
			b = s
		}
	}
	if len(b) != 1 {
		t.Fatalf("%d attempt spans for the event without a traceparent, want 1", len(b))
	}
	seq, _ := a[0].Attrs[tracing.KeyEventSequence].(string)
	if lsn, _ := decode.Attrs[tracing.KeyTxCommitLSN].(string); len(seq) != 25 || !sameLSN(t, lsn, seq[:16]) {
		t.Errorf("decode span's commit LSN %v does not match the event's X-Event-Sequence %q", decode.Attrs[tracing.KeyTxCommitLSN], seq)
	}

	// The event with a stored traceparent: both attempts in the producer's trace, children of its
	// span, linked to the decode span.
	for _, s := range a {
		if s.TraceID != producerTrace || s.Parent != producerSpan {
			t.Errorf("attempt %v: trace %s parent %s, want the stored traceparent's %s and %s", s.Attrs[tracing.KeyAttempt],
				s.TraceID, s.Parent, producerTrace, producerSpan)
		}
		if len(s.Links) != 1 || s.Links[0] != (relaytest.SpanLink{TraceID: decode.TraceID, SpanID: decode.SpanID}) {
			t.Errorf("attempt %v links %v, want the decode span %s/%s", s.Attrs[tracing.KeyAttempt], s.Links, decode.TraceID, decode.SpanID)
		}
		if s.Kind != tracepb.Span_SPAN_KIND_CLIENT || s.Attrs[tracing.KeyEventType] != "order.created" ||
			s.Attrs[tracing.KeyAggregateType] != "order" || s.Attrs[tracing.KeyAggregateID] != "1" || s.Attrs[tracing.KeyTenant] != "t1" ||
			s.Attrs[tracing.KeyPipeline] != "default" {
			t.Errorf("attempt span %+v: want a client span naming the event, aggregate order/1, tenant t1, pipeline default", s)
		}
		if l, ok := s.Attrs[tracing.KeyLatency].(float64); !ok || l <= 0 {
			t.Errorf("attempt span latency %v, want a positive number of milliseconds", s.Attrs[tracing.KeyLatency])
		}
		if s.Start.Before(decode.End) || decode.End.Before(decode.Start) {
			t.Errorf("attempt %v began at %v, before its transaction's decode (%v to %v) ended", s.Attrs[tracing.KeyAttempt],
				s.Start, decode.Start, decode.End)
		}
	}
	failed, ok := a[0], a[1]
	if failed.Attrs[tracing.KeyAttempt] != int64(1) {
		failed, ok = ok, failed
	}
	if failed.Attrs[tracing.KeyAttempt] != int64(1) || failed.Attrs[tracing.KeyStatusCode] != int64(503) ||
		failed.Attrs[tracing.KeyResult] != "http_5xx" || failed.Attrs[tracing.KeyDelivered] != false ||
		failed.StatusCode != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(failed.StatusMessage, "503") {
		t.Errorf("failed attempt span %+v: want attempt 1, status 503, result http_5xx, not delivered, span status error", failed)
	}
	if ok.Attrs[tracing.KeyAttempt] != int64(2) || ok.Attrs[tracing.KeyStatusCode] != int64(200) ||
		ok.Attrs[tracing.KeyResult] != "success" || ok.Attrs[tracing.KeyDelivered] != true || ok.StatusCode == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("successful attempt span %+v: want attempt 2, status 200, result success, delivered", ok)
	}

	// The event without one: a child of the decode span, in its trace.
	if b[0].TraceID != decode.TraceID || b[0].Parent != decode.SpanID || len(b[0].Links) != 0 {
		t.Errorf("attempt span of the event without a traceparent: trace %s parent %s links %v, want the decode span %s/%s",
			b[0].TraceID, b[0].Parent, b[0].Links, decode.TraceID, decode.SpanID)
	}

	// Every request carried its own attempt's span as its traceparent.
	spanOf := map[string]relaytest.Span{}
	for _, s := range attempts {
		spanOf[s.TraceID+"/"+s.SpanID] = s
	}
	reqs := requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		f := strings.Split(r.trace, "-")
		if len(f) != 4 || f[3] != "01" {
			t.Errorf("request of %s attempt %d: traceparent %q, want a sampled one", r.id, r.attempt, r.trace)
			continue
		}
		s, found := spanOf[f[1]+"/"+f[2]]
		if !found || s.Attrs[tracing.KeyEventID] != r.id || s.Attrs[tracing.KeyAttempt] != int64(r.attempt) {
			t.Errorf("request of %s attempt %d carries traceparent %q, which is not that attempt's span", r.id, r.attempt, r.trace)
		}
		if r.trace == stored {
			t.Errorf("request of %s attempt %d carries the stored traceparent, not its attempt's", r.id, r.attempt)
		}
	}
}

// sameLSN reports whether an LSN as PostgreSQL writes it (0/1538A30) is the 16 hex digits of
// an X-Event-Sequence's first half.
func sameLSN(t *testing.T, lsn, fixed string) bool {
	t.Helper()
	hi, lo, ok := strings.Cut(lsn, "/")
	if !ok {
		return false
	}
	return strings.EqualFold(strings.Repeat("0", 8-len(hi))+hi+strings.Repeat("0", 8-len(lo))+lo, fixed)
}

// In a pipeline with endpoints each endpoint's attempts are spans of their own, naming the
// endpoint, children of the stored traceparent, their requests carrying their own traceparent.
func TestTracesNameTheEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	otlpRecv, tp := traced(t)
	a := newPartner(t, "acme", func(string, string, string) bool { return true })
	b := newPartner(t, "globex", func(string, string, string) bool { return true })
	e.addPartner(a, endpoints.Endpoint{})
	e.addPartner(b, endpoints.Endpoint{})
	e.start(func(c *Config) { endpointsConfig(c); c.TracerProvider = tp })
	const producerTrace = "0af7651916cd43dd8448eb211c80319c"
	stored := "00-" + producerTrace + "-b7ad6b7169203331-01"
	if _, err := outbox.Enqueue(context.Background(), e.pool, outbox.Event{AggregateType: "order", AggregateID: "1",
		EventType: "order.created", Payload: map[string]int{"seq": 1}, TraceParent: stored}); err != nil {
		t.Fatal(err)
	}
	spans := waitSpans(t, tp, otlpRecv, "deliver event", 2)
	got := map[string]relaytest.Span{}
	for _, s := range spans {
		ep, _ := s.Attrs[tracing.KeyEndpoint].(string)
		got[ep] = s
		if s.TraceID != producerTrace || s.Parent != "b7ad6b7169203331" || len(s.Links) != 1 {
			t.Errorf("endpoint %s: trace %s parent %s links %v, want the stored traceparent's and a link to the decode span",
				ep, s.TraceID, s.Parent, s.Links)
		}
	}
	for _, p := range []*partner{a, b} {
		s, ok := got[p.id]
		if !ok {
			t.Fatalf("no attempt span names endpoint %s: %v", p.id, spans)
		}
		waitFor(t, 10*time.Second, "delivered to "+p.id, func() bool { return len(p.recv.Deliveries()) == 1 })
		if want := "00-" + s.TraceID + "-" + s.SpanID + "-01"; p.recv.Deliveries()[0].Trace != want {
			t.Errorf("endpoint %s got traceparent %q, want its attempt span's %q", p.id, p.recv.Deliveries()[0].Trace, want)
		}
	}
}
