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
// consistent point, which the stream will never carry; with opts.Endpoints, the endpoints as of
// that point too (state.BootstrapEndpointVersions, at bootstrapLSN). It reports how many rows it recorded and whether they are
// in commit order (see internal/state's backfillOrder). If recording fails, the new slot is
// dropped again so a retry starts clean.
func createSlotWithBackfill(ctx context.Context, dsn string, conn *pgx.Conn, slot, publication, s string, backfill bool,
	opts SetupOptions) (int, bool, error) {
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
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, false, fmt.Errorf("slot %q: consistent point %q: %w", slot, res.ConsistentPoint, err)
	}
	snap := snapshotRecord{slot: slot, publication: publication, schema: s, snapshot: res.SnapshotName, start: start,
		backfill: backfill, commitOrder: commitOrder, opts: opts}
	n, err := snap.record(ctx, conn)
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

// snapshotRecord is what a new slot's exported snapshot is read for.
type snapshotRecord struct {
	slot, publication, schema string
	snapshot                  string        // the exported snapshot's name
	start                     pglogrepl.LSN // the slot's consistent point
	backfill, commitOrder     bool
	opts                      SetupOptions
}

// record writes, in one transaction on conn in the snapshot, the slot's outbox_slots row, its
// backfill (if backfill) and its endpoints' bootstrap (with opts.Endpoints), and returns how
// many rows the backfill holds.
func (r snapshotRecord) record(ctx context.Context, conn *pgx.Conn) (int, error) {
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(r.snapshot)); err != nil {
		return 0, err
	}
	var xmin int64
	if err := tx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
		return 0, err
	}
	if err := state.RecordSlot(ctx, tx, r.schema, r.slot, r.publication, xmin, r.backfill); err != nil {
		return 0, err
	}
	var n int64
	if r.backfill {
		if n, err = state.RecordBackfill(ctx, tx, r.schema, r.slot, r.commitOrder, r.opts.Filter); err != nil {
			return 0, err
		}
	}
	if r.opts.Endpoints {
		if err := state.BootstrapEndpointVersions(ctx, tx, r.schema, r.opts.Pipeline, bootstrapLSN(r.start)); err != nil {
			return 0, err
		}
	}
	return int(n), tx.Commit(ctx)
}

// bootstrapLSN is the LSN a new slot's endpoints are recorded at: just before its consistent
// point. The slot carries every transaction that commits at or after that point (a commit
// record may start exactly there) and the snapshot holds every one before it, so the endpoints
// read in the snapshot come before every transaction the stream will carry, also under the
// rule "the versions committed before a transaction's commit LSN".
func bootstrapLSN(start pglogrepl.LSN) pglogrepl.LSN {
	if start == 0 {
		return 0
	}
	return start - 1
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
