package state

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// What `outbox-relay endpoint remove` drops with an endpoint: in every pipeline run with
// endpoints, the events of its backlog (outbox_endpoint_backlog), its dead letters and parked
// aggregates (its lane's, named <pipeline>/<endpoint id>, in outbox_pipeline_events and
// outbox_parked_aggregates). The relay's lane forgets them when it applies the removal; the
// command deletes them with the row, so that nothing is left to keep a row from prune or to be
// replayed to an endpoint that is gone.

// EndpointHolds counts what an endpoint still holds, over every pipeline.
type EndpointHolds struct {
	Backlog     int64 // events in its backlog
	DeadLetters int64 // events its lanes dead-lettered
	Parked      int64 // aggregates its lanes parked
}

// Empty reports whether the endpoint holds nothing.
func (h EndpointHolds) Empty() bool { return h.Backlog+h.DeadLetters+h.Parked == 0 }

// endpointLanes returns the pipelines run with endpoints in schema s (each wrote its bootstrap
// marker in outbox_endpoint_versions) and endpoint id's lane in each, <pipeline>/<id>, so that
// the lookups below go through the primary keys, which lead with the pipeline; and whether s
// has outbox_endpoint_backlog (a schema before migration 15 has none, and so no backlog).
func endpointLanes(ctx context.Context, db DB, s, id string) (pipelines, lanes []string, backlog bool, err error) {
	var versions bool
	err = db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		schema.Qualify(s, schema.EndpointVersions), schema.Qualify(s, schema.EndpointBacklog)).Scan(&versions, &backlog)
	if err != nil || !versions {
		return nil, nil, false, err
	}
	if pipelines, err = EndpointPipelines(ctx, db, s); err != nil {
		return nil, nil, false, err
	}
	for _, p := range pipelines {
		lanes = append(lanes, p+"/"+id)
	}
	return pipelines, lanes, backlog, nil
}

// holdsSQL counts what an endpoint holds: its backlog in pipelines $1 (endpoint id $2), the
// dead letters and parked aggregates of its lanes $3.
const holdsSQL = `
SELECT (SELECT count(*) FROM {outbox_endpoint_backlog} WHERE pipeline = ANY($1) AND endpoint_id = $2),
       (SELECT count(*) FROM {outbox_pipeline_events} WHERE pipeline = ANY($3) AND status = 'failed'),
       (SELECT count(*) FROM {outbox_parked_aggregates} WHERE pipeline = ANY($3))`

// holdsSQLNoBacklog is holdsSQL for a schema without outbox_endpoint_backlog.
const holdsSQLNoBacklog = `
SELECT 0::bigint, (SELECT count(*) FROM {outbox_pipeline_events} WHERE pipeline = ANY($1) AND status = 'failed'),
       (SELECT count(*) FROM {outbox_parked_aggregates} WHERE pipeline = ANY($1))`

// CountEndpointHolds counts what endpoint id of schema s holds.
func CountEndpointHolds(ctx context.Context, db DB, s, id string) (EndpointHolds, error) {
	var h EndpointHolds
	pipelines, lanes, backlog, err := endpointLanes(ctx, db, s, id)
	if err != nil || len(lanes) == 0 {
		return h, err
	}
	query, args := holdsSQLNoBacklog, []any{lanes}
	if backlog {
		query, args = holdsSQL, []any{pipelines, id, lanes}
	}
	if err := db.QueryRow(ctx, schema.SQL(s, query), args...).Scan(&h.Backlog, &h.DeadLetters, &h.Parked); err != nil {
		return h, fmt.Errorf("count what endpoint %s holds: %w", id, err)
	}
	return h, nil
}

// DropEndpointHolds deletes what endpoint id of schema s holds: its backlog, its lanes'
// dead-lettered and parked events and their parked aggregates. Their abandoned entries stay:
// they record what was not sent, and keep no row from prune.
func DropEndpointHolds(ctx context.Context, db DB, s, id string) error {
	pipelines, lanes, backlog, err := endpointLanes(ctx, db, s, id)
	if err != nil || len(lanes) == 0 {
		return err
	}
	type stmt struct {
		sql  string
		args []any
	}
	stmts := []stmt{
		{`DELETE FROM {outbox_pipeline_events} WHERE pipeline = ANY($1) AND status IN ('failed', 'parked')`, []any{lanes}},
		{`DELETE FROM {outbox_parked_aggregates} WHERE pipeline = ANY($1)`, []any{lanes}},
	}
	if backlog {
		stmts = append(stmts, stmt{`DELETE FROM {outbox_endpoint_backlog} WHERE pipeline = ANY($1) AND endpoint_id = $2`,
			[]any{pipelines, id}})
	}
	for _, q := range stmts {
		if _, err := db.Exec(ctx, schema.SQL(s, q.sql), q.args...); err != nil {
			return fmt.Errorf("drop what endpoint %s holds: %w", id, err)
		}
	}
	return nil
}
