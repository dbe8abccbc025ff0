package cdc

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// ErrStandbyUnsupported is returned when --replication-dsn cannot be used as asked.
var ErrStandbyUnsupported = errors.New("decoding from a standby is not possible here")

// StandbyDecodingVersion is the first server_version_num that decodes on a hot standby.
const StandbyDecodingVersion = 160000

// checkDecodingServer checks the replication DSN's server (usually a hot standby; a primary
// works too, e.g. after that standby's promotion) and reports whether it is in recovery.
func checkDecodingServer(ctx context.Context, conn *pgx.Conn) (inRecovery bool, err error) {
	var num int
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int").
		Scan(&inRecovery, &num); err != nil {
		return false, fmt.Errorf("replication DSN: read recovery state: %w", err)
	}
	if inRecovery && num < StandbyDecodingVersion {
		return false, fmt.Errorf("%w: the replication DSN's server is a %d standby; logical decoding on a standby "+
			"needs PostgreSQL 16 or later: decode on the primary, or upgrade", ErrStandbyUnsupported, num)
	}
	if err := checkWalLevel(ctx, conn); err != nil {
		return false, fmt.Errorf("replication DSN: %w", err)
	}
	return inRecovery, nil
}

// checkNotSynced refuses a slot on a standby that is a synchronized copy of the primary's
// failover slot (PostgreSQL 17+, sync_replication_slots = on): a standby cannot decode it, and
// the sync worker owns it.
func checkNotSynced(ctx context.Context, conn *pgx.Conn, slot string) error {
	var synced bool
	err := conn.QueryRow(ctx, `SELECT coalesce((to_jsonb(s) ->> 'synced')::boolean, false) FROM pg_replication_slots s
		WHERE slot_name = $1`, slot).Scan(&synced)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("look up slot %q: %w", slot, err)
	}
	if synced {
		return fmt.Errorf("%w: slot %q on the replication DSN's server is a synchronized copy of the primary's failover "+
			"slot, which a standby cannot decode: run the relay once on the primary (no replication DSN) with the failover "+
			"option off, wait until the copy is gone from the standby (SELECT synced FROM pg_replication_slots), then "+
			"decode on the standby again", ErrStandbyUnsupported, slot)
	}
	return nil
}

// createStandbySlotWithBackfill creates the slot on the replication DSN's server with an
// exported snapshot and records, on the primary, the rows pending in that snapshot for the
// backfill. The snapshot is the standby's view at the slot's consistent point: exactly the
// transactions committed before it, the ones the slot will not carry. The standby is a physical
// copy, so those rows are the primary's rows too (their status is read again on the primary
// when they are delivered). If recording fails, the slot is dropped again.
func createStandbySlotWithBackfill(ctx context.Context, p *placement, publication string, backfill bool) (int, bool, error) {
	if err := checkSlotRoom(ctx, p.tconn, p.slot); err != nil {
		return 0, false, err
	}
	if err := state.HoldBackfill(ctx, p.primary, p.schema, p.slot, backfill); err != nil {
		return 0, false, err
	}
	cfg, err := p.target.pgconnConfig()
	if err != nil {
		return 0, false, err
	}
	repl, err := connectReplication(ctx, cfg, nil, p.target.dsn)
	if err != nil {
		return 0, false, err
	}
	defer repl.Close(context.Background())
	var res pglogrepl.CreateReplicationSlotResult
	_, err = p.withNudge(ctx, func() (bool, error) {
		res, err = pglogrepl.CreateReplicationSlot(ctx, repl, p.slot, "pgoutput",
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
		return err == nil, err
	})
	if err != nil {
		return 0, false, fmt.Errorf("create slot %q on the replication DSN's server with a snapshot: %w", p.slot, err)
	}
	start, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, p.slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, false, fmt.Errorf("slot %q: consistent point %q: %w", p.slot, res.ConsistentPoint, err)
	}
	n, commitOrder, err := recordStandbyBackfill(ctx, p, publication, res.SnapshotName, start, backfill)
	if err != nil {
		_ = pglogrepl.DropReplicationSlot(context.Background(), repl, p.slot, pglogrepl.DropReplicationSlotOptions{})
		return 0, false, fmt.Errorf("record backfill (slot %q dropped again; start once more): %w", p.slot, err)
	}
	return n, commitOrder, nil
}

// recordStandbyBackfill reads the pending rows in the standby's snapshot and copies their ids
// to outbox_backfill on the primary, with the slot's outbox_slots row (and, with Endpoints, the
// endpoints of the snapshot at the slot's start), in one transaction.
func recordStandbyBackfill(ctx context.Context, p *placement, publication, snapshot string, start pglogrepl.LSN,
	backfill bool) (int, bool, error) {
	// Commit timestamps on a standby follow the primary's setting; both must say on.
	onPrimary, err := trackCommitTimestamp(ctx, p.primary)
	if err != nil {
		return 0, false, err
	}
	onStandby, err := trackCommitTimestamp(ctx, p.tconn)
	if err != nil {
		return 0, false, err
	}
	commitOrder := onPrimary && onStandby
	stx, err := p.tconn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, false, err
	}
	defer stx.Rollback(context.Background())
	if _, err := stx.Exec(ctx, "SET TRANSACTION SNAPSHOT "+quoteLiteral(snapshot)); err != nil {
		return 0, false, err
	}
	var xmin int64
	if err := stx.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text::bigint`).Scan(&xmin); err != nil {
		return 0, false, err
	}
	ptx, err := p.primary.Begin(ctx)
	if err != nil {
		return 0, false, err
	}
	defer ptx.Rollback(context.Background())
	if err := state.RecordSlot(ctx, ptx, p.schema, p.slot, publication, xmin, backfill); err != nil {
		return 0, false, err
	}
	var n int64
	if backfill {
		if n, err = state.CopyBackfill(ctx, stx, ptx, p.schema, p.slot, commitOrder, p.opts.Filter); err != nil {
			return 0, false, err
		}
	}
	if p.opts.Endpoints {
		if err := state.CopyEndpointVersions(ctx, stx, ptx, p.schema, p.opts.Pipeline, bootstrapLSN(start)); err != nil {
			return 0, false, err
		}
	}
	return int(n), commitOrder, ptx.Commit(ctx)
}

// connectReplication opens a replication connection (replication=database) with cfg. A refusal
// for a connection limit is explained with the counts read over limitsDSN (empty: a server known
// only by its recorded name, whose counts are not read).
func connectReplication(ctx context.Context, cfg *pgconn.Config, dial pgconn.DialFunc, limitsDSN string) (*pgconn.PgConn, error) {
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = "outbox-relay"
	if dial != nil {
		cfg.DialFunc = dial
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		// A refusal of the role (SQLSTATE 28000: no such role, or no pg_hba.conf line for it) or
		// a missing privilege (42501: CONNECT on the database, or REPLICATION) is not told apart
		// by its code alone, so it is not called a missing REPLICATION attribute here (Setup
		// checks that attribute by name first): the caller diagnoses the failed connection
		// (internal/diagnose), whose fix names each.
		if isConnectionLimit(err) && limitsDSN != "" {
			return nil, walSenderLimitError(ctx, limitsDSN, dial, err)
		}
		if isConnectionLimit(err) {
			return nil, fmt.Errorf("%w: the server refused the replication connection: too many connections or WAL "+
				"senders in use; raise max_wal_senders or max_connections there; retrying on its own meanwhile (%w)", ErrServerLimit, err)
		}
		return nil, fmt.Errorf("connect for replication: %w", err)
	}
	return conn, nil
}

// nudgeStandbySnapshot runs pg_log_standby_snapshot() on the primary every 500 ms until ctx
// ends. It needs a superuser (or an EXECUTE grant); without it the slot is created once the
// primary logs the record by itself.
func nudgeStandbySnapshot(ctx context.Context, primary *pgx.Conn) {
	for {
		if _, err := primary.Exec(ctx, "SELECT pg_log_standby_snapshot()"); err != nil && ctx.Err() == nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
	}
}
