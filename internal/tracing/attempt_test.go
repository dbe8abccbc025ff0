package tracing

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// sdk is the official SDK recording every span it ends, sampling as `run` does by default
// (parent-based, always on for a root).
func sdk(t *testing.T) (trace.Tracer, *tracetest.SpanRecorder) {
	t.Helper()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return Tracer(tp, "test"), rec
}

func hook(t *testing.T, recv *relaytest.Receiver) *webhook.Destination {
	t.Helper()
	w, err := webhook.New(webhook.Config{URL: recv.URL, Secrets: []string{recv.Secret}, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func message(id, agg string, headers map[string]string) *envelope.Message {
	m := &envelope.Message{ID: id, EventType: "order.created", AggregateType: "order", AggregateID: agg,
		Payload: []byte(`{"seq":1}`), Sequence: envelope.Sequence(0x1538A30, 0)}
	if headers != nil {
		m.Headers, _ = json.Marshal(headers)
	}
	return m
}

func attr(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// A batch attempt is a span per event: each in its own event's trace (the stored traceparent's,
// else its decode span's), all with the batch's start, end, size and result, and each event of
// the batch's body carries its own span's traceparent. The events handed over are left as
// they were.
func TestBatchAttemptIsASpanPerEvent(t *testing.T) {
	recv := relaytest.NewReceiver("batch-secret")
	t.Cleanup(recv.Close)
	tr, rec := sdk(t)
	d := Destination(hook(t, recv), tr, Target{Pipeline: "orders"}).(destination.BatchDestination)
	const t1, t2, dec = "00-11111111111111111111111111111111-1111111111111111-01",
		"00-22222222222222222222222222222222-2222222222222222-01", "00-33333333333333333333333333333333-3333333333333333-01"
	ms := []*envelope.Message{
		message("00000000-0000-0000-0000-000000000001", "1", map[string]string{"traceparent": t1, "x-request-id": "r1"}),
		message("00000000-0000-0000-0000-000000000002", "2", map[string]string{"traceparent": t2}),
		message("00000000-0000-0000-0000-000000000003", "3", nil),
	}
	for _, m := range ms {
		m.DecodeSpan = dec
	}
	before := string(ms[0].Headers)
	if r := d.SendBatch(context.Background(), ms, 2); !r.Delivered {
		t.Fatalf("batch not delivered: %s", r.Reason())
	}
	if string(ms[0].Headers) != before || ms[2].Headers != nil {
		t.Fatal("the decorator modified the messages it was given")
	}
	spans := rec.Ended()
	if len(spans) != 3 {
		t.Fatalf("%d spans for a batch of 3, want one per event", len(spans))
	}
	parents := map[string]string{ms[0].ID: t1, ms[1].ID: t2, ms[2].ID: dec}
	got := recv.Deliveries()
	if len(got) != 3 || got[0].Request != got[2].Request {
		t.Fatalf("deliveries %+v: want the 3 events in one request", got)
	}
	for _, s := range spans {
		id := attr(s, KeyEventID).AsString()
		want, _ := parseTraceparent(parents[id])
		if s.Parent().TraceID() != want.TraceID() || s.Parent().SpanID() != want.SpanID() {
			t.Errorf("event %s: parent %v, want %v", id, s.Parent(), want)
		}
		if attr(s, KeyBatchSize).AsInt64() != 3 || attr(s, KeyAttempt).AsInt64() != 2 || attr(s, KeyStatusCode).AsInt64() != 200 ||
			!s.StartTime().Equal(spans[0].StartTime()) || !s.EndTime().Equal(spans[0].EndTime()) {
			t.Errorf("event %s: batch size %v, attempt %v, status %v, start %v, end %v: want 3, 2, 200 and the batch's times",
				id, attr(s, KeyBatchSize), attr(s, KeyAttempt), attr(s, KeyStatusCode), s.StartTime(), s.EndTime())
		}
		if id == ms[0].ID {
			if links := s.Links(); len(links) != 1 || traceparent(links[0].SpanContext) != dec {
				t.Errorf("event %s links %v, want its decode span", id, links)
			}
		}
		for _, dl := range got {
			if dl.ID == id && dl.Trace != traceparent(s.SpanContext()) {
				t.Errorf("event %s arrived with traceparent %q, want its span's %q", id, dl.Trace, traceparent(s.SpanContext()))
			}
		}
	}
}

// A producer's trace that was not sampled stays unsampled: no span is recorded, and the request
// carries the trace with a new span id and the flags as they were, so the consumer's own
// sampler agrees.
func TestUnsampledTraceStaysUnsampled(t *testing.T) {
	recv := relaytest.NewReceiver("s")
	t.Cleanup(recv.Close)
	tr, rec := sdk(t)
	d := Destination(hook(t, recv), tr, Target{Pipeline: "p"})
	const stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
	if r := d.Send(context.Background(), message("00000000-0000-0000-0000-000000000001", "1", map[string]string{"traceparent": stored}), 1); !r.Delivered {
		t.Fatal(r.Reason())
	}
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded of an unsampled trace", n)
	}
	got := recv.Deliveries()[0].Trace
	f := strings.Split(got, "-")
	if len(f) != 4 || f[1] != "4bf92f3577b34da6a3ce929d0e0e4736" || f[2] == "00f067aa0ba902b7" || f[3] != "00" {
		t.Fatalf("traceparent %q, want trace 4bf92f35... kept, a new span id, flags 00", got)
	}
	// Positive control: the same sampled is recorded.
	sampled := stored[:len(stored)-2] + "01"
	d.Send(context.Background(), message("00000000-0000-0000-0000-000000000002", "2", map[string]string{"traceparent": sampled}), 1)
	if n := len(rec.Ended()); n != 1 {
		t.Fatalf("%d spans of a sampled trace, want 1", n)
	}
}

// batchDest and partialDest implement the destination interfaces with functions of the test.
type batchDest struct {
	send func(*envelope.Message) destination.Result
}

func (b batchDest) Send(_ context.Context, m *envelope.Message, _ int) destination.Result {
	return b.send(m)
}
func (b batchDest) SendBatch(_ context.Context, ms []*envelope.Message, _ int) destination.Result {
	return b.send(ms[0])
}

type partialDest struct{ batchDest }

func (partialDest) PartialBatches() {}

// The decorator is what it wraps to the engine: a batch destination stays one, a partial one
// stays partial (the engine then keeps one event per aggregate in a batch), a plain one stays
// plain; and without a tracer there is no decorator at all.
func TestDecoratorKeepsWhatItWraps(t *testing.T) {
	tr, _ := sdk(t)
	ok := func(*envelope.Message) destination.Result {
		return destination.Result{Delivered: true, Label: destination.ResultSuccess}
	}
	plain := Destination(batchDest{ok}, tr, Target{})
	if _, isPartial := plain.(destination.PartialBatchDestination); isPartial {
		t.Error("a batch destination became partial")
	}
	if _, isBatch := plain.(destination.BatchDestination); !isBatch {
		t.Error("a batch destination lost SendBatch")
	}
	if _, isPartial := Destination(partialDest{batchDest{ok}}, tr, Target{}).(destination.PartialBatchDestination); !isPartial {
		t.Error("a partial batch destination lost PartialBatches")
	}
	type single struct{ destination.Destination }
	if _, isBatch := Destination(single{batchDest{ok}}, tr, Target{}).(destination.BatchDestination); isBatch {
		t.Error("a single-event destination gained SendBatch")
	}
	d := &batchDest{ok}
	if got := Destination(d, nil, Target{}); got != destination.Destination(d) {
		t.Error("without a tracer the destination is wrapped")
	}
	if Decode(nil, "p") != nil {
		t.Error("without a tracer the stream gets a TxTracer")
	}
}

// A broker's attempts are producer spans, a webhook's client spans; an endpoint's name the
// endpoint.
func TestAttemptSpanKindAndTarget(t *testing.T) {
	tr, rec := sdk(t)
	ok := func(*envelope.Message) destination.Result {
		return destination.Result{Delivered: true, Label: destination.ResultSuccess}
	}
	Destination(batchDest{ok}, tr, Target{Pipeline: "p", Producer: true}).Send(context.Background(), message("a", "1", nil), 1)
	Destination(batchDest{ok}, tr, Target{Pipeline: "p", Endpoint: "acme"}).Send(context.Background(), message("b", "1", nil), 1)
	spans := rec.Ended()
	if len(spans) != 2 || spans[0].SpanKind() != trace.SpanKindProducer || spans[1].SpanKind() != trace.SpanKindClient ||
		attr(spans[1], KeyEndpoint).AsString() != "acme" || attr(spans[0], KeyEndpoint).Type() != attribute.EMPTY {
		t.Fatalf("spans %v: want a producer span without endpoint, then a client span of endpoint acme", spans)
	}
	if spans[0].Parent().IsValid() || spans[1].Parent().IsValid() {
		t.Error("an event with neither a stored traceparent nor a decode span got a parent")
	}
}
