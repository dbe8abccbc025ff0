package state

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A new slot's backfill, in outbox_backfill: the rows pending when the slot was created, which
// its stream will never carry, numbered in the order they are delivered (position from 1).

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
		       coalesce(e.headers::text, ''), e.created_at
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
		if err := rows.Scan(&ev.Position, &ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType, &payload, &headers, &ev.CreatedAt); err != nil {
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
