package tracing

import (
	"context"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// accept answers every attempt delivered at once: the benchmark measures the decorator alone.
type accept struct{}

func (accept) Send(context.Context, *envelope.Message, int) destination.Result {
	return destination.Result{Delivered: true, Status: 200, Label: destination.ResultSuccess}
}

// What an attempt costs the relay's CPU with tracing off (no decorator: what the relay runs
// without a TracerProvider), on with every span sampled and exported (to a no-op exporter
// behind the SDK's batch processor, as `run` sets it up), and on with the producer's trace not
// sampled. go test -bench Attempt -benchmem ./internal/tracing/
func BenchmarkAttempt(b *testing.B) {
	m := message("00000000-0000-0000-0000-000000000001", "1",
		map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x-request-id": "r1"})
	m.DecodeSpan = "00-33333333333333333333333333333333-3333333333333333-01"
	unsampled := *m
	unsampled.Headers = []byte(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00","x-request-id":"r1"}`)
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	on := Destination(accept{}, Tracer(tp, "bench"), Target{Pipeline: "default"})
	for _, c := range []struct {
		name string
		d    destination.Destination
		m    *envelope.Message
	}{
		{"off", Destination(accept{}, nil, Target{Pipeline: "default"}), m},
		{"on", on, m},
		{"on-unsampled", on, &unsampled},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := context.Background()
			for b.Loop() {
				c.d.Send(ctx, c.m, 1)
			}
		})
	}
}

// Off, an attempt through the relay's wiring allocates nothing more than the destination does.
func TestAttemptOffAllocatesNothing(t *testing.T) {
	d := Destination(accept{}, nil, Target{Pipeline: "default"})
	m := message("00000000-0000-0000-0000-000000000001", "1", map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"})
	ctx := context.Background()
	if n := testing.AllocsPerRun(100, func() { d.Send(ctx, m, 1) }); n != 0 {
		t.Errorf("an attempt with tracing off allocates %v times", n)
	}
	// Positive control: on, the same measure sees the span and the headers it makes.
	tr, _ := sdk(t)
	on := Destination(accept{}, tr, Target{Pipeline: "default"})
	if n := testing.AllocsPerRun(100, func() { on.Send(ctx, m, 1) }); n == 0 {
		t.Error("the measure sees no allocation with tracing on either")
	}
}
