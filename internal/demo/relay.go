package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/destination/natsdest"
	"github.com/outbox-relay/outbox-relay/relay"
)

// Pipeline names of the demo: every order to the warehouse, and big orders only (filtered by
// the publication, in PostgreSQL) to an audit endpoint.
const (
	pipelineWarehouse = "demo"
	pipelineAudit     = "demo_big"
	// auditFilter is the audit pipeline's row filter.
	auditFilter = "(payload->'total')::numeric >= 400"
)

// startRelay runs the relay with the demo's two pipelines on its registry, and returns once it
// serves metrics. Its log (warnings and up) goes to relayLog, off the status screen.
func (d *demo) startRelay(ctx context.Context) error {
	ready := make(chan string, 1)
	d.registry = prometheus.NewRegistry()
	warehouse := relay.Pipeline{Name: pipelineWarehouse, WebhookURL: d.consumerURL(), Secrets: []string{d.secret}, Slot: Slot,
		Publication: Publication, RetryMin: relayRetryMin, RetryMax: relayRetryMax, RequestTimeout: 5 * time.Second}
	if d.nats != nil {
		// The relay creates the stream; a publish waits at most 2s for its PubAck, so that one
		// sent while the broker is down is retried soon after it is back.
		warehouse.WebhookURL, warehouse.Secrets, warehouse.RequestTimeout = "", nil, 2*time.Second
		warehouse.Destination = natsdest.Config{URL: d.nats.URL(), CreateStream: &natsdest.StreamConfig{Name: natsStream}}
	}
	metricsAddr, err := freeAddr()
	if err != nil {
		return err
	}
	cfg := relay.Config{
		DSN: d.dsn,
		Pipelines: []relay.Pipeline{
			warehouse,
			{Name: pipelineAudit, Filter: auditFilter, WebhookURL: d.auditURL(), Secrets: []string{d.secret}, Slot: AuditSlot,
				Publication: AuditPublication, RetryMin: relayRetryMin, RetryMax: relayRetryMax, RequestTimeout: 5 * time.Second},
			{Name: pipelinePartners, Endpoints: true, Slot: PartnersSlot, Publication: PartnersPublication,
				RetryMin: relayRetryMin, RetryMax: relayRetryMax, RequestTimeout: 5 * time.Second},
		},
		MetricsAddr:     metricsAddr,
		ShutdownTimeout: relayShutdown,
		Version:         "demo",
		Logger:          zerolog.New(d.relayLog).Level(zerolog.WarnLevel).With().Timestamp().Logger(),
		Registerer:      d.registry,
		Ready:           func(addr string) { ready <- addr },
	}
	d.relayRun = d.spawn(ctx, "stop the relay", func(ctx context.Context) error { return relay.Run(ctx, cfg) })
	select {
	case d.metricsAddr = <-ready:
		return d.waitSlots(ctx)
	case <-d.relayRun.done:
		return d.relayFailed()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// freeAddr returns a local address with a port free a moment ago, for the relay's metrics: the
// endpoints' URL guard refuses the metrics port, so it must be a number, not ":0".
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a port for the relay's metrics: %w", err)
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
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

// waitSlots waits until every pipeline's slot exists: rows committed earlier would not be in
// their streams.
func (d *demo) waitSlots(ctx context.Context) error {
	for {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots
			WHERE slot_name IN ($1, $2, $3) AND database = current_database()`, Slot, AuditSlot, PartnersSlot).Scan(&n)
		if err == nil && n == 3 {
			return nil
		}
		select {
		case <-d.relayRun.done:
			return d.relayFailed()
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// audit is the second pipeline's destination: it accepts every POST and counts them.
type audit struct {
	received atomic.Int64
}

func (a *audit) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	a.received.Add(1)
	w.WriteHeader(http.StatusNoContent)
}

// startAudit serves the audit endpoint on a local port until teardown.
func (d *demo) startAudit(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("audit endpoint: %w", err)
	}
	d.audit = &audit{}
	d.auditAddr = ln.Addr().String()
	srv := &http.Server{Handler: d.audit, ReadHeaderTimeout: 5 * time.Second}
	d.spawn(ctx, "stop the audit endpoint", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			_ = srv.Close()
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	return nil
}

func (d *demo) auditURL() string { return "http://" + d.auditAddr + "/audit" }
