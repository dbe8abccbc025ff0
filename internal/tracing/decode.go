package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// Decode returns the cdc.TxTracer of a pipeline's stream: a "decode transaction" span per
// transaction, made with tr. A nil tr returns nil: the stream then traces nothing.
func Decode(tr trace.Tracer, pipeline string) cdc.TxTracer {
	if tr == nil {
		return nil
	}
	return decodeTracer{tr: tr, pipeline: attribute.String(KeyPipeline, pipeline)}
}

type decodeTracer struct {
	tr       trace.Tracer
	pipeline attribute.KeyValue
}

// TraceTx implements cdc.TxTracer.
func (d decodeTracer) TraceTx(tx *cdc.Tx, began time.Time) string {
	if began.IsZero() {
		began = time.Now()
	}
	a := []attribute.KeyValue{d.pipeline, attribute.Int64(KeyTxXid, int64(tx.Xid)),
		attribute.String(KeyTxCommitLSN, tx.CommitLSN.String()), attribute.String(KeyTxEndLSN, tx.EndLSN.String()),
		attribute.Int(KeyTxEvents, len(tx.Events))}
	if len(tx.Controls) > 0 {
		a = append(a, attribute.Int(KeyTxControls, len(tx.Controls)))
	}
	if tx.Resent {
		a = append(a, attribute.Bool(KeyTxResent, true))
	}
	_, span := d.tr.Start(context.Background(), "decode transaction", trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithTimestamp(began), trace.WithAttributes(a...))
	sc := span.SpanContext()
	span.End()
	if !sc.IsValid() {
		return ""
	}
	return traceparent(sc)
}

// Tracer returns the tracer of the relay's spans from tp (the instrumentation scope
// github.com/outbox-relay/outbox-relay, at version), or nil when tp is nil.
func Tracer(tp trace.TracerProvider, version string) trace.Tracer {
	if tp == nil {
		return nil
	}
	return tp.Tracer("github.com/outbox-relay/outbox-relay", trace.WithInstrumentationVersion(version))
}
