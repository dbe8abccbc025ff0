package publisher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// SinceState implements SinceStore.
func (s PGStore) SinceState(ctx context.Context, id int64) (SinceState, error) {
	st := SinceState{ID: id}
	var until *time.Time
	var after *string
	err := s.Pool.QueryRow(ctx, s.q(`SELECT pipeline, since, until, coalesce(aggregate_type, ''), coalesce(event_type, ''),
		total, sent, coalesce(after_sequence, ''), coalesce(after_insert, 0), after_id::text, state = 'done'
		FROM {outbox_replays} WHERE id = $1`), id).Scan(&st.Pipeline, &st.Since, &until, &st.AggregateType, &st.EventType,
		&st.Total, &st.Sent, &st.After.Sequence, &st.After.Insert, &after, &st.Done)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("%w: outbox_replays has no row %d", errNoSinceRequest, id)
	}
	if err != nil {
		return st, fmt.Errorf("read replay request %d: %w", id, err)
	}
	if until != nil {
		st.Until = *until
	}
	if after != nil {
		st.After.ID = *after
	}
	return st, nil
}

// sinceOrder is the replay order (SinceCursor), exactly as index outbox_events_replay_order
// (migration 11) spells it, so that a page is a range scan of that index. The id is qualified:
// a bare id in ORDER BY would name the select list's id::text and sort by that text.
const sinceOrder = `coalesce(event_sequence, '') COLLATE "C", coalesce(insert_seq, 0), outbox_events.id`

// sincePageSQL reads the next page in replay order, by keyset (see SinceCursor): it walks the
// index from the cursor, checks the time range on the index entries, and stops after $8 rows,
// so the pages of one replay read the index once between them. $5..$7 are the cursor.
const sincePageSQL = `
SELECT coalesce(event_sequence, '') COLLATE "C", coalesce(insert_seq, 0), id::text, aggregate_type, aggregate_id,
       event_type, payload::text, coalesce(headers::text, ''), created_at
FROM {outbox_events}
WHERE ` + sinceFilter + sinceStatuses + `
  AND (` + sinceOrder + `) > ($5 COLLATE "C", $6, $7::uuid)
ORDER BY ` + sinceOrder + `
LIMIT $8`

const beforeAnyID = "00000000-0000-0000-0000-000000000000"

// sincePageArgs are the arguments of sincePageSQL for the page after st.After. The first one
// has the statement planned with these values each time (an unnamed statement): a plan cached
// for any time range would guess the range's size, and may guess a scan of the table.
func sincePageArgs(st SinceState, limit int) []any {
	insert, id := st.After.Insert, st.After.ID
	if id == "" {
		insert, id = -1, beforeAnyID
	}
	return append([]any{pgx.QueryExecModeExec}, append(st.args(), st.After.Sequence, insert, id, limit)...)
}

// SincePage implements SinceStore.
func (s PGStore) SincePage(ctx context.Context, st SinceState, limit int, tx *cdc.Tx) ([]*cdc.Event, SinceCursor, error) {
	after := st.After
	rows, err := s.Pool.Query(ctx, s.q(sincePageSQL), sincePageArgs(st, limit)...)
	if err != nil {
		return nil, after, fmt.Errorf("read rows to replay: %w", err)
	}
	defer rows.Close()
	var evs []*cdc.Event
	for rows.Next() {
		ev := &cdc.Event{Tx: tx, Replayed: true}
		var payload, headers string
		if err := rows.Scan(&after.Sequence, &after.Insert, &ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
			&payload, &headers, &ev.CreatedAt); err != nil {
			return nil, st.After, err
		}
		after.ID, ev.Seq, ev.Payload = ev.ID, after.Sequence, []byte(payload)
		if ev.Seq == "" {
			// Delivered before sequences were recorded: a new one after the request's commit LSN,
			// rising with insertion order.
			ev.Index = int(after.Insert)
		}
		if headers != "" {
			ev.Headers = []byte(headers)
		}
		evs = append(evs, ev)
	}
	return evs, after, rows.Err()
}

// SinceProgress implements SinceStore.
func (s PGStore) SinceProgress(ctx context.Context, st SinceState) error {
	var id *string
	if st.After.ID != "" {
		id = &st.After.ID
	}
	_, err := s.Pool.Exec(ctx, s.q(`UPDATE {outbox_replays} SET sent = $2, after_sequence = $3, after_insert = $4, after_id = $5,
		state = CASE WHEN $6 THEN 'done' ELSE 'running' END, finished_at = CASE WHEN $6 THEN now() END WHERE id = $1`),
		st.ID, st.Sent, st.After.Sequence, st.After.Insert, id, st.Done)
	return err
}
