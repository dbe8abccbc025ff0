package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/publisher"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/endpointdest"
	"github.com/outbox-relay/outbox-relay/internal/seal"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/internal/tracing"
)

// endpointMarkInterval is how long the done-marks of a pipeline with endpoints wait to be
// written together (unless 1,000 wait).
const endpointMarkInterval = 500 * time.Millisecond

// deliverer is what a pipeline delivers with: a Publisher (one destination) or a Fanout (the
// partner endpoints).
type deliverer interface {
	Run(ctx context.Context, in <-chan *cdc.Tx)
	Pause(reason string)
	Resume()
	Paused() (bool, string)
}

// validateEndpoints checks a pipeline with endpoints: what it takes from its rows is not set on
// the pipeline.
func (p *Pipeline) validateEndpoints() error {
	switch {
	case p.Shadow:
		return fmt.Errorf("%w %q: a pipeline with endpoints cannot be a shadow; drop shadow, or endpoints", ErrPipeline, p.Name)
	case len(p.Secrets) > 0:
		return fmt.Errorf("%w %q: a pipeline with endpoints signs with each endpoint's own secrets: drop the webhook secret "+
			"(each endpoint's is set with `outbox-relay endpoint add/rotate-secret`)", ErrPipeline, p.Name)
	case p.Delivery.Batch.MaxEvents > 1 || p.Delivery.Format != "" && p.Delivery.Format != webhook.FormatRaw ||
		p.Delivery.Compression != "" && p.Delivery.Compression != webhook.CompressionNone:
		return fmt.Errorf("%w %q: a pipeline with endpoints sends one event per request in each endpoint's own format "+
			"(its row's format column): drop batch, format and compression from the pipeline", ErrPipeline, p.Name)
	}
	return p.validatePolicies()
}

// newFanout builds the fan-out of a pipeline with endpoints. Its endpoint destinations are
// built from their rows: secrets opened with cfg.SecretsKeys, URLs checked and dialled through
// the guard (which refuses the relay's own metrics address and link-local/metadata addresses
// unless the row allows private URLs).
func newFanout(cfg Config, p Pipeline, owner bool, reg prometheus.Registerer, pool *pgxpool.Pool, acker publisher.Acker,
	marks store.Marks, resume *publisher.Resume, confirmed func() pglogrepl.LSN, dlog *pgstore.DeliveryLog, slot publisher.Slot) *publisher.Publisher {
	log := cfg.pipelineLogger(p)
	var ring *seal.Keyring
	var ringErr error
	if cfg.SecretsKeys != "" {
		ring, ringErr = seal.Parse(cfg.SecretsKeys)
	}
	metricsAddr := cfg.MetricsAddr
	if cfg.metricsBound != "" {
		metricsAddr = cfg.metricsBound
	}
	guard, guardErr := endpoint.NewGuard(metricsAddr)
	if guard != nil {
		guard.Egress = endpoint.Egress(cfg.Egress)
	}
	eps := endpoints.Store{Schema: cfg.Schema}
	open := func(id string, raw []byte) (destination.Destination, func(), time.Time, error) {
		switch {
		case ringErr != nil:
			return nil, nil, time.Time{}, fmt.Errorf("the secrets keys (OUTBOX_RELAY_SECRETS_KEY or --secrets-key-file): %w", ringErr)
		case guardErr != nil:
			return nil, nil, time.Time{}, guardErr
		}
		var row endpoint.Row
		if err := json.Unmarshal(raw, &row); err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("endpoint %s: its row does not decode: %w", id, err)
		}
		maxConns := row.MaxInFlight
		if maxConns <= 0 {
			maxConns = settings.EndpointMaxInFlight
		}
		w, next, err := endpointdest.Open(row, endpointdest.Options{Guard: guard, Ring: ring, Proxy: cfg.EgressProxy,
			Resolver: cfg.Resolver, Timeout: p.RequestTimeout, MaxConns: maxConns, UserAgent: "outbox-relay/" + cfg.Version,
			Source: "/outbox-relay/" + p.Name})
		var oe *endpointdest.Error
		switch {
		case errors.As(err, &oe) && oe.Field == "url":
			return nil, nil, time.Time{}, fmt.Errorf("endpoint %s: %w (fix: outbox-relay endpoint update %s --url ...)", id, err, id)
		case errors.As(err, &oe) && oe.Field == "secrets":
			return nil, nil, time.Time{}, err
		case err != nil:
			return nil, nil, time.Time{}, fmt.Errorf("endpoint %s: %w", id, err)
		}
		return tracing.Destination(w, cfg.tracer, tracing.Target{Pipeline: p.Name, Endpoint: id}), w.Close, next, nil
	}
	disable := func(ctx context.Context, id, reason string) error {
		// The conditional update: of the shards (and relays) that disable the endpoint at once,
		// one changes the row; the others are told, and notify nobody.
		_, changed, err := eps.DisableOnce(ctx, pool, id, reason)
		switch {
		case errors.Is(err, endpoints.ErrNotFound) || errors.Is(err, endpoints.ErrState):
			return fmt.Errorf("disable endpoint %s: %w", id, publisher.ErrDisabledAlready) // removed meanwhile
		case err != nil:
			return err
		case !changed:
			return fmt.Errorf("disable endpoint %s: %w", id, publisher.ErrDisabledAlready)
		}
		return nil
	}
	// The outage record: of the shards (and relays) that see the endpoint recover, the one that
	// ends it notifies.
	outage := func(ctx context.Context, id string, began bool) (bool, error) {
		if began {
			return false, state.BeginOutage(ctx, pool, cfg.Schema, id)
		}
		return state.EndOutage(ctx, pool, cfg.Schema, id)
	}
	workers := max(p.MaxInFlight, settings.EndpointWorkers)
	return publisher.NewFanout(publisher.FanoutConfig{Pipeline: p.Name, Workers: workers, RetryMin: p.RetryMin,
		RetryMax: p.RetryMax, MaxAttempts: p.MaxAttempts, ShutdownTimeout: cfg.ShutdownTimeout, LogPayloads: cfg.LogPayloads,
		Logger: log, Registerer: reg,
		Store:        pgstore.Pipeline{Pool: pool, Pipeline: p.Name, OwnState: !owner, Schema: cfg.Schema},
		BackfillSlot: p.Slot, Resume: resume,
		Endpoints: pgstore.Endpoints{Pool: pool, Pipeline: p.Name, Schema: cfg.Schema},
		LaneStore: func(name string) store.Pipeline {
			return pgstore.Pipeline{Pool: pool, Pipeline: name, OwnState: true, Schema: cfg.Schema}
		},
		Open: open, Disable: disable, Outage: outage, Confirmed: confirmed, MetricsEndpoints: cfg.EndpointMetrics, MetricsMax: cfg.EndpointMetricsMax,
		Backlog:    pgstore.Backlog{Pool: pool, Pipeline: p.Name, Schema: cfg.Schema},
		SpillAfter: p.SpillAfter, SpillSize: p.SpillSize, DisableAfter: p.EndpointDisableAfter, Notify: cfg.operator.notifier(),
		DeliveryLog: deliveryLogOf(dlog), Slot: slot, Shard: p.shard.index, Shards: p.shard.of,
	}, acker, marks)
}
