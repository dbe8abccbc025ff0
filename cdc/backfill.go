package cdc

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// createSlotWithBackfill creates the slot over a replication connection with an exported
// snapshot, and in that snapshot records the slot in outbox_slots and, if backfill, every
// pending outbox row in outbox_backfill: exactly the rows committed before the slot's
// consistent point, which the stream will never carry. It reports how many rows it recorded and
// whether they are in commit order (see backfillOrder). If recording fails, the new slot is
// dropped again so a retry starts clean.
func createSlotWithBackfill(ctx context.Context, dsn string, conn *pgx.Conn, slot, publication, s string, backfill bool, filter string) (int, bool, error) {
	if err := checkSlotRoom(ctx, conn, slot); err != nil {
		return 0, false, err
	}
	if err := holdBackfill(ctx, conn, s, slot, backfill); err != nil {
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

// holdBackfill marks slot's backfill as outstanding before the slot exists, with a placeholder
// row (position 0, which no page reads) that recording the real rows replaces in one
// transaction: whoever waits for the backfill to be delivered (a reshard's fence, see
// control.RecordFence) never sees the new slot without a backfill in the moment between its
// creation and the recording.
func holdBackfill(ctx context.Context, conn *pgx.Conn, s, slot string, backfill bool) error {
	if !backfill {
		return nil
	}
	_, err := conn.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_backfill} (slot, position, event_id)
		VALUES ($1, 0, '00000000-0000-0000-0000-000000000000') ON CONFLICT DO NOTHING`), slot)
	if err != nil {
		return fmt.Errorf("record that slot %q will backfill: %w", slot, err)
	}
	return nil
}

func trackCommitTimestamp(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var on string
	if err := conn.QueryRow(ctx, "SHOW track_commit_timestamp").Scan(&on); err != nil {
		return false, fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	return on == "on", nil
}

// backfillOrder is the order in which a backfill delivers rows.
//
// Within one transaction: insert_seq, the insertion order (created_at is the transaction's
// start, so all its rows tie). Across transactions, with track_commit_timestamp = on: the
// commit timestamp of the row's inserting transaction, then insert_seq; transactions that
// committed before the setting was on have none and come first. Two transactions can commit
// within the same microsecond; they then go in insertion order. The commit LSN would be exact,
// but it cannot be read from a row. Without the setting: insertion order (insert_seq), which
// for overlapping transactions is not always their commit order. Rows written before migration
// 6 have no insert_seq; they come first, by created_at then id.
func backfillOrder(commitOrder bool) string {
	order := "insert_seq NULLS FIRST, created_at, id"
	if commitOrder {
		order = "pg_xact_commit_timestamp(xmin) NULLS FIRST, " + order
	}
	return order
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
		tag, err := tx.Exec(ctx, schema.SQL(s, `
			INSERT INTO {outbox_backfill} (slot, position, event_id)
			SELECT $1, row_number() OVER (ORDER BY `+backfillOrder(commitOrder)+`), id
			FROM {outbox_events} WHERE `)+pendingWhere(filter), slot)
		if err != nil {
			return 0, err
		}
		n = tag.RowsAffected()
	}
	return int(n), tx.Commit(ctx)
}

// pendingWhere selects the pending rows the pipeline's publication would carry.
func pendingWhere(filter string) string {
	if filter == "" {
		return "status = 'pending'"
	}
	return "status = 'pending' AND (" + filter + ")"
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
