package state

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A new slot's backfill, in outbox_backfill: the rows pending when the slot was created, which
// its stream will never carry, numbered in the order they are delivered (position from 1).

// HoldBackfill marks slot's backfill as outstanding before the slot exists, with a placeholder
// row (position 0, which no page reads) that recording the real rows replaces in one
// transaction: whoever waits for the backfill to be delivered (a reshard's fence, see
// control.RecordFence) never sees the new slot without a backfill in the moment between its
// creation and the recording.
func HoldBackfill(ctx context.Context, db DB, s, slot string, backfill bool) error {
	if !backfill {
		return nil
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_backfill} (slot, position, event_id)
		VALUES ($1, 0, '00000000-0000-0000-0000-000000000000') ON CONFLICT DO NOTHING`), slot)
	if err != nil {
		return fmt.Errorf("record that slot %q will backfill: %w", slot, err)
	}
	return nil
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

// pendingWhere selects the pending rows the pipeline's publication would carry (filter: its
// row filter, "" none).
func pendingWhere(filter string) string {
	if filter == "" {
		return "status = 'pending'"
	}
	return "status = 'pending' AND (" + filter + ")"
}

// RecordBackfill numbers, in tx (the new slot's exported snapshot), every pending row the
// pipeline's publication carries (filter: its row filter, "" none) into slot's backfill, in
// backfill order, and returns how many.
func RecordBackfill(ctx context.Context, tx DB, s, slot string, commitOrder bool, filter string) (int64, error) {
	tag, err := tx.Exec(ctx, schema.SQL(s, `
			INSERT INTO {outbox_backfill} (slot, position, event_id)
			SELECT $1, row_number() OVER (ORDER BY `+backfillOrder(commitOrder)+`), id
			FROM {outbox_events} WHERE `)+pendingWhere(filter), slot)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// CopyBackfill is RecordBackfill for a slot on a standby: it reads the pending rows in stx (a
// transaction on the standby, in the new slot's exported snapshot; the standby is a physical
// copy, so the relay's tables are in the same schema there) and copies their ids into slot's
// backfill in ptx, a transaction on the primary.
func CopyBackfill(ctx context.Context, stx, ptx pgx.Tx, s, slot string, commitOrder bool, filter string) (int64, error) {
	rows, err := stx.Query(ctx, schema.SQL(s, `SELECT id FROM {outbox_events} WHERE `)+pendingWhere(filter)+
		` ORDER BY `+backfillOrder(commitOrder))
	if err != nil {
		return 0, err
	}
	src := &backfillRows{rows: rows, slot: slot}
	return ptx.CopyFrom(ctx, pgx.Identifier{s, schema.Backfill}, []string{"slot", "position", "event_id"}, src)
}

// backfillRows feeds the ids a query on the standby returns to COPY on the primary, numbered
// from 1 in the query's order.
type backfillRows struct {
	rows pgx.Rows
	slot string
	pos  int64
	id   [16]byte
	err  error
}

func (b *backfillRows) Next() bool {
	if !b.rows.Next() {
		return false
	}
	if b.err = b.rows.Scan(&b.id); b.err != nil {
		return false
	}
	b.pos++
	return true
}

func (b *backfillRows) Values() ([]any, error) { return []any{b.slot, b.pos, b.id}, nil }

func (b *backfillRows) Err() error {
	if b.err != nil {
		return b.err
	}
	return b.rows.Err()
}

// BackfillOutstanding is an SQL condition, for a statement that goes through schema.SQL, true
// while the slot that the expression slot names has a backfill to deliver (a new slot's hold
// included): a reshard's fence waits for it (internal/control).
func BackfillOutstanding(slot string) string {
	return `EXISTS (SELECT 1 FROM {outbox_backfill} b WHERE b.slot = ` + slot + `)`
}

// BackfillEvent is a backfill row and its place in the backfill.
type BackfillEvent struct {
	Position int64
	Event
}

// BackfillPage returns up to limit rows of slot's backfill after position after, in order:
// those still pending, or with ownState (a pipeline that keeps its own state) all of them.
func BackfillPage(ctx context.Context, db DB, s, slot string, after int64, limit int, ownState bool) ([]BackfillEvent, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `
		SELECT b.position, e.id::text, e.aggregate_type, e.aggregate_id, e.event_type, e.payload::text,
		       coalesce(e.headers::text, ''), e.created_at, coalesce(e.tenant_id, '')
		FROM {outbox_backfill} b JOIN {outbox_events} e ON e.id = b.event_id
		WHERE b.slot = $1 AND b.position > $2 AND (e.status = 'pending' OR $4)
		ORDER BY b.position LIMIT $3`), slot, after, limit, ownState)
	if err != nil {
		return nil, fmt.Errorf("read backfill: %w", err)
	}
	defer rows.Close()
	var evs []BackfillEvent
	for rows.Next() {
		var ev BackfillEvent
		var payload, headers string
		if err := rows.Scan(&ev.Position, &ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType, &payload, &headers,
			&ev.CreatedAt, &ev.TenantID); err != nil {
			return nil, err
		}
		ev.setText(payload, headers)
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// BackfillDone forgets slot's backfill.
func BackfillDone(ctx context.Context, db DB, s, slot string) error {
	_, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_backfill} WHERE slot = $1`), slot)
	return err
}
