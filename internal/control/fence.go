package control

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Reshard is a pipeline's row in outbox_reshard, written by `outbox-relay reshard`: the change
// of its shard count from From to To, fenced at Fence (README: Shards, Changing N).
//
// The guarantee: the new shards' slots all start at or before Fence (the command advances them
// to it), and a new shard delivers nothing until every old slot has confirmed Fence, that is,
// until every event committed at or before Fence was delivered by an old shard. An aggregate's
// events up to the fence therefore all arrive before any of its later events; what an old shard
// still sends after the fence (until it retires) is a duplicate of what the new shard sends, in
// the same order. A restart of any relay at any point changes none of this: the fence and the
// slots' positions are in the database.
type Reshard struct {
	Pipeline          string
	From, To          int
	OldSlots, OldPubs []string
	NewSlots          []string
	Fence             string // pg_lsn text; empty until the new slots exist
	Started           time.Time
	// Reached is when the fence was found reached (every old slot had confirmed it) and
	// recorded: from then on the new shards deliver, and an old slot missing is one the command
	// retired. Nil: not yet, and an old slot missing was dropped by hand before the fence.
	Reached  *time.Time
	Finished *time.Time
}

// ReshardQuerier is what ReadReshard needs: a connection, a pool or a transaction.
type ReshardQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReshardDB is what ReadFence and RecordFence need: a connection or a pool.
type ReshardDB interface {
	ReshardQuerier
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// ReadReshard returns pipeline's reshard row from outbox_reshard of schema s (empty: as the
// search_path resolves it); ok is false when it has none (or the schema has no outbox_reshard
// table yet).
func ReadReshard(ctx context.Context, q ReshardQuerier, s, pipeline string) (r Reshard, ok bool, err error) {
	var fence *string
	err = q.QueryRow(ctx, schema.SQL(s, `SELECT pipeline, from_shards, to_shards, old_slots, old_pubs, new_slots, fence::text,
		started_at, fence_reached_at, finished_at FROM {outbox_reshard} WHERE pipeline = $1`), pipeline).
		Scan(&r.Pipeline, &r.From, &r.To, &r.OldSlots, &r.OldPubs, &r.NewSlots, &fence, &r.Started, &r.Reached, &r.Finished)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
		return r, false, nil
	case err != nil:
		return r, false, fmt.Errorf("read the reshard of pipeline %q: %w", pipeline, err)
	}
	if fence != nil {
		r.Fence = *fence
	}
	return r, true, nil
}

// FenceProgress is where a reshard's old slots stand against its fence.
type FenceProgress struct {
	// Reached: the fence is reached (recorded, or every old slot confirmed it just now).
	Reached bool
	// Behind are the old slots that have not confirmed the fence yet, or still deliver the
	// backfill of a slot recreated after it was lost.
	Behind []string
	// Missing are the old slots dropped before the fence was reached: by hand (`reshard` drops
	// an old slot only after). What their shards committed before the fence and had not
	// delivered is in no slot: MissingFix says how to recover it.
	Missing []string
}

// oldSlotBehind is true for an old slot (o.slot, joined to pg_replication_slots as s) that is
// missing or behind the fence, or still delivers a backfill. It names outbox_backfill by its
// placeholder (internal/state's BackfillOutstanding): the query that uses it goes through
// schema.SQL.
func oldSlotBehind(fence string) string {
	return `(s.slot_name IS NULL OR s.confirmed_flush_lsn IS NULL OR s.confirmed_flush_lsn < ` + fence + `
		OR ` + state.BackfillOutstanding("o.slot") + `)`
}

// OldShardRetired reports whether slot, an old shard's, confirmed r's fence and delivered any
// backfill (a slot recreated after it was dropped before the fence starts past it): then that
// shard retires. False for a missing slot; s is the schema of the relay's tables.
func OldShardRetired(ctx context.Context, q ReshardQuerier, s, slot string, r Reshard) (bool, error) {
	var reached bool
	err := q.QueryRow(ctx, schema.SQL(s, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false)
			AND NOT `+state.BackfillOutstanding("$1")+` FROM pg_replication_slots
			WHERE slot_name = $1`), slot, r.Fence).Scan(&reached)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	return reached, nil
}

// oldSlotsQuery lists the old slots ($1) with where they stand: missing, or behind the fence ($2).
var oldSlotsQuery = `SELECT o.slot, s.slot_name IS NULL, ` + oldSlotBehind("$2::pg_lsn") + `
	FROM unnest($1::text[]) AS o(slot) LEFT JOIN pg_replication_slots s ON s.slot_name = o.slot ORDER BY o.slot`

// ReadFence reports where r's old slots stand, changing nothing (see RecordFence); s is the
// schema of the relay's tables (empty: as the search_path resolves it).
func ReadFence(ctx context.Context, q ReshardDB, s string, r Reshard) (FenceProgress, error) {
	if r.Reached != nil || r.Finished != nil {
		return FenceProgress{Reached: true}, nil
	}
	var p FenceProgress
	if r.Fence == "" {
		return FenceProgress{Behind: r.OldSlots}, nil
	}
	var slot string
	var missing, behind bool
	rows, err := q.Query(ctx, schema.SQL(s, oldSlotsQuery), r.OldSlots, r.Fence)
	if err != nil {
		return p, fmt.Errorf("read the old slots: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&slot, &missing, &behind}, func() error {
		switch {
		case missing:
			p.Missing = append(p.Missing, slot)
		case behind:
			p.Behind = append(p.Behind, slot)
		}
		return nil
	}); err != nil {
		return p, fmt.Errorf("read the old slots: %w", err)
	}
	p.Reached = len(p.Missing) == 0 && len(p.Behind) == 0
	return p, nil
}

// RecordFence records r's fence as reached when every old slot exists and has confirmed it (and
// delivered any backfill), in one statement, so that the record is true when written; then the
// new shards may deliver, and an old slot missing later was retired, not lost. It returns the
// progress, read again when the fence is not reached. s is the schema of the relay's tables
// (empty: as the search_path resolves it).
func RecordFence(ctx context.Context, db ReshardDB, s string, r Reshard) (FenceProgress, error) {
	if r.Reached != nil || r.Finished != nil || r.Fence == "" {
		return ReadFence(ctx, db, s, r)
	}
	for try := 0; ; try++ {
		tag, err := db.Exec(ctx, schema.SQL(s, `UPDATE {outbox_reshard} r SET fence_reached_at = now()
			WHERE pipeline = $1 AND fence IS NOT NULL AND fence_reached_at IS NULL AND NOT EXISTS (
				SELECT 1 FROM unnest(r.old_slots) AS o(slot) LEFT JOIN pg_replication_slots s ON s.slot_name = o.slot
				WHERE `+oldSlotBehind("r.fence")+`)`), r.Pipeline)
		if err != nil {
			return FenceProgress{}, fmt.Errorf("record the reshard's fence as reached: %w", err)
		}
		if tag.RowsAffected() == 1 {
			return FenceProgress{Reached: true}, nil
		}
		if now, ok, err := ReadReshard(ctx, db, s, r.Pipeline); err != nil || !ok {
			return FenceProgress{}, err
		} else if now.Reached != nil { // recorded by another process meanwhile
			return FenceProgress{Reached: true}, nil
		}
		p, err := ReadFence(ctx, db, s, r)
		if err != nil || !p.Reached {
			return p, err
		}
		// The last old slot confirmed the fence between the update and this read: record it
		// now, since a fence reached and not recorded would make an old slot that `reshard`
		// then drops look lost (as dropped before the fence) to a relay started after an
		// interruption. If it keeps slipping, report it not reached yet: the callers poll.
		if try == 2 {
			p.Reached, p.Behind = false, r.OldSlots
			return p, nil
		}
	}
}

// MissingFix is what to do about old slots dropped before the fence (FenceProgress.Missing).
func (r Reshard) MissingFix(missing []string) string {
	return fmt.Sprintf("old slot(s) %v of pipeline %s were dropped before they confirmed the reshard's fence %s: what "+
		"their shards committed before the fence and had not delivered is in no slot. The new shards wait, so nothing is lost "+
		"yet: start the relay of each such old shard (shards: %d) once with --recreate-slot; it creates the slot again and "+
		"backfills that shard's pending rows (rows delivered but not yet marked done are sent again), and the new shards "+
		"deliver once those are delivered", missing, r.Pipeline, r.Fence, r.From)
}
