package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/outbox-relay/outbox-relay/internal/tracing/otlp"
)

// --otel-endpoint falls back to the standard variable the OTLP exporter reads itself; the
// signal's own, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, turns tracing on too.
var otelEndpointFlag = envFlag{name: "otel-endpoint", env: "OTEL_EXPORTER_OTLP_ENDPOINT"}

// The standard variables `run` reads to decide whether and how it traces (the SDK reads the
// others itself: internal/tracing/otlp).
const (
	otelTracesEndpointEnv = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	otelProtocolEnv       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	otelTracesProtocolEnv = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	otelSDKDisabledEnv    = "OTEL_SDK_DISABLED"
	otelTracesExporterEnv = "OTEL_TRACES_EXPORTER"
)

// otelEnvVars are the variables above, which the tests clear for the processes they start.
var otelEnvVars = []string{otelEndpointFlag.env, otelTracesEndpointEnv, otelProtocolEnv, otelTracesProtocolEnv,
	otelSDKDisabledEnv, otelTracesExporterEnv}

// otelSettings decides whether `run` exports traces, and where: on when --otel-endpoint, one
// of the endpoint variables or the file's otel.endpoint names a receiver, unless
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none. The flag wins over the variables, which
// win over the file; where says which applies, for the log.
func otelSettings(fs *pflag.FlagSet, fileEndpoint string) (c otlp.Config, where string, err error) {
	if v := os.Getenv(otelSDKDisabledEnv); v != "" {
		disabled, err := strconv.ParseBool(v)
		if err != nil {
			return c, "", usageError{fmt.Errorf("%s=%q: set true or false", otelSDKDisabledEnv, v)}
		}
		if disabled {
			return c, "", nil
		}
	}
	switch v := strings.TrimSpace(os.Getenv(otelTracesExporterEnv)); v {
	case "", "otlp":
	case "none":
		return c, "", nil
	default:
		return c, "", usageError{fmt.Errorf("%s=%q: the relay exports traces over OTLP only: set otlp (or none), "+
			"and send them on from an OpenTelemetry Collector", otelTracesExporterEnv, v)}
	}
	c.Protocol = os.Getenv(otelTracesProtocolEnv)
	if c.Protocol == "" {
		c.Protocol = os.Getenv(otelProtocolEnv)
	}
	flag, _ := fs.GetString(otelEndpointFlag.name)
	switch {
	case fs.Changed(otelEndpointFlag.name) && flag != "":
		c.Endpoint, where = flag, flag
	case os.Getenv(otelTracesEndpointEnv) != "":
		where = os.Getenv(otelTracesEndpointEnv) // the exporter reads it, and the variable below
	case os.Getenv(otelEndpointFlag.env) != "":
		where = os.Getenv(otelEndpointFlag.env)
	case fileEndpoint != "":
		c.Endpoint, where = fileEndpoint, fileEndpoint
	default:
		return c, "", nil
	}
	if err := c.Check(); err != nil {
		return c, "", usageError{fmt.Errorf("%w (--otel-endpoint, otel.endpoint or the OTEL_EXPORTER_OTLP_* variables)", err)}
	}
	return c, where, nil
}

// startTracing starts the OpenTelemetry SDK when the settings ask for it, and returns its
// provider (nil: no tracing) and what stops it, exporting the spans still queued.
func startTracing(ctx context.Context, fs *pflag.FlagSet, fileEndpoint, version string, log zerolog.Logger) (*sdktrace.TracerProvider, func(), error) {
	c, where, err := otelSettings(fs, fileEndpoint)
	if err != nil || where == "" {
		return nil, func() {}, err
	}
	c.Version = version
	// The SDK reports failed exports (and a resource it could read only in part) through
	// otel's global error handler alone; this process is the SDK's only user.
	otel.SetErrorHandler(otlp.ErrorHandler(log, where))
	tp, err := otlp.Start(ctx, c)
	if err != nil {
		return nil, nil, fmt.Errorf("tracing: %w", err)
	}
	protocol := c.Protocol
	if protocol == "" {
		protocol = otlp.ProtocolHTTPProtobuf
	}
	log.Info().Str("otlp_endpoint", where).Str("protocol", protocol).
		Msg("tracing: exporting a span per transaction decoded and per delivery attempt over OTLP")
	stop := func() {
		// The run's context has ended by now: the spans queued get a few seconds of their own.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := tp.Shutdown(sctx); err != nil && !errors.Is(err, context.Canceled) {
			log.Warn().Err(err).Str("otlp_endpoint", where).Msg("tracing: the last spans could not be exported")
		}
	}
	return tp, stop, nil
}
