package inspect

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/migrations"
)

// ErrForeignTable is wrapped by the error CheckSchema returns when outbox_events exists but was
// not created by `outbox-relay migrate`.
var ErrForeignTable = errors.New("table outbox_events is not the relay's table")

// coreColumns are the outbox_events columns of the first migration: in a database never
// migrated, a table without them is someone else's. laterColumns were added by later migrations.
var (
	coreColumns  = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "status", "retries", "created_at", "processed_at"}
	laterColumns = []string{"last_error", "headers", "event_sequence"}
	laterTables  = []string{"outbox_parked_aggregates", "outbox_backfill", "outbox_pipeline_events", "outbox_pipeline_control",
		"outbox_replays", "outbox_slot_location"}
)

// CheckSchema checks that the database holds the schema this binary needs: outbox_events with
// the relay's columns, migrated to migrations.Latest. It only reads the catalog and
// goose_db_version, so it leaves nothing behind. Its errors wrap ErrNoSchema or ErrForeignTable
// and name the fix.
func CheckSchema(ctx context.Context, db DB) error {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('outbox_events') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("look up outbox_events: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w: table outbox_events does not exist in this database (or is not on search_path): "+
			"run `outbox-relay migrate`", ErrNoSchema)
	}
	cols, err := outboxColumns(ctx, db)
	if err != nil {
		return err
	}
	applied, err := migrations.Applied(ctx, db)
	if err != nil {
		return err
	}
	if missing := without(coreColumns, cols); applied == 0 && len(missing) > 0 {
		return fmt.Errorf("%w: it lacks column(s) %s (it has %s), so it was not created by `outbox-relay migrate`; "+
			"rename it (ALTER TABLE outbox_events RENAME TO outbox_events_old) or give the relay another database or schema, "+
			"then run `outbox-relay migrate`", ErrForeignTable, strings.Join(missing, ", "), strings.Join(cols, ", "))
	}
	if need := migrations.Latest(); applied < need {
		return fmt.Errorf("%w: the schema is at version %d and this binary needs version %d: run `outbox-relay migrate`",
			ErrNoSchema, applied, need)
	}
	return checkAltered(ctx, db, cols, applied)
}

// checkAltered finds what a hand edit removed after the migrations recorded in goose_db_version.
func checkAltered(ctx context.Context, db DB, cols []string, applied int64) error {
	missing := without(append(slices.Clone(coreColumns), laterColumns...), cols)
	for _, t := range laterTables {
		var exists bool
		if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, t).Scan(&exists); err != nil {
			return fmt.Errorf("look up %s: %w", t, err)
		}
		if !exists {
			missing = append(missing, "table "+t)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s missing although goose_db_version records version %d: the schema was altered by hand; "+
		"restore them as the migrations create them (migrations/*.sql; `outbox-relay migrate` does not apply a version twice)",
		ErrNoSchema, strings.Join(missing, ", "), applied)
}

// outboxColumns lists outbox_events' columns in order.
func outboxColumns(ctx context.Context, db DB) ([]string, error) {
	rows, err := db.Query(ctx, `SELECT attname::text FROM pg_attribute
		WHERE attrelid = to_regclass('outbox_events') AND attnum > 0 AND NOT attisdropped ORDER BY attnum`)
	if err != nil {
		return nil, fmt.Errorf("look up outbox_events: %w", err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("look up outbox_events: %w", err)
	}
	return cols, nil
}

func without(want, have []string) []string {
	var missing []string
	for _, c := range want {
		if !slices.Contains(have, c) {
			missing = append(missing, c)
		}
	}
	return missing
}
