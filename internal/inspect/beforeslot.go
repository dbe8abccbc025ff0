package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// BeforeSlot counts the pending rows that committed before the slot was created: the slot
// never carries them, so only a backfill delivers them.
type BeforeSlot struct {
	// SlotCreatedAt is when the relay created the slot (table outbox_slots).
	SlotCreatedAt time.Time `json:"slot_created_at"`
	// Backfilling counts those rows a backfill holds: the relay delivers them before the stream.
	Backfilling int64 `json:"backfilling"`
	// Unheld counts those rows no backfill holds: nothing will deliver them.
	Unheld int64 `json:"unheld"`
}

// beforeSlotSQL compares each pending row's inserting transaction with the xmin of the snapshot
// the slot was created in: a transaction older than that xmin had ended before the slot
// existed. age() compares 32-bit xids modulo wraparound, as the server does.
const beforeSlotSQL = `
SELECT s.created_at,
       count(e.id) FILTER (WHERE b.event_id IS NOT NULL),
       count(e.id) FILTER (WHERE b.event_id IS NULL)
FROM {outbox_slots} s
LEFT JOIN {outbox_events} e
       ON e.status = 'pending' AND age(e.xmin) > age((s.snapshot_xmin % 4294967296)::text::xid)
LEFT JOIN {outbox_backfill} b ON b.slot = s.slot AND b.event_id = e.id
WHERE s.slot = $1
GROUP BY s.created_at`

// readBeforeSlot returns nil when the relay has no record of creating the slot (a slot made
// by hand or by a version before migration 6), or the schema predates that migration.
func readBeforeSlot(ctx context.Context, db DB, s, slot string) (*BeforeSlot, error) {
	var exists bool
	if err := db.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, schema.Qualify(s, schema.Slots)).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	var b BeforeSlot
	err := db.QueryRow(ctx, beforeSlotSQL, slot).Scan(&b.SlotCreatedAt, &b.Backfilling, &b.Unheld)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("count pending rows older than the slot: %w", err)
	}
	return &b, nil
}

// unhealthyBeforeSlot is the reason status fails while rows older than the slot are pending,
// or "" when there are none.
func (r Report) unhealthyBeforeSlot() string {
	b := r.BeforeSlot
	switch {
	case b == nil || !r.Slot.Exists:
		return ""
	case b.Unheld > 0:
		return fmt.Sprintf("%d pending rows committed before slot %q was created (%s) and no backfill holds them: "+
			"the slot will never carry them. Stop the relay, drop the slot with SELECT pg_drop_replication_slot('%s') "+
			"and start the relay without --no-backfill: the new slot backfills them",
			b.Unheld, r.Slot.Name, b.SlotCreatedAt.Format(time.RFC3339), r.Slot.Name)
	case b.Backfilling > 0:
		return fmt.Sprintf("backfill in progress: %d pending rows committed before slot %q was created are being "+
			"delivered first; the relay streams newer events after them", b.Backfilling, r.Slot.Name)
	}
	return ""
}
