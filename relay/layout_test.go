package relay

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// A program that embeds the relay links no broker client unless it uses one: relay takes its
// destination as a destination.Opener, and only the CLI (which builds natsdest and kafkadest from
// flags and YAML) links nats.go and franz-go. The CLI's links are the control: the check sees
// them where they are.
func TestRelayLinksNoBrokerClient(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v (this test needs the go command on PATH)", pkg, err)
		}
		return strings.Fields(string(out))
	}
	brokers := []string{"github.com/nats-io/nats.go", "github.com/twmb/franz-go/pkg/kgo"}
	cli := deps("github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	for _, b := range brokers {
		if !slices.Contains(cli, b) {
			t.Fatalf("the CLI does not link %s: this check would prove nothing", b)
		}
	}
	for _, pkg := range deps("github.com/outbox-relay/outbox-relay/relay") {
		if strings.HasPrefix(pkg, "github.com/nats-io/") || strings.HasPrefix(pkg, "github.com/twmb/franz-go") {
			t.Errorf("relay links %s: a program embedding it would carry that broker client", pkg)
		}
	}
}

// A program that embeds the relay links the OpenTelemetry API only: it passes its own
// TracerProvider, and the SDK, the OTLP exporters and gRPC are linked by the CLI alone
// (internal/tracing/otlp). The stream links no part of OpenTelemetry: its TxTracer hook is
// implemented in internal/tracing. The CLI's links are the control.
func TestRelayLinksTheTracingAPIOnly(t *testing.T) {
	t.Parallel()
	deps := func(pkg string) []string {
		out, err := exec.Command("go", "list", "-deps", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v (this test needs the go command on PATH)", pkg, err)
		}
		return strings.Fields(string(out))
	}
	heavy := func(pkg string) bool {
		return strings.HasPrefix(pkg, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(pkg, "go.opentelemetry.io/otel/exporters/") ||
			strings.HasPrefix(pkg, "go.opentelemetry.io/proto/") || strings.HasPrefix(pkg, "google.golang.org/grpc")
	}
	cli := deps("github.com/outbox-relay/outbox-relay/cmd/outbox-relay")
	for _, want := range []string{"go.opentelemetry.io/otel/sdk/trace", "go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
		"google.golang.org/grpc"} {
		if !slices.Contains(cli, want) {
			t.Fatalf("the CLI does not link %s: this check would prove nothing", want)
		}
	}
	relay := deps("github.com/outbox-relay/outbox-relay/relay")
	if !slices.Contains(relay, "go.opentelemetry.io/otel/trace") {
		t.Fatal("relay does not link the OpenTelemetry trace API: this check would prove nothing")
	}
	for _, pkg := range relay {
		if heavy(pkg) {
			t.Errorf("relay links %s: a program embedding it would carry the OpenTelemetry SDK or its exporters; "+
				"keep them in internal/tracing/otlp, which only the CLI imports", pkg)
		}
	}
	for _, pkg := range deps("github.com/outbox-relay/outbox-relay/cdc") {
		if strings.HasPrefix(pkg, "go.opentelemetry.io/") {
			t.Errorf("cdc links %s: the stream takes a cdc.TxTracer, implemented in internal/tracing", pkg)
		}
	}
}
