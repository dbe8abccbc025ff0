package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/tracing"
	"github.com/outbox-relay/outbox-relay/internal/tracing/otlp"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// Tracing is on when the flag, an endpoint variable or the file names a receiver, the flag
// winning over the variables and those over the file; OTEL_SDK_DISABLED and
// OTEL_TRACES_EXPORTER=none turn it off; what cannot work is a usage error naming the fix.
func TestOTelSettings(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       map[string]string
		args      []string
		file      string
		where     string // "": off
		endpoint  string // what the exporter is given; "": its environment
		protocol  string
		errorName string // a usage error naming this
	}{
		{name: "nothing set: off"},
		{name: "the flag", args: []string{"--otel-endpoint", "http://collector:4318"}, where: "http://collector:4318", endpoint: "http://collector:4318"},
		{name: "the variable", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, where: "http://c:4318"},
		{name: "the signal's variable", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"},
			where: "http://c:4318/v1/traces"},
		{name: "the file", file: "http://file:4318", where: "http://file:4318", endpoint: "http://file:4318"},
		{name: "the variable over the file", file: "http://file:4318", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318"},
			where: "http://env:4318"},
		{name: "the flag over the variable", args: []string{"--otel-endpoint", "http://flag:4318"},
			env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://env:4318/v1/traces"}, where: "http://flag:4318", endpoint: "http://flag:4318"},
		{name: "gRPC", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			where: "http://c:4317", protocol: "grpc"},
		{name: "the signal's protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, where: "http://c:4317", protocol: "grpc"},
		{name: "SDK disabled", args: []string{"--otel-endpoint", "http://c:4318"}, env: map[string]string{"OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", args: []string{"--otel-endpoint", "http://c:4318"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter otlp", args: []string{"--otel-endpoint", "http://c:4318"}, env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"},
			where: "http://c:4318", endpoint: "http://c:4318"},
		{name: "another exporter", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_TRACES_EXPORTER": "zipkin"},
			errorName: "OTEL_TRACES_EXPORTER"},
		{name: "a protocol it has not", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "thrift"},
			errorName: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "an endpoint that is no URL", args: []string{"--otel-endpoint", "collector:4318"}, errorName: "--otel-endpoint"},
		{name: "SDK disabled, not a boolean", env: map[string]string{"OTEL_SDK_DISABLED": "yes please"}, errorName: "OTEL_SDK_DISABLED"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range otelEnvVars {
				t.Setenv(name, tc.env[name])
			}
			cmd := newRunCmd()
			if err := cmd.ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			c, where, err := otelSettings(cmd.Flags(), tc.file)
			if tc.errorName != "" {
				if _, usage := err.(usageError); !usage || !strings.Contains(err.Error(), tc.errorName) {
					t.Fatalf("error %v, want a usage error naming %s", err, tc.errorName)
				}
				return
			}
			if err != nil || where != tc.where || c.Endpoint != tc.endpoint || c.Protocol != tc.protocol {
				t.Fatalf("where %q, config %+v, err %v; want where %q, endpoint %q, protocol %q", where, c, err, tc.where, tc.endpoint, tc.protocol)
			}
		})
	}
}

// `run --otel-endpoint` exports over OTLP/HTTP to a real receiver: the decode span and the
// attempt span of an event written with a traceparent, in its trace, the request carrying the
// attempt's own traceparent; the spans still queued when SIGTERM stops the relay are exported
// before it exits (the batch processor's own schedule, 5 s, is not waited for).
func TestRunExportsTracesOverOTLP(t *testing.T) {
	t.Parallel()
	dsn, pool := relaytest.MigratedDB(t)
	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	collector := relaytest.NewOTLPReceiver()
	t.Cleanup(collector.Close)
	slot := fmt.Sprintf("otel_%d", os.Getpid())
	p, lines := startCLI(t, []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + recv.URL, "WEBHOOK_SECRET=s3cret"},
		"run", "--slot", slot, "--publication", slot, "--metrics-addr", "", "--log-format", "json",
		"--otel-endpoint", collector.URL)
	waitLine(t, lines, `"message":"tracing: exporting`)
	waitLine(t, lines, `"message":"streaming"`)
	waitSlotReady(t, pool, slot)
	const stored = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	id, err := outbox.Enqueue(context.Background(), pool, outbox.Event{AggregateType: "order", AggregateID: "1",
		EventType: "order.created", Payload: map[string]int{"seq": 1}, TraceParent: stored})
	if err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the event delivered", func() bool { return len(recv.Deliveries()) == 1 })
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Fatalf("run exited %d:\n%s", code, p.stderr.String())
	}
	attempts, decode := collector.Named("deliver event"), collector.Named("decode transaction")
	if len(attempts) != 1 || len(decode) != 1 {
		t.Fatalf("exported %d attempt spans and %d decode spans by exit, want 1 and 1:\n%s", len(attempts), len(decode), p.stderr.String())
	}
	a := attempts[0]
	if a.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || a.Parent != "00f067aa0ba902b7" || a.Attrs[tracing.KeyEventID] != id.String() ||
		len(a.Links) != 1 || a.Links[0].SpanID != decode[0].SpanID || a.Service != "outbox-relay" {
		t.Fatalf("attempt span %+v: want a child of the stored traceparent, of event %s, linked to decode span %s, service outbox-relay",
			a, id, decode[0].SpanID)
	}
	if got, want := recv.Deliveries()[0].Trace, "00-"+a.TraceID+"-"+a.SpanID+"-01"; got != want {
		t.Fatalf("the request carried traceparent %q, want the attempt span's %q", got, want)
	}
}

// Over gRPC, from the standard variables alone: OTEL_EXPORTER_OTLP_ENDPOINT and _PROTOCOL choose
// the receiver, OTEL_SERVICE_NAME names the service, and OTEL_BSP_SCHEDULE_DELAY (read by the
// SDK) exports while the relay runs.
func TestRunExportsTracesOverOTLPgRPCFromTheEnvironment(t *testing.T) {
	t.Parallel()
	dsn, pool := relaytest.MigratedDB(t)
	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	collector, err := relaytest.NewOTLPGRPCReceiver()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(collector.Close)
	slot := fmt.Sprintf("otelgrpc_%d", os.Getpid())
	p, lines := startCLI(t, []string{"DB_DSN=" + dsn, "WEBHOOK_URL=" + recv.URL, "WEBHOOK_SECRET=s3cret",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=" + otlp.ProtocolGRPC,
		"OTEL_SERVICE_NAME=orders-relay", "OTEL_BSP_SCHEDULE_DELAY=50"},
		"run", "--slot", slot, "--publication", slot, "--metrics-addr", "", "--log-format", "json")
	t.Cleanup(func() { p.stop(t, syscall.SIGTERM) })
	waitLine(t, lines, `"message":"streaming"`)
	waitSlotReady(t, pool, slot)
	if _, err := outbox.Enqueue(context.Background(), pool, outbox.Event{AggregateType: "order", AggregateID: "1",
		EventType: "order.created", Payload: map[string]int{"seq": 1}}); err != nil {
		t.Fatal(err)
	}
	relaytest.WaitFor(t, 30*time.Second, "the attempt span exported while the relay runs", func() bool {
		return len(collector.Named("deliver event")) == 1
	})
	a := collector.Named("deliver event")[0]
	d := collector.Named("decode transaction")
	if len(d) != 1 || a.Parent != d[0].SpanID || a.TraceID != d[0].TraceID || a.Service != "orders-relay" {
		t.Fatalf("attempt span %+v, decode spans %+v: want the attempt a child of the decode span, service orders-relay", a, d)
	}
}

// waitSlotReady waits until slot has reached its consistent point: a row committed before it
// would reach the relay by backfill, read back from the table, with no decode span.
func waitSlotReady(t *testing.T, pool *pgxpool.Pool, slot string) {
	t.Helper()
	relaytest.WaitFor(t, 30*time.Second, "slot "+slot+" ready", func() bool {
		var n int
		_ = pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots
			WHERE slot_name = $1 AND confirmed_flush_lsn IS NOT NULL`, slot).Scan(&n)
		return n == 1
	})
}
