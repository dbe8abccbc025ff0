package control

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// ReplaySelection chooses the parked aggregates to replay.
type ReplaySelection struct {
	All        bool
	Aggregates []cdc.Aggregate
	EventID    string // the aggregate of this failed or parked event
	// Pipeline is the pipeline whose parked aggregates are chosen. Empty: the only pipeline
	// with parked aggregates, or "default" when none has any; an error (ErrPipelineNeeded)
	// when several have.
	Pipeline string
	// Schema is the PostgreSQL schema of the outbox tables. Empty: as the connection's
	// search_path resolves them.
	Schema string
}

// ErrPipelineNeeded means parked aggregates of several pipelines exist and the selection names
// none.
var ErrPipelineNeeded = errors.New("several pipelines have parked aggregates: choose one")

// ReplayItem is one event a replay re-sends.
type ReplayItem struct {
	ID        string `json:"id"`
	EventType string `json:"event_type"`
	Status    string `json:"status"`
	LastError string `json:"last_error,omitempty"`
}

// ReplayPlan is what a replay re-sends, per aggregate, in commit order.
type ReplayPlan struct {
	Aggregate cdc.Aggregate `json:"aggregate"`
	Reason    string        `json:"reason"`
	Events    []ReplayItem  `json:"events"`
}

// ErrNothingToReplay means the selection names no parked aggregate.
var ErrNothingToReplay = errors.New("nothing to replay: no parked aggregate matches")

// RequestReplay finds the parked aggregates the selection names and, unless dryRun, writes a
// replay request into the WAL as a transactional logical decoding message. The relay meets the
// request at its place in the stream, after every event committed before it and before every
// event committed after it, and re-sends the aggregates' failed and parked events there, in
// their original order and with their original ids, then unparks them.
func RequestReplay(ctx context.Context, conn *pgx.Conn, sel ReplaySelection, dryRun bool) ([]ReplayPlan, error) {
	var plans []ReplayPlan
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if sel.Pipeline == "" {
			var names []string
			rows, err := tx.Query(ctx, schema.SQL(sel.Schema, `SELECT DISTINCT pipeline FROM {outbox_parked_aggregates} ORDER BY 1`))
			if err != nil {
				return fmt.Errorf("find parked pipelines: %w", err)
			}
			if names, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
				return err
			}
			switch len(names) {
			case 0:
				sel.Pipeline = "default"
			case 1:
				sel.Pipeline = names[0]
			default:
				return fmt.Errorf("%w (%s)", ErrPipelineNeeded, strings.Join(names, ", "))
			}
		}
		aggs, err := selectParked(ctx, tx, sel)
		if err != nil {
			return err
		}
		if len(aggs) == 0 {
			return ErrNothingToReplay
		}
		for _, a := range aggs {
			plan, err := planFor(ctx, tx, sel.Schema, a, sel.Pipeline)
			if err != nil {
				return err
			}
			plans = append(plans, plan)
		}
		if dryRun {
			return nil
		}
		return emitReplay(ctx, tx, aggs, sel.Pipeline)
	})
	return plans, err
}

func selectParked(ctx context.Context, tx pgx.Tx, sel ReplaySelection) ([]cdc.Aggregate, error) {
	var types, ids []string
	for _, a := range sel.Aggregates {
		types, ids = append(types, a.Type), append(ids, a.ID)
	}
	rows, err := tx.Query(ctx, schema.SQL(sel.Schema, `
		SELECT p.aggregate_type, p.aggregate_id FROM {outbox_parked_aggregates} p
		WHERE p.pipeline = $5 AND ($1
		   OR (p.aggregate_type, p.aggregate_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))
		   OR EXISTS (SELECT 1 FROM {outbox_events} e WHERE e.id::text = $4 AND e.aggregate_type = p.aggregate_type
		              AND e.aggregate_id = p.aggregate_id))
		ORDER BY p.parked_at
		FOR UPDATE`), sel.All, types, ids, sel.EventID, sel.Pipeline)
	if err != nil {
		return nil, fmt.Errorf("find parked aggregates: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[cdc.Aggregate])
}

func planFor(ctx context.Context, tx pgx.Tx, s string, a cdc.Aggregate, pipeline string) (ReplayPlan, error) {
	plan := ReplayPlan{Aggregate: a}
	var own bool
	if err := tx.QueryRow(ctx, schema.SQL(s, `SELECT reason, own_state FROM {outbox_parked_aggregates}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND pipeline = $3`),
		a.Type, a.ID, pipeline).Scan(&plan.Reason, &own); err != nil {
		return plan, err
	}
	q := `
		SELECT id::text, event_type, status, coalesce(last_error, '') FROM {outbox_events}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND status IN ('failed', 'parked') AND $3 <> ''
		ORDER BY event_sequence, created_at`
	if own {
		q = `
		SELECT e.id::text, e.event_type, p.status, coalesce(p.last_error, '')
		FROM {outbox_pipeline_events} p JOIN {outbox_events} e ON e.id = p.event_id
		WHERE e.aggregate_type = $1 AND e.aggregate_id = $2 AND p.pipeline = $3 AND p.status IN ('failed', 'parked')
		ORDER BY p.event_sequence, e.created_at`
	}
	rows, err := tx.Query(ctx, schema.SQL(s, q), a.Type, a.ID, pipeline)
	if err != nil {
		return plan, err
	}
	plan.Events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ReplayItem])
	return plan, err
}

func emitReplay(ctx context.Context, tx pgx.Tx, aggs []cdc.Aggregate, pipeline string) error {
	if pipeline == "default" {
		pipeline = "" // as before pipelines: a relay of an older release obeys it too
	}
	return cdc.ReplayRequest{Aggregates: aggs, Pipeline: pipeline}.Emit(ctx, tx)
}
