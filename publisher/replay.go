package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// ReplaySelection chooses the parked aggregates to replay.
type ReplaySelection struct {
	All        bool
	Aggregates []cdc.Aggregate
	EventID    string // the aggregate of this failed or parked event
}

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
		aggs, err := selectParked(ctx, tx, sel)
		if err != nil {
			return err
		}
		if len(aggs) == 0 {
			return ErrNothingToReplay
		}
		for _, a := range aggs {
			plan, err := planFor(ctx, tx, a)
			if err != nil {
				return err
			}
			plans = append(plans, plan)
		}
		if dryRun {
			return nil
		}
		return emitReplay(ctx, tx, aggs)
	})
	return plans, err
}

func selectParked(ctx context.Context, tx pgx.Tx, sel ReplaySelection) ([]cdc.Aggregate, error) {
	var types, ids []string
	for _, a := range sel.Aggregates {
		types, ids = append(types, a.Type), append(ids, a.ID)
	}
	rows, err := tx.Query(ctx, `
		SELECT p.aggregate_type, p.aggregate_id FROM outbox_parked_aggregates p
		WHERE $1
		   OR (p.aggregate_type, p.aggregate_id) IN (SELECT * FROM unnest($2::text[], $3::text[]))
		   OR EXISTS (SELECT 1 FROM outbox_events e WHERE e.id::text = $4 AND e.aggregate_type = p.aggregate_type
		              AND e.aggregate_id = p.aggregate_id)
		ORDER BY p.parked_at
		FOR UPDATE`, sel.All, types, ids, sel.EventID)
	if err != nil {
		return nil, fmt.Errorf("find parked aggregates: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[cdc.Aggregate])
}

func planFor(ctx context.Context, tx pgx.Tx, a cdc.Aggregate) (ReplayPlan, error) {
	plan := ReplayPlan{Aggregate: a}
	if err := tx.QueryRow(ctx, `SELECT reason FROM outbox_parked_aggregates WHERE aggregate_type = $1 AND aggregate_id = $2`,
		a.Type, a.ID).Scan(&plan.Reason); err != nil {
		return plan, err
	}
	rows, err := tx.Query(ctx, `
		SELECT id::text, event_type, status, coalesce(last_error, '') FROM outbox_events
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND status IN ('failed', 'parked')
		ORDER BY event_sequence, created_at`, a.Type, a.ID)
	if err != nil {
		return plan, err
	}
	plan.Events, err = pgx.CollectRows(rows, pgx.RowToStructByPos[ReplayItem])
	return plan, err
}

func emitReplay(ctx context.Context, tx pgx.Tx, aggs []cdc.Aggregate) error {
	body, err := json.Marshal(cdc.ReplayRequest{Aggregates: aggs})
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, cdc.ReplayPrefix, string(body))
	if err != nil {
		return fmt.Errorf("write replay request: %w", err)
	}
	return nil
}
