package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// createSlotWithBackfill creates the slot over a replication connection with an exported
// snapshot, and in that snapshot records the slot in outbox_slots and, if backfill, every
// pending outbox row in outbox_backfill: exactly the rows committed before the slot's
// consistent point, which the stream will never carry. It reports how many rows it recorded and
// whether they are in commit order (see internal/state's backfillOrder). If recording fails, the new slot is
// dropped again so a retry starts clean.
func createSlotWithBackfill(ctx context.Context, dsn string, conn *pgx.Conn, slot, publication, s string, backfill bool, filter string) (int, bool, error) {
	if err := checkSlotRoom(ctx, conn, slot); err != nil {
		return 0, false, err
	}
	if err := state.HoldBackfill(ctx, conn, s, slot, backfill); err != nil {
		return 0, false, err
	}
	repl, err := (&Stream{cfg: Config{DSN: dsn}}).connect(ctx)
	if err != nil {
		return 0, false, err
	}
	defer repl.Close(context.Background())
	res, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	if isSlotLimit(err) {
		return 0, false, slotLimitError(ctx, conn, slot, err)
	}
	if err != nil {
		return 0, false, fmt.Errorf("create slot %q with a snapshot: %w", slot, err)
	}
	commitOrder, err := trackCommitTimestamp(ctx, conn)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, false, err
	}
	n, err := recordBackfill(ctx, conn, slot, publication, s, res.SnapshotName, backfill, commitOrder, filter)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, false, fmt.Errorf("record backfill (slot %q dropped again; start once more): %w", slot, err)
	}
	return n, commitOrder, nil
}

func trackCommitTimestamp(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var on string
	if err := conn.QueryRow(ctx, "SHOW track_commit_timestamp").Scan(&on); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return on == "on", nil
}

func recordBackfill(ctx context.Context, conn *pgx.Conn, slot, publication, s, snapshot string, backfill, commitOrder bool, filter string) (int, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return 0, err
	}
	var xmin int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
		return 0, err
	}
	if err := state.RecordSlot(ctx, tx, s, slot, publication, xmin, backfill); err != nil {
		return 0, err
	}
	var n int64
	if backfill {
		if n, err = state.RecordBackfill(ctx, tx, s, slot, commitOrder, filter); err != nil {
			return 0, err
		}
	}
	return int(n), tx.Commit(ctx)
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
