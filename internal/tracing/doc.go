// Package tracing is the relay's OpenTelemetry traces from commit to attempt: a span for each
// transaction's decode (a cdc.TxTracer) and a span for each delivery attempt (a decorator
// around a publisher.Destination), both made with the trace.Tracer of a TracerProvider the
// relay is given (relay.Config.TracerProvider). It uses the OpenTelemetry API only: the SDK and
// its OTLP exporter are set up by the CLI (package tracing/otlp), or by a program that embeds
// the relay and passes its own provider. With no provider the relay builds neither, so a relay
// that does not trace pays nothing: no span, no allocation, no wrapper.
//
// # The spans
//
// "decode transaction" (kind consumer) runs from the moment the stream reads a transaction's
// BEGIN to the moment it reads its COMMIT. It is the root of a trace of its own, with the
// transaction's commit and end LSNs, xid and number of events. Its traceparent travels with
// each event as envelope.Message.DecodeSpan.
//
// "deliver event" (kind client for a webhook, producer for a broker) is one attempt to deliver
// one event: its parent is the trace context the producer stored in the row's headers column
// (outbox.Event.TraceParent, the "traceparent" key), so an order's trace runs from the request
// that wrote it to each attempt to each partner; it links to the decode span. An event without
// a stored traceparent is a child of its decode span instead, so its attempts still share one
// trace; one read back from the table (replay, backfill, an endpoint's backlog) with neither
// starts a trace of its own. The attempt's request or message carries the attempt span's own
// traceparent, replacing the stored one (tracestate is kept), so the consumer's spans are its
// children.
//
// A batch attempt (--batch-max-events) is one "deliver event" span per event it carries, all
// with the same start, end and result, each with outbox.batch.size: each event keeps its own
// trace, and each event's entry in the batch carries its own span's traceparent.
//
// Attribute names are the constants below; docs/operations/tracing.md lists them.
package tracing
