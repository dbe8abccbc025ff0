package otlp

import (
	"context"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// What cannot work is refused at start, naming the setting.
func TestStartRefusesWhatCannotWork(t *testing.T) {
	for _, tc := range []struct {
		name  string
		c     Config
		env   string // OTEL_RESOURCE_ATTRIBUTES
		names string
	}{
		{name: "a protocol the exporters lack", c: Config{Protocol: "thrift"}, names: "OTEL_EXPORTER_OTLP_PROTOCOL"},
		{name: "an endpoint without a scheme", c: Config{Endpoint: "collector:4318"}, names: "http://otel-collector:4318"},
		{name: "an endpoint of another scheme", c: Config{Endpoint: "grpc://collector:4317"}, names: "http://otel-collector:4318"},
		{name: "an endpoint with a query", c: Config{Endpoint: "http://collector:4318/?x=1"}, names: "base URL"},
		{name: "resource attributes that do not parse", c: Config{Endpoint: "http://127.0.0.1:1"}, env: "team=orders,oops",
			names: "OTEL_RESOURCE_ATTRIBUTES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", tc.env)
			tp, err := Start(context.Background(), tc.c)
			if err == nil {
				_ = tp.Shutdown(context.Background())
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.names) {
				t.Fatalf("error %q does not name %s", err, tc.names)
			}
		})
	}
}

// A started SDK exports to the endpoint's /v1/traces, as service outbox-relay at the version
// given unless OTEL_SERVICE_NAME says otherwise, with OTEL_RESOURCE_ATTRIBUTES on the resource;
// Shutdown exports what is queued.
func TestStartExportsToTheEndpoint(t *testing.T) {
	for _, tc := range []struct{ serviceEnv, want string }{{"", "outbox-relay"}, {"orders-relay", "orders-relay"}} {
		t.Run(tc.want, func(t *testing.T) {
			t.Setenv("OTEL_SERVICE_NAME", tc.serviceEnv)
			t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
			recv := relaytest.NewOTLPReceiver()
			defer recv.Close()
			tp, err := Start(context.Background(), Config{Endpoint: recv.URL + "/", Version: "v1.2.3"})
			if err != nil {
				t.Fatal(err)
			}
			_, span := tp.Tracer("t").Start(context.Background(), "probe")
			span.End()
			if err := tp.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := recv.Named("probe")
			if len(got) != 1 || got[0].Service != tc.want || got[0].Resource["service.version"] != "v1.2.3" ||
				got[0].Resource["deployment.environment"] != "test" || got[0].Resource["telemetry.sdk.language"] != "go" {
				t.Fatalf("spans %+v: want one probe of service %s, version v1.2.3, environment test, the SDK's attributes", recv.Spans(), tc.want)
			}
		})
	}
}
