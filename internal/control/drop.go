package control

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// ErrSlotActive means DropPipeline found a process streaming from the slot.
var ErrSlotActive = errors.New("slot is active")

// DropPipeline drops pipeline name's slot (unless a process streams from it) and publication,
// and forgets the slot's backfill and creation record in schema s: `outbox-relay drop-pipeline`,
// and step 3 of a reshard for each old shard.
func DropPipeline(ctx context.Context, conn *pgx.Conn, s, name, slot, publication string) (slotDropped, pubDropped bool, err error) {
	p := Shard{Name: name, Slot: slot, Publication: publication}
	var active bool
	err = conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, p.Slot).Scan(&active)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return false, false, fmt.Errorf("look up slot %q: %w", p.Slot, err)
	case active:
		return false, false, fmt.Errorf("%w: a process streams pipeline %q from slot %q; stop it, or remove the pipeline "+
			"from its --config and restart it, then drop again", ErrSlotActive, p.Name, p.Slot)
	default:
		if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, p.Slot); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.ObjectInUse {
				return false, false, fmt.Errorf("%w: a process took slot %q meanwhile: %v", ErrSlotActive, p.Slot, err)
			}
			return false, false, fmt.Errorf("drop slot %q: %w", p.Slot, err)
		}
		slotDropped = true
	}
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, p.Publication).
		Scan(&pubDropped); err != nil {
		return slotDropped, false, fmt.Errorf("look up publication: %w", err)
	}
	if pubDropped {
		if _, err := conn.Exec(ctx, "DROP PUBLICATION "+pgx.Identifier{p.Publication}.Sanitize()); err != nil {
			return slotDropped, false, fmt.Errorf("drop publication %q: %w", p.Publication, err)
		}
	}
	if err := state.ForgetEndpointPipeline(ctx, conn, s, p.Name); err != nil {
		return slotDropped, pubDropped, err
	}
	return slotDropped, pubDropped, state.ForgetSlot(ctx, conn, s, p.Slot)
}

func dropped(b bool) string {
	if b {
		return "dropped"
	}
	return "did not exist"
}
