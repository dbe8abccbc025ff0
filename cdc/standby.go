package cdc

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrStandbyUnsupported is returned when --replication-dsn cannot be used as asked.
var ErrStandbyUnsupported = errors.New("decoding from a standby is not possible here")

// StandbyDecodingVersion is the first server_version_num that decodes on a hot standby.
const StandbyDecodingVersion = 160000

// setupOnStandby is Setup's slot step when opts.ReplicationDSN names the server that decodes
// (usually a hot standby; a primary works too, e.g. after that standby's promotion). The
// checks and the publication were done on primary; the slot lives on the replication server.
func setupOnStandby(ctx context.Context, primary *pgx.Conn, slot string, opts SetupOptions, res SetupResult) (SetupResult, error) {
	conn, err := pgx.Connect(ctx, opts.ReplicationDSN)
	if err != nil {
		return res, fmt.Errorf("connect to the replication DSN: %w", err)
	}
	defer conn.Close(context.Background())
	var inRecovery bool
	var num int
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery(), current_setting('server_version_num')::int").
		Scan(&inRecovery, &num); err != nil {
		return res, fmt.Errorf("replication DSN: read recovery state: %w", err)
	}
	if inRecovery && num < StandbyDecodingVersion {
		return res, fmt.Errorf("%w: the replication DSN's server is a %d standby; logical decoding on a standby "+
			"needs PostgreSQL 16 or later: decode on the primary, or upgrade", ErrStandbyUnsupported, num)
	}
	if err := checkWalLevel(ctx, conn); err != nil {
		return res, fmt.Errorf("replication DSN: %w", err)
	}
	exists, err := slotExists(ctx, conn, slot)
	if err != nil {
		return res, fmt.Errorf("replication DSN: look up slot: %w", err)
	}
	if !exists && !opts.NoBackfill {
		return res, fmt.Errorf("%w: a new slot's backfill records the pending rows in the slot's snapshot, and a "+
			"standby's snapshot cannot be recorded on the primary; create the slot on the standby with the backfill "+
			"turned off (rows pending at that moment are then not delivered: check that status shows none first)",
			ErrStandbyUnsupported)
	}
	if exists || !inRecovery {
		res.SlotCreated, err = ensureSlot(ctx, conn, slot)
		return res, err
	}
	// A logical slot on a standby waits for a running-transactions record from the primary
	// before it is consistent. The primary logs one every 15 s when busy; ask for one now and
	// then until the slot exists.
	nudgeCtx, stopNudge := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		nudgeStandbySnapshot(nudgeCtx, primary)
	}()
	res.SlotCreated, err = ensureSlot(ctx, conn, slot)
	stopNudge()
	wg.Wait()
	return res, err
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
