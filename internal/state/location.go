package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Location is a slot's row in outbox_slot_location (migration 12), kept on the primary in the
// schema of the relay's tables (also for a slot on a standby): where
// the slot lives and the move under way, if any (docs/guides/failover.md). No row: the slot lives on the primary and is not moving.
type Location struct {
	Found   bool
	Server  string // "" the primary, else a standby's host:port
	Moving  bool
	MoveTo  string // with Moving: the server of the new slot ("" the primary)
	Fence   pglogrepl.LSN
	Reached bool // with Moving: the old slot confirmed the fence; it is dropped next
}

// Querier is a connection, a pool or a transaction.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadLocation reads slot's row in outbox_slot_location of schema s; a zero Location when it
// has none.
func ReadLocation(ctx context.Context, q Querier, s, slot string) (Location, error) {
	var l Location
	var fence *string
	err := q.QueryRow(ctx, schema.SQL(s, `SELECT coalesce(server, ''), coalesce(move_to, ''), move_fence::text, move_reached_at IS NOT NULL
		FROM {outbox_slot_location} WHERE slot = $1`), slot).Scan(&l.Server, &l.MoveTo, &fence, &l.Reached)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return Location{}, nil
	case err != nil:
		return l, fmt.Errorf("read where slot %q lives (outbox_slot_location): %w", slot, err)
	}
	l.Found = true
	if fence != nil {
		l.Moving = true
		if l.Fence, err = pglogrepl.ParseLSN(*fence); err != nil {
			return l, fmt.Errorf("slot %q: move fence %q: %w", slot, *fence, err)
		}
	}
	return l, nil
}

// SetLocation records that slot lives on name ("" the primary), ending any move.
func SetLocation(ctx context.Context, conn *pgx.Conn, s, slot, name string) error {
	_, err := conn.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_slot_location} (slot, server) VALUES ($1, NULLIF($2, ''))
		ON CONFLICT (slot) DO UPDATE SET server = excluded.server, move_to = NULL, move_fence = NULL,
			move_reached_at = NULL, updated_at = now()`), slot, name)
	if err != nil {
		return fmt.Errorf("record where slot %q lives: %w", slot, err)
	}
	return nil
}

// StartMove records a move of slot from one server to another, fenced at fence.
func StartMove(ctx context.Context, conn *pgx.Conn, s, slot, from, to string, fence pglogrepl.LSN) error {
	_, err := conn.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_slot_location} (slot, server, move_to, move_fence)
		VALUES ($1, NULLIF($2, ''), NULLIF($3, ''), $4::pg_lsn)
		ON CONFLICT (slot) DO UPDATE SET server = excluded.server, move_to = excluded.move_to,
			move_fence = excluded.move_fence, move_reached_at = NULL, updated_at = now()`), slot, from, to, fence.String())
	if err != nil {
		return fmt.Errorf("record the move of slot %q: %w", slot, err)
	}
	return nil
}

// MarkReached records that the old slot of slot's move confirmed the fence: from now on it may
// be dropped, and a missing old slot is no loss.
func MarkReached(ctx context.Context, conn *pgx.Conn, s, slot string) error {
	_, err := conn.Exec(ctx, schema.SQL(s, `UPDATE {outbox_slot_location}
		SET move_reached_at = coalesce(move_reached_at, now()), updated_at = now()
		WHERE slot = $1 AND move_fence IS NOT NULL`), slot)
	if err != nil {
		return fmt.Errorf("record that slot %q reached its move's fence: %w", slot, err)
	}
	return nil
}

// FinishMove records that slot's move is done: it lives on the move's new server.
func FinishMove(ctx context.Context, conn *pgx.Conn, s, slot string) error {
	_, err := conn.Exec(ctx, schema.SQL(s, `UPDATE {outbox_slot_location} SET server = move_to, move_to = NULL, move_fence = NULL,
		move_reached_at = NULL, updated_at = now() WHERE slot = $1 AND move_fence IS NOT NULL AND move_reached_at IS NOT NULL`), slot)
	if err != nil {
		return fmt.Errorf("record that slot %q moved: %w", slot, err)
	}
	return nil
}
