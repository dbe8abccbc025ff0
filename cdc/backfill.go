package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// createSlotWithBackfill creates the slot over a replication connection with an exported
// snapshot, and in that snapshot records every pending outbox row in outbox_backfill: exactly
// the rows committed before the slot's consistent point, which the stream will never carry.
// Rows are ordered by created_at, then id. If recording fails, the new slot is dropped again so
// a retry starts clean.
func createSlotWithBackfill(ctx context.Context, dsn string, conn *pgx.Conn, slot string) (int, error) {
	repl, err := (&Stream{cfg: Config{DSN: dsn}}).connect(ctx)
	if err != nil {
		return 0, err
	}
	defer repl.Close(context.Background())
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if err != nil {
		return 0, fmt.Errorf("create slot %q with a snapshot: %w", slot, err)
	}
	n, err := recordBackfill(ctx, conn, slot, res.SnapshotName)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, fmt.Errorf("record backfill (slot %q dropped again; start once more): %w", slot, err)
	}
	return n, nil
}

func recordBackfill(ctx context.Context, conn *pgx.Conn, slot, snapshot string) (int, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, `
		INSERT INTO outbox_backfill (slot, position, event_id)
		SELECT $1, row_number() OVER (ORDER BY created_at, id), id FROM outbox_events WHERE status = 'pending'`, slot)
	if err != nil {
		return 0, err
	}
	return int(tag.RowsAffected()), tx.Commit(ctx)
}

func quoteLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
