package main

import (
	"fmt"
	"os"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// With BENCH_OTEL=1 every relay the bench starts traces (docs/operations/tracing.md): it
// exports a span per transaction decoded and per delivery attempt over OTLP/HTTP to a real
// receiver in this process, which decodes every export. The default sampler records every
// span, the most tracing can cost; run the drain with and without it in one session to see the
// cost: BENCH_ONLY=drain make bench, then BENCH_OTEL=1 BENCH_ONLY=drain make bench.

// otelEnv are the standard variables the bench sets for the relays it starts, and clears
// otherwise, so that a developer's own OTEL_* environment does not turn tracing on unasked.
var otelEnv = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
	"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG", "OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER"}

// startTracing points the relays the bench starts (which inherit this process's environment)
// at a new OTLP receiver when on, and clears the variables otherwise. The receiver's stop is
// returned.
func startTracing(on bool) (*relaytest.OTLPReceiver, func(), error) {
	for _, name := range otelEnv {
		if err := os.Unsetenv(name); err != nil {
			return nil, nil, err
		}
	}
	if !on {
		return nil, func() {}, nil
	}
	recv := relaytest.NewOTLPReceiver()
	if err := os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL); err != nil {
		recv.Close()
		return nil, nil, err
	}
	return recv, recv.Close, nil
}

// otelLine is the report's line on tracing: on, with what the receiver got, or off.
func (r *results) otelLine() string {
	if !r.cfg.OTel {
		return "Tracing off (BENCH_OTEL=1 turns it on)."
	}
	return fmt.Sprintf("**Tracing on (BENCH_OTEL=1)**: every relay exported its spans over OTLP/HTTP to a receiver in the bench's "+
		"process, every span sampled; it decoded %s spans in %s export requests.", thousands(float64(r.spans)), thousands(float64(r.spanRequests)))
}
