package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// What `outbox-relay status --endpoints` reads: each endpoint's state (outbox_endpoints), what
// each lane last reported (EndpointStatuses, endpoints.go), the lanes' parked aggregates
// (ParkedPerLane, parked.go) and the events in the endpoints' backlogs (BacklogPerLane). One
// query per table whatever the number of endpoints: the report of 5,000 endpoints is a handful
// of statements, merged by the caller.

// EndpointState is an endpoint's state as its row holds it.
type EndpointState struct {
	ID       string
	TenantID string    // "": none (the endpoint receives every tenant's events)
	State    string    // enabled, paused or disabled
	Reason   string    // the paused or disabled reason ("" when none was given, or enabled)
	Since    time.Time // when it was paused or disabled (zero when enabled)
}

// EndpointStates returns every endpoint of schema s with its state, by id.
func EndpointStates(ctx context.Context, db DB, s string) ([]EndpointState, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `
		SELECT id, coalesce(tenant_id, ''), state,
		       coalesce(CASE state WHEN 'paused' THEN paused_reason WHEN 'disabled' THEN disabled_reason END, ''),
		       CASE state WHEN 'paused' THEN paused_at WHEN 'disabled' THEN disabled_at END
		FROM {outbox_endpoints} ORDER BY id`))
	if err != nil {
		return nil, fmt.Errorf("read the endpoints: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EndpointState, error) {
		var e EndpointState
		var since *time.Time
		err := r.Scan(&e.ID, &e.TenantID, &e.State, &e.Reason, &since)
		if since != nil {
			e.Since = *since
		}
		return e, err
	})
}

// EndpointPipelines returns the pipelines (or shards) of schema s that run with endpoints, by
// name: those that recorded endpoint versions, whose bootstrap marker (the empty endpoint id) every
// pipeline run with endpoints writes when it starts.
func EndpointPipelines(ctx context.Context, db DB, s string) ([]string, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT DISTINCT pipeline FROM {outbox_endpoint_versions} ORDER BY 1`))
	if err != nil {
		return nil, fmt.Errorf("find the pipelines with endpoints: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// BacklogPerLane returns, per endpoint lane (P/E), how many events the endpoint's backlog holds
// in pipeline P of schema s: one grouped scan, whatever the number of endpoints. A schema before
// migration 15 has no backlog table, and so no backlog.
func BacklogPerLane(ctx context.Context, db DB, s string) (map[string]int64, error) {
	out := map[string]int64{}
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, schema.EndpointBacklog)).Scan(&exists); err != nil || !exists {
		return out, err
	}
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT pipeline || '/' || endpoint_id, count(*) FROM {outbox_endpoint_backlog}
		GROUP BY pipeline, endpoint_id`))
	if err != nil {
		return nil, fmt.Errorf("count the endpoints' backlogs: %w", err)
	}
	var lane string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&lane, &n}, func() error { out[lane] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("count the endpoints' backlogs: %w", err)
	}
	return out, nil
}
