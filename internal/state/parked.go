package state

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A pipeline's parked aggregates, in outbox_parked_aggregates: an aggregate whose event was
// dead-lettered, held until a replay delivers it (pgstore.Pipeline calls these).

// ParkedAggregates returns pipeline's parked aggregates in schema s.
func ParkedAggregates(ctx context.Context, db DB, s, pipeline string) ([]Aggregate, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT aggregate_type, aggregate_id FROM {outbox_parked_aggregates} WHERE pipeline = $1`),
		pipeline)
	if err != nil {
		return nil, fmt.Errorf("load parked aggregates: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Aggregate])
}

// ParkedByEndpoint returns the parked aggregates of every endpoint lane of pipeline (the
// pipelines named pipeline/<endpoint id>), by endpoint id, in one query: a relay with a
// thousand endpoints starts with one read, not a thousand.
func ParkedByEndpoint(ctx context.Context, db DB, s, pipeline string) (map[string][]Aggregate, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT substr(pipeline, length($1) + 2), aggregate_type, aggregate_id
		FROM {outbox_parked_aggregates} WHERE starts_with(pipeline, $1 || '/') ORDER BY pipeline`), pipeline)
	if err != nil {
		return nil, fmt.Errorf("load the endpoints' parked aggregates: %w", err)
	}
	defer rows.Close()
	out := map[string][]Aggregate{}
	for rows.Next() {
		var id string
		var a Aggregate
		if err := rows.Scan(&id, &a.Type, &a.ID); err != nil {
			return nil, fmt.Errorf("load the endpoints' parked aggregates: %w", err)
		}
		out[id] = append(out[id], a)
	}
	return out, rows.Err()
}

// Park parks agg for pipeline behind its dead letter firstID, with the reason, and whether the
// pipeline keeps its events' state in outbox_pipeline_events (ownState).
func Park(ctx context.Context, db DB, s, pipeline string, agg Aggregate, firstID, reason string, ownState bool) error {
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_parked_aggregates} (aggregate_type, aggregate_id, first_event_id, reason, pipeline, own_state)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (pipeline, aggregate_type, aggregate_id) DO UPDATE SET first_event_id = $3, reason = $4, parked_at = now()`),
		agg.Type, agg.ID, firstID, reason, pipeline, ownState)
	return err
}

// Unpark forgets pipeline's parked aggregate agg.
func Unpark(ctx context.Context, db DB, s, pipeline string, agg Aggregate) error {
	_, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_parked_aggregates} WHERE aggregate_type = $1 AND aggregate_id = $2 AND pipeline = $3`),
		agg.Type, agg.ID, pipeline)
	return err
}

// Replayable returns agg's failed and parked events for pipeline in commit order, with the
// sequence recorded for each ("" when none was): from the rows' status, or with ownState from
// pipeline's outbox_pipeline_events.
func Replayable(ctx context.Context, db DB, s, pipeline string, agg Aggregate, ownState bool) ([]Event, error) {
	rows, err := db.Query(ctx, schema.SQL(s, replayableSQL(ownState)), agg.Type, agg.ID, pipeline)
	if err != nil {
		return nil, fmt.Errorf("load events to replay: %w", err)
	}
	return collectEvents(rows, agg)
}

// replayableSQL reads an aggregate's failed and parked events in commit order, from the row's
// status (the pipeline that owns it) or, with ownState, from outbox_pipeline_events.
func replayableSQL(ownState bool) string {
	if ownState {
		return `
		SELECT e.id::text, e.event_type, e.payload::text, coalesce(e.headers::text, ''), coalesce(p.event_sequence, ''), e.created_at,
		       coalesce(e.tenant_id, '')
		FROM {outbox_pipeline_events} p JOIN {outbox_events} e ON e.id = p.event_id
		WHERE e.aggregate_type = $1 AND e.aggregate_id = $2 AND p.pipeline = $3 AND p.status IN ('failed', 'parked')
		ORDER BY p.event_sequence, e.created_at`
	}
	return `
		SELECT id::text, event_type, payload::text, coalesce(headers::text, ''), coalesce(event_sequence, ''), created_at,
		       coalesce(tenant_id, '')
		FROM {outbox_events}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND status IN ('failed', 'parked') AND $3 <> ''
		ORDER BY event_sequence, created_at`
}

// ParkedPipelines returns the pipelines that have parked aggregates in schema s, by name.
func ParkedPipelines(ctx context.Context, db DB, s string) ([]string, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT DISTINCT pipeline FROM {outbox_parked_aggregates} ORDER BY 1`))
	if err != nil {
		return nil, fmt.Errorf("find parked pipelines: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// SelectParked returns, locked for the rest of tx, pipeline's parked aggregates that all, aggs
// or the aggregate of event eventID ("" none) name, in the order they were parked.
func SelectParked(ctx context.Context, tx DB, s, pipeline string, all bool, aggs []Aggregate, eventID string) ([]Aggregate, error) {
	var types, ids []string
	for _, a := range aggs {
		types, ids = append(types, a.Type), append(ids, a.ID)
	}
	rows, err := tx.Query(ctx, schema.SQL(s, `
		SELECT p.aggregate_type, p.aggregate_id FROM {outbox_parked_aggregates} p
		WHERE p.pipeline = $5 AND ($1
		   OR (p.aggregate_type, p.aggregate_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))
		   OR EXISTS (SELECT 1 FROM {outbox_events} e WHERE e.id::text = $4 AND e.aggregate_type = p.aggregate_type
		              AND e.aggregate_id = p.aggregate_id))
		ORDER BY p.parked_at
		FOR UPDATE`), all, types, ids, eventID, pipeline)
	if err != nil {
		return nil, fmt.Errorf("find parked aggregates: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Aggregate])
}

// ParkedEvent is a failed or parked event of a parked aggregate, as a replay's plan lists it.
type ParkedEvent struct {
	ID, EventType, Status, LastError string
}

// ParkedReason returns why pipeline's aggregate agg was parked, and whether the pipeline keeps
// its events' state in outbox_pipeline_events.
func ParkedReason(ctx context.Context, db DB, s, pipeline string, agg Aggregate) (reason string, ownState bool, err error) {
	err = db.QueryRow(ctx, schema.SQL(s, `SELECT reason, own_state FROM {outbox_parked_aggregates}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND pipeline = $3`),
		agg.Type, agg.ID, pipeline).Scan(&reason, &ownState)
	return reason, ownState, err
}

// ParkedEvents lists agg's failed and parked events for pipeline in commit order: from the rows'
// status, or with ownState from pipeline's outbox_pipeline_events.
func ParkedEvents(ctx context.Context, db DB, s, pipeline string, agg Aggregate, ownState bool) ([]ParkedEvent, error) {
	q := `
		SELECT id::text, event_type, status, coalesce(last_error, '') FROM {outbox_events}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND status IN ('failed', 'parked') AND $3 <> ''
		ORDER BY event_sequence, created_at`
	if ownState {
		q = `
		SELECT e.id::text, e.event_type, p.status, coalesce(p.last_error, '')
		FROM {outbox_pipeline_events} p JOIN {outbox_events} e ON e.id = p.event_id
		WHERE e.aggregate_type = $1 AND e.aggregate_id = $2 AND p.pipeline = $3 AND p.status IN ('failed', 'parked')
		ORDER BY p.event_sequence, e.created_at`
	}
	rows, err := db.Query(ctx, schema.SQL(s, q), agg.Type, agg.ID, pipeline)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[ParkedEvent])
}

// ParkedPerLane returns, per endpoint lane (a pipeline named P/E, see the fan-out engine), how
// many aggregates it has parked in schema s: one grouped scan, whatever the number of lanes.
func ParkedPerLane(ctx context.Context, db DB, s string) (map[string]int64, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT pipeline, count(*) FROM {outbox_parked_aggregates}
		WHERE strpos(pipeline, '/') > 0 GROUP BY pipeline`))
	if err != nil {
		return nil, fmt.Errorf("count the endpoints' parked aggregates: %w", err)
	}
	out := map[string]int64{}
	var lane string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&lane, &n}, func() error { out[lane] = n; return nil })
	return out, err
}
