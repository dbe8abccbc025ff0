package demo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/relay"
)

// startRelay runs the relay on the demo's slot and registry, posting to the consumer, and
// returns once its slot exists: rows committed earlier would not be in the stream. Its log
// (warnings and up) goes to relayLog, off the status screen.
func (d *demo) startRelay(ctx context.Context) error {
	ready := make(chan string, 1)
	d.registry = prometheus.NewRegistry()
	cfg := relay.Config{
		DSN:             d.dsn,
		WebhookURL:      d.consumerURL(),
		Secrets:         []string{d.secret},
		Slot:            Slot,
		Publication:     Publication,
		MetricsAddr:     "127.0.0.1:0",
		RetryMin:        relayRetryMin,
		RetryMax:        relayRetryMax,
		RequestTimeout:  5 * time.Second,
		ShutdownTimeout: relayShutdown,
		Version:         "demo",
		Logger:          zerolog.New(d.relayLog).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		Registry:        d.registry,
		Ready:           func(addr string) { ready <- addr },
	}
	d.relayRun = d.spawn(ctx, "stop the relay", func(ctx context.Context) error { return relay.Run(ctx, cfg) })
	select {
	case d.metricsAddr = <-ready:
		return nil
	case <-d.relayRun.done:
		return d.relayFailed()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// relayFailed explains a relay that returned while the demo still needed it.
func (d *demo) relayFailed() error {
	err := d.relayRun.err
	if err == nil {
		err = errors.New("stopped unexpectedly")
	}
	if tail := d.relayLog.String(); tail != "" {
		d.println("relay log, last lines:\n" + tail)
	}
	return fmt.Errorf("relay: %w", err)
}
