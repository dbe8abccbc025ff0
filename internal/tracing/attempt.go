package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// Target is what a traced destination delivers to, as its attempt spans name it.
type Target struct {
	// Pipeline is the pipeline's name, with its shard.
	Pipeline string
	// Endpoint is the endpoint's id in a pipeline with endpoints; empty otherwise.
	Endpoint string
	// Producer makes the attempt spans of kind producer (a broker, or a program's own
	// destination); false: client, for the webhook and the endpoints.
	Producer bool
}

// Destination returns d with a "deliver event" span around each attempt, made with tr (see the
// package doc), and the attempt's traceparent on the message it hands d. It keeps what d
// implements of destination.BatchDestination and PartialBatchDestination. A nil tr returns d
// itself: a relay that does not trace has no wrapper.
func Destination(d destination.Destination, tr trace.Tracer, t Target) destination.Destination {
	if tr == nil {
		return d
	}
	kind := trace.SpanKindClient
	if t.Producer {
		kind = trace.SpanKindProducer
	}
	base := []attribute.KeyValue{attribute.String(KeyPipeline, t.Pipeline)}
	if t.Endpoint != "" {
		base = append(base, attribute.String(KeyEndpoint, t.Endpoint))
	}
	w := &traced{d: d, tr: tr, kind: kind, base: base}
	switch d.(type) {
	case destination.PartialBatchDestination:
		return partialTraced{batchTraced{w}}
	case destination.BatchDestination:
		return batchTraced{w}
	}
	return w
}

// traced is a destination whose attempts are spans.
type traced struct {
	d    destination.Destination
	tr   trace.Tracer
	kind trace.SpanKind
	base []attribute.KeyValue // the target's attributes
}

// Send implements destination.Destination.
func (t *traced) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	began := time.Now()
	ctx, span, sent := t.start(ctx, m, attempt, 0, began)
	r := t.d.Send(ctx, sent, attempt)
	finish(span, r, began, time.Now())
	return r
}

type batchTraced struct{ *traced }

// SendBatch implements destination.BatchDestination: one span per event of the batch.
func (t batchTraced) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) destination.Result {
	spans := make([]trace.Span, len(ms))
	sent := make([]*envelope.Message, len(ms))
	began := time.Now()
	for i, m := range ms {
		_, spans[i], sent[i] = t.start(ctx, m, attempt, len(ms), began)
	}
	r := t.d.(destination.BatchDestination).SendBatch(ctx, sent, attempt)
	ended := time.Now()
	for _, s := range spans {
		finish(s, r, began, ended)
	}
	return r
}

type partialTraced struct{ batchTraced }

// PartialBatches implements destination.PartialBatchDestination.
func (partialTraced) PartialBatches() {}

// start starts m's attempt span at began (batch > 0: in a batch of that many events) and
// returns the context that holds it and the message to send: m with the span's traceparent in
// its headers.
func (t *traced) start(ctx context.Context, m *envelope.Message, attempt, batch int, began time.Time) (context.Context, trace.Span, *envelope.Message) {
	h := readHeaders(m.Headers)
	parent, stored := parseTraceparent(h.parent)
	if stored && h.state != "" {
		if ts, err := trace.ParseTraceState(h.state); err == nil {
			parent = parent.WithTraceState(ts)
		}
	}
	decode, decoded := parseTraceparent(m.DecodeSpan)
	opts := []trace.SpanStartOption{trace.WithSpanKind(t.kind), trace.WithTimestamp(began),
		trace.WithAttributes(t.attributes(m, attempt, batch)...)}
	switch {
	case stored:
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
		if decoded {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: decode}))
		}
	case decoded:
		ctx = trace.ContextWithRemoteSpanContext(ctx, decode)
	default:
		opts = append(opts, trace.WithNewRoot())
	}
	ctx, span := t.tr.Start(ctx, "deliver event", opts...)
	sc := span.SpanContext()
	if !sc.IsValid() {
		return ctx, span, m // a provider that makes no spans: nothing to carry
	}
	sent := *m
	sent.Headers = h.with(traceparent(sc))
	return ctx, span, &sent
}

// attributes are what an attempt span says of its target and its event.
func (t *traced) attributes(m *envelope.Message, attempt, batch int) []attribute.KeyValue {
	a := make([]attribute.KeyValue, 0, len(t.base)+9)
	a = append(a, t.base...)
	a = append(a, attribute.String(KeyEventID, m.ID), attribute.String(KeyEventType, m.EventType),
		attribute.String(KeyAggregateType, m.AggregateType), attribute.String(KeyAggregateID, m.AggregateID),
		attribute.String(KeyEventSequence, m.Sequence), attribute.Int(KeyAttempt, attempt))
	if m.TenantID != "" {
		a = append(a, attribute.String(KeyTenant, m.TenantID))
	}
	if batch > 0 {
		a = append(a, attribute.Int(KeyBatchSize, batch))
	}
	return a
}

// finish ends an attempt span, which began at began, at ended with what came of the attempt.
func finish(span trace.Span, r destination.Result, began, ended time.Time) {
	if span.IsRecording() {
		a := []attribute.KeyValue{attribute.String(KeyResult, r.Label), attribute.Bool(KeyDelivered, r.Delivered),
			attribute.Float64(KeyLatency, float64(ended.Sub(began))/float64(time.Millisecond))}
		if r.Status > 0 {
			a = append(a, attribute.Int(KeyStatusCode, r.Status))
		}
		if r.RetryAfter > 0 {
			a = append(a, attribute.Int64(KeyRetryAfter, r.RetryAfter.Milliseconds()))
		}
		span.SetAttributes(a...)
		if !r.Delivered {
			span.SetStatus(codes.Error, r.Reason())
		}
	}
	span.End(trace.WithTimestamp(ended))
}
