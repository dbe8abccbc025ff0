package relay

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/store"
	"github.com/outbox-relay/outbox-relay/store/pgstore"
)

// defaultDeliveryLogRetention is Config.DeliveryLogRetention's zero value.
const defaultDeliveryLogRetention = 7 * 24 * time.Hour

// Pruning the delivery log: every deliveryLogPruneEvery, chunks of deliveryLogPruneChunk rows
// per table, deliveryLogPrunePause apart, so that a large backlog of old entries (the first
// run after a long stop) is deleted without long statements or a burst of WAL.
const (
	deliveryLogPruneEvery = time.Minute
	deliveryLogPruneChunk = 5000
	deliveryLogPrunePause = 50 * time.Millisecond
)

// newDeliveryLog returns the delivery-log writer of a pipeline with endpoints, nil when the
// log is off (a negative DeliveryLogRetention).
func newDeliveryLog(cfg Config, log zerolog.Logger, reg prometheus.Registerer, pool *pgxpool.Pool) *pgstore.DeliveryLog {
	if cfg.DeliveryLogRetention < 0 {
		return nil
	}
	return pgstore.NewDeliveryLog(pool, pgstore.DeliveryLogConfig{Logger: log, Registerer: reg, Schema: cfg.Schema})
}

// deliveryLogOf is w as a store.DeliveryLog: nil (nothing recorded) when w is nil, not an
// interface holding a nil pointer.
func deliveryLogOf(w *pgstore.DeliveryLog) store.DeliveryLog {
	if w == nil {
		return nil
	}
	return w
}

// hasEndpoints reports whether a pipeline delivers to endpoints, and so writes a delivery log.
func (r *runner) hasDeliveryLog() bool {
	for _, s := range r.starts {
		if s.p.Endpoints || s.p.DeliveryLog {
			return true
		}
	}
	return false
}

// pruneDeliveryLog deletes delivery-log entries older than the retention until ctx ends.
func pruneDeliveryLog(ctx context.Context, cfg Config, pool *pgxpool.Pool) {
	keep := cfg.DeliveryLogRetention
	if keep == 0 {
		keep = defaultDeliveryLogRetention
	}
	t := time.NewTicker(deliveryLogPruneEvery)
	defer t.Stop()
	var failing bool
	for {
		var attempts, deliveries int64
		var err error
		cutoff := time.Now().Add(-keep)
		for ctx.Err() == nil {
			var a, d int64
			a, d, err = state.PruneDeliveryLog(ctx, pool, cfg.Schema, cutoff, deliveryLogPruneChunk)
			attempts, deliveries = attempts+a, deliveries+d
			if err != nil || (a < deliveryLogPruneChunk && d < deliveryLogPruneChunk) {
				break
			}
			select {
			case <-ctx.Done():
			case <-time.After(deliveryLogPrunePause):
			}
		}
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true // logged once until it works again
			cfg.Logger.Warn().Err(err).Msg("pruning the delivery log failed; retrying every minute")
		case err == nil:
			failing = false
		}
		if attempts+deliveries > 0 {
			cfg.Logger.Info().Int64("failed_attempts", attempts).Int64("delivery_rows", deliveries).Time("cutoff", cutoff).
				Msg("pruned the delivery log")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
