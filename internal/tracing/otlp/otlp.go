// Package otlp starts the OpenTelemetry SDK that exports the relay's spans over OTLP: what
// `outbox-relay run` does when --otel-endpoint or the standard OTEL_EXPORTER_OTLP_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set. Only the CLI links it (and with it the SDK, the
// exporters and gRPC); a program that embeds the relay passes its own TracerProvider, and a
// program that imports outbox or inbox links no part of OpenTelemetry.
//
// # What the environment still decides
//
// The CLI reads the settings that turn tracing on and choose the protocol and passes them in
// Config. The SDK and its exporters read the rest of the standard environment themselves, as
// their documentation says: OTEL_EXPORTER_OTLP_[TRACES_]HEADERS, _TIMEOUT, _COMPRESSION,
// _CERTIFICATE, _CLIENT_CERTIFICATE, _CLIENT_KEY and _INSECURE; OTEL_TRACES_SAMPLER and
// OTEL_TRACES_SAMPLER_ARG (the default, parentbased_always_on, records every attempt of a
// trace the producer sampled, and every trace the relay starts); OTEL_BSP_* (the batch span
// processor's queue of 2048 spans, exports of 512 every 5 s; a full queue drops spans, never
// delays a delivery); OTEL_SPAN_*_LIMIT; and OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES,
// which override the resource's service.name, outbox-relay.
package otlp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/rs/zerolog"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// The protocols of Config.Protocol, as OTEL_EXPORTER_OTLP_PROTOCOL names them.
const (
	ProtocolHTTPProtobuf = "http/protobuf"
	ProtocolHTTPJSON     = "http/json"
	ProtocolGRPC         = "grpc"
)

// Config says where the spans go.
type Config struct {
	// Endpoint, if set, is the OTLP receiver's base URL, as OTEL_EXPORTER_OTLP_ENDPOINT takes
	// it (--otel-endpoint): http://collector:4318, whose /v1/traces receives the spans over
	// HTTP, or http://collector:4317 over gRPC; an http:// URL sends without TLS. It wins over
	// the environment's endpoints. Empty: the exporter's environment
	// (OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT).
	Endpoint string
	// Protocol is ProtocolHTTPProtobuf, ProtocolHTTPJSON or ProtocolGRPC. Empty:
	// http/protobuf.
	Protocol string
	// Version is the resource's service.version. Empty: none.
	Version string
}

// Check refuses what Start would refuse, before anything starts, with the fix.
func (c Config) Check() error {
	switch c.Protocol {
	case "", ProtocolHTTPProtobuf, ProtocolHTTPJSON, ProtocolGRPC:
	default:
		return fmt.Errorf("OTLP protocol %q: want http/protobuf (the default), http/json or grpc "+
			"(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL)", c.Protocol)
	}
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("OTLP endpoint %q: want the receiver's base URL, e.g. http://otel-collector:4318 "+
			"(http:// sends without TLS; over gRPC the port is usually 4317)", c.Endpoint)
	}
	return nil
}

// Start starts the SDK: an OTLP exporter of c's protocol behind a batch span processor, with
// the sampler, limits and resource the environment gives. The provider's Shutdown exports what
// is queued and stops it; call it once the relay has returned. A receiver that cannot be
// reached is not an error here: its exports fail later, through otel's error handler (see
// ErrorHandler), and the spans they carried are dropped. A malformed OTEL_RESOURCE_ATTRIBUTES
// is, naming the variable.
func Start(ctx context.Context, c Config) (*sdktrace.TracerProvider, error) {
	if err := c.Check(); err != nil {
		return nil, err
	}
	exp, err := exporter(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx, resource.WithAttributes(serviceAttrs(c.Version)...),
		resource.WithTelemetrySDK(), resource.WithHost(), resource.WithFromEnv())
	if err != nil {
		_ = exp.Shutdown(ctx)
		if errors.Is(err, resource.ErrPartialResource) {
			return nil, fmt.Errorf("OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES: %w (want key=value pairs, comma-separated, "+
				"values percent-encoded)", err)
		}
		return nil, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

func serviceAttrs(version string) []attribute.KeyValue {
	a := []attribute.KeyValue{attribute.String("service.name", "outbox-relay")}
	if version != "" {
		a = append(a, attribute.String("service.version", version))
	}
	return a
}

// exporter builds the OTLP exporter of c.Protocol, pointed at c.Endpoint if set.
func exporter(ctx context.Context, c Config) (*otlptrace.Exporter, error) {
	if c.Protocol == ProtocolGRPC {
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		return otlptracegrpc.New(ctx, opts...)
	}
	var opts []otlptracehttp.Option
	if c.Endpoint != "" {
		// As OTEL_EXPORTER_OTLP_ENDPOINT: a base URL, to which the signal's path is added.
		opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/traces"))
	}
	if c.Protocol == ProtocolHTTPJSON {
		opts = append(opts, otlptracehttp.WithEncoding(otlptracehttp.EncodingJSON))
	}
	return otlptracehttp.New(ctx, opts...)
}

// ErrorHandler returns an otel.ErrorHandler that logs the SDK's errors (an export the receiver
// refused or did not answer) to log as warnings naming the fix, the same error at most once a
// minute. `outbox-relay run` installs it with otel.SetErrorHandler.
func ErrorHandler(log zerolog.Logger, endpoint string) otel.ErrorHandler {
	q := &retry.Quiet{}
	return otel.ErrorHandlerFunc(func(err error) {
		if q.Log(err) {
			log.Warn().Err(err).Str("otlp_endpoint", endpoint).
				Msg("tracing: spans could not be exported (deliveries go on; the spans are dropped): " +
					"check that the OTLP receiver is running and reachable at the endpoint (--otel-endpoint, OTEL_EXPORTER_OTLP_ENDPOINT)")
		}
	})
}
