package cdc

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// undefinedObject explains SQLSTATE 42704 (undefined object) from the walsender. The code is
// the same for a dropped slot and a dropped publication, so the catalog decides which it is:
//
//   - the slot is gone: an administrator dropped it. The error says that a restart creates a
//     new slot, which backfills the rows still pending.
//   - the slot exists: the publication was dropped (and perhaps created again). The slot decodes
//     WAL with the catalog as it was then, so it fails on every retry, even after the publication
//     is back. The slot is dropped here, so a restart creates the publication and a new slot,
//     which backfills the rows still pending.
//
// Both errors wrap ErrSlotMissing, so the stream stops for a restart. If the catalog cannot be
// read, the original error is returned and the stream retries.
func (s *Stream) undefinedObject(orig error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.cfg.DSN)
	if err != nil {
		return fmt.Errorf("start replication: %w (and looking up the slot failed: %v)", orig, err)
	}
	defer conn.Close(context.Background())
	slotThere, err := slotExists(ctx, conn, s.cfg.Slot)
	if err != nil {
		return fmt.Errorf("start replication: %w (and looking up the slot failed: %v)", orig, err)
	}
	var pubThere bool
	var pending int64
	err = conn.QueryRow(ctx, schema.SQL(s.schema, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1),
		(SELECT count(*) FROM {outbox_events} WHERE status = 'pending')`), s.cfg.Publication).Scan(&pubThere, &pending)
	if err != nil {
		return fmt.Errorf("start replication: %w (and looking up the publication failed: %v)", orig, err)
	}
	if !slotThere {
		return fmt.Errorf("%w: slot %q was dropped while the relay ran; restart: the new slot backfills the %d rows "+
			"still pending (rows delivered but not yet marked done are sent again; with the backfill turned off they are not delivered)",
			ErrSlotMissing, s.cfg.Slot, pending)
	}
	state := "it is missing"
	if pubThere {
		state = "it exists again, but the slot decodes WAL from before"
	}
	if err := dropSlot(ctx, conn, s.cfg.Slot); err != nil {
		return fmt.Errorf("%w (%s): slot %q cannot decode past that point, and dropping it failed (%v): %w: %w; "+
			"stop every relay on it and recreate the slot once: that backfills the %d rows still pending",
			ErrPublicationMissing, state, s.cfg.Slot, err, ErrSlotMissing, ErrRecreateSlot, pending)
	}
	return fmt.Errorf("%w: publication %q (%s); slot %q could not decode past that point and was dropped (%w); "+
		"restart: it creates the publication and a new slot, which backfills the %d rows still pending "+
		"(rows delivered but not yet marked done are sent again)",
		ErrPublicationMissing, s.cfg.Publication, state, s.cfg.Slot, ErrSlotMissing, pending)
}
