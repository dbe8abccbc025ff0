package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A slot's record in outbox_slots: when the relay created it, the xmin of its snapshot,
// whether it backfills, and the publication it was created against.

// RecordSlot records, in tx on the primary, the slot's creation with the xmin of its snapshot
// (every transaction older than it had ended when the slot was created), and forgets a backfill
// left by an earlier slot of this name: its rows still pending are in this one's.
func RecordSlot(ctx context.Context, tx pgx.Tx, s, slot, publication string, xmin int64, backfill bool) error {
	_, err := tx.Exec(ctx, schema.SQL(s, `
		INSERT INTO {outbox_slots} (slot, created_at, snapshot_xmin, backfill, publication_oid)
		VALUES ($1, now(), $2, $3, (SELECT oid FROM pg_publication WHERE pubname = $4))
		ON CONFLICT (slot) DO UPDATE SET created_at = excluded.created_at, snapshot_xmin = excluded.snapshot_xmin,
			backfill = excluded.backfill, publication_oid = excluded.publication_oid`), slot, xmin, backfill, publication)
	if err != nil {
		return err
	}
	return BackfillDone(ctx, tx, s, slot)
}

// PublicationReplaced reports whether publication is not the one slot was created against
// (outbox_slots.publication_oid): dropped and created again while no relay ran, so the slot
// decodes WAL written while it was missing. PostgreSQL 15-17 fail on that WAL for good;
// PostgreSQL 18 streams on without its rows, so nothing else would notice. A slot recorded
// without an oid (made before migration 10) adopts the current publication.
func PublicationReplaced(ctx context.Context, conn *pgx.Conn, slot, publication, sch string) (bool, error) {
	var recorded, current *uint32
	err := conn.QueryRow(ctx, schema.SQL(sch, `SELECT s.publication_oid, p.oid FROM {outbox_slots} s
		LEFT JOIN pg_publication p ON p.pubname = $2 WHERE s.slot = $1`), slot, publication).Scan(&recorded, &current)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || current == nil:
		return false, nil // not a slot the relay recorded, or no publication to compare
	case err != nil:
		return false, fmt.Errorf("read the publication slot %q was created against: %w", slot, err)
	case recorded == nil:
		_, err = conn.Exec(ctx, schema.SQL(sch, `UPDATE {outbox_slots} SET publication_oid = $2 WHERE slot = $1 AND publication_oid IS NULL`), slot, *current)
		return false, err
	}
	return *recorded != *current, nil
}

// ForgetSlot forgets a dropped slot's backfill and its record in schema s.
func ForgetSlot(ctx context.Context, conn *pgx.Conn, s, slot string) error {
	if err := BackfillDone(ctx, conn, s, slot); err != nil {
		return fmt.Errorf("forget the backfill of slot %q: %w", slot, err)
	}
	if _, err := conn.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_slots} WHERE slot = $1`), slot); err != nil {
		return fmt.Errorf("forget slot %q: %w", slot, err)
	}
	return nil
}
