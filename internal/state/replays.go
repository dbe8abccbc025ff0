package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The replay --since requests, in outbox_replays, and the rows of outbox_events they re-send:
// publisher.RequestReplaySince records one, the relay leading its pipeline pages through it
// (pgstore.Pipeline, a store.Replays) and records its progress per page.

// ReplayRange selects what a replay --since re-sends: the delivered, dead-lettered and parked
// rows created in [Since, Until) (Until zero: no end), of one aggregate type and event type
// when those are not empty, and only the event EventID when it is not empty (the API's resend
// of one event; its range is then the event's created_at).
type ReplayRange struct {
	Since, Until             time.Time
	AggregateType, EventType string
	EventID                  string
}

// ReplayCursor is a position in replay order (see publisher.SinceCursor): the recorded stream
// position, then insertion order, then id ("" before the first row).
type ReplayCursor struct {
	Sequence string
	Insert   int64
	ID       string
}

// Replay is a replay --since request as outbox_replays records it.
type Replay struct {
	ID       int64
	Pipeline string
	ReplayRange
	Total, Sent int64
	After       ReplayCursor
	Done        bool
	// RequestedAt is when the request was recorded; FinishedAt when it completed (nil: not yet).
	RequestedAt time.Time
	FinishedAt  *time.Time
}

// ReplayEvent is a row a replay re-sends, with its place in replay order.
type ReplayEvent struct {
	Cursor ReplayCursor
	Event
}

// TypeCount is how many rows of one aggregate type a replay re-sends.
type TypeCount struct {
	AggregateType string
	Events        int64
}

// ReplayCount is what a range holds: the rows a replay re-sends by aggregate type, the created_at
// of the first and last of them, the rows of the range still pending, and the created_at of the
// oldest row left in outbox_events (nil for an empty table).
type ReplayCount struct {
	ByType      []TypeCount
	First, Last *time.Time
	Pending     int64
	OldestRow   *time.Time
}

// ErrNoReplay means outbox_replays has no such request.
var ErrNoReplay = errors.New("no such replay request")

// sinceFilter is the WHERE clause of a replay --since over $1..$5 (since, until, aggregate type,
// event type, event id), for delivered, dead-lettered and parked rows. The time range is two
// plain comparisons (no OR), so that a page checks them in the index (outbox_events_replay_order).
// An empty event id is NULL through nullif before its cast, which would refuse an empty string.
const sinceFilter = `created_at >= $1 AND created_at < coalesce($2::timestamptz, 'infinity')
	AND ($3 = '' OR aggregate_type = $3) AND ($4 = '' OR event_type = $4)
	AND (nullif($5, '') IS NULL OR id = nullif($5, '')::uuid)`

const sinceStatuses = ` AND status IN ('done', 'failed', 'parked')`

func (r ReplayRange) args() []any {
	var until *time.Time
	if !r.Until.IsZero() {
		until = &r.Until
	}
	return []any{r.Since, until, r.AggregateType, r.EventType, r.EventID}
}

// CountReplay counts what r selects in schema s.
func CountReplay(ctx context.Context, db DB, s string, r ReplayRange) (ReplayCount, error) {
	c := ReplayCount{}
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT aggregate_type, count(*) FROM {outbox_events} WHERE `+sinceFilter+sinceStatuses+`
		GROUP BY aggregate_type ORDER BY aggregate_type`), r.args()...)
	if err != nil {
		return c, fmt.Errorf("count rows to replay: %w", err)
	}
	c.ByType, err = pgx.CollectRows(rows, pgx.RowToStructByPos[TypeCount])
	if err != nil {
		return c, fmt.Errorf("count rows to replay: %w", err)
	}
	err = db.QueryRow(ctx, schema.SQL(s, `SELECT min(created_at) FILTER (WHERE status <> 'pending'),
		max(created_at) FILTER (WHERE status <> 'pending'), count(*) FILTER (WHERE status = 'pending'),
		(SELECT min(created_at) FROM {outbox_events})
		FROM {outbox_events} WHERE `+sinceFilter), r.args()...).Scan(&c.First, &c.Last, &c.Pending, &c.OldestRow)
	if err != nil {
		return c, fmt.Errorf("read the range to replay: %w", err)
	}
	return c, nil
}

// ReplayGroup is how many rows of a replay range have one tenant ("" for none), event type and
// aggregate type: Events delivered, dead-lettered or parked, Pending not delivered yet.
type ReplayGroup struct {
	TenantID, EventType, AggregateType string
	Events, Pending                    int64
}

// CountReplayGroups counts what r selects in schema s by tenant, event type and aggregate type,
// so that a caller can count what one endpoint's subscription takes of the range with the
// relay's own matcher. One scan of the range, as CountReplay's; one row per distinct triple.
func CountReplayGroups(ctx context.Context, db DB, s string, r ReplayRange) ([]ReplayGroup, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT coalesce(tenant_id, ''), event_type, aggregate_type,
		count(*) FILTER (WHERE status <> 'pending'), count(*) FILTER (WHERE status = 'pending')
		FROM {outbox_events} WHERE `+sinceFilter+`
		GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`), r.args()...)
	if err != nil {
		return nil, fmt.Errorf("count rows to replay by subscription: %w", err)
	}
	groups, err := pgx.CollectRows(rows, pgx.RowToStructByPos[ReplayGroup])
	if err != nil {
		return nil, fmt.Errorf("count rows to replay by subscription: %w", err)
	}
	return groups, nil
}

// RecordReplay records a replay --since request of pipeline over r, re-sending total rows, at the
// current WAL insert position, and returns its id.
func RecordReplay(ctx context.Context, db DB, s, pipeline string, r ReplayRange, total int64) (int64, error) {
	a := r.args()
	var id int64
	err := db.QueryRow(ctx, schema.SQL(s, `INSERT INTO {outbox_replays} (pipeline, since, until, aggregate_type, event_type, total,
		request_lsn, event_id)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6, pg_current_wal_insert_lsn(), nullif($7, '')::uuid) RETURNING id`),
		pipeline, a[0], a[1], a[2], a[3], total, a[4]).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("record replay request: %w", err)
	}
	return id, nil
}

// ReadReplay reads request id of schema s.
func ReadReplay(ctx context.Context, db DB, s string, id int64) (Replay, error) {
	st := Replay{ID: id}
	var until *time.Time
	var after *string
	err := db.QueryRow(ctx, schema.SQL(s, `SELECT pipeline, since, until, coalesce(aggregate_type, ''), coalesce(event_type, ''),
		total, sent, coalesce(after_sequence, ''), coalesce(after_insert, 0), after_id::text, state = 'done',
		coalesce(event_id::text, ''), requested_at, finished_at
		FROM {outbox_replays} WHERE id = $1`), id).Scan(&st.Pipeline, &st.Since, &until, &st.AggregateType, &st.EventType,
		&st.Total, &st.Sent, &st.After.Sequence, &st.After.Insert, &after, &st.Done, &st.EventID, &st.RequestedAt, &st.FinishedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("%w: outbox_replays has no row %d", ErrNoReplay, id)
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

// sinceOrder is the replay order (ReplayCursor), exactly as index outbox_events_replay_order
// (migration 11) spells it, so that a page is a range scan of that index. The id is qualified:
// a bare id in ORDER BY would name the select list's id::text and sort by that text.
const sinceOrder = `coalesce(event_sequence, '') COLLATE "C", coalesce(insert_seq, 0), outbox_events.id`

// sincePageSQL reads the next page in replay order, by keyset (see ReplayCursor): it walks the
// index from the cursor, checks the time range on the index entries, and stops after $9 rows,
// so the pages of one replay read the index once between them. $6..$8 are the cursor.
const sincePageSQL = `
SELECT coalesce(event_sequence, '') COLLATE "C", coalesce(insert_seq, 0), id::text, aggregate_type, aggregate_id,
       event_type, payload::text, coalesce(headers::text, ''), created_at, coalesce(tenant_id, '')
FROM {outbox_events}
WHERE ` + sinceFilter + sinceStatuses + `
  AND (` + sinceOrder + `) > ($6 COLLATE "C", $7, $8::uuid)
ORDER BY ` + sinceOrder + `
LIMIT $9`

const beforeAnyID = "00000000-0000-0000-0000-000000000000"

// sincePageArgs are the arguments of sincePageSQL for the page after after. The first one
// has the statement planned with these values each time (an unnamed statement): a plan cached
// for any time range would guess the range's size, and may guess a scan of the table.
func sincePageArgs(r ReplayRange, after ReplayCursor, limit int) []any {
	insert, id := after.Insert, after.ID
	if id == "" {
		insert, id = -1, beforeAnyID
	}
	return append([]any{pgx.QueryExecModeExec}, append(r.args(), after.Sequence, insert, id, limit)...)
}

// ReplayPage returns up to limit rows of r after position after in replay order, each with its
// position; a row's Sequence is "" when it was delivered before sequences were recorded.
func ReplayPage(ctx context.Context, db DB, s string, r ReplayRange, after ReplayCursor, limit int) ([]ReplayEvent, error) {
	rows, err := db.Query(ctx, schema.SQL(s, sincePageSQL), sincePageArgs(r, after, limit)...)
	if err != nil {
		return nil, fmt.Errorf("read rows to replay: %w", err)
	}
	defer rows.Close()
	var evs []ReplayEvent
	for rows.Next() {
		var ev ReplayEvent
		var payload, headers string
		if err := rows.Scan(&ev.Cursor.Sequence, &ev.Cursor.Insert, &ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
			&payload, &headers, &ev.CreatedAt, &ev.TenantID); err != nil {
			return nil, err
		}
		ev.Cursor.ID, ev.Sequence = ev.ID, ev.Cursor.Sequence
		ev.setText(payload, headers)
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// RecordReplayProgress records that every row of request st up to st.After was delivered (Sent
// of them), and whether the request is complete. A complete request stays as it is: a relay cut
// off from the slot may record its stale progress after another relay completed the request.
func RecordReplayProgress(ctx context.Context, db DB, s string, st Replay) error {
	var id *string
	if st.After.ID != "" {
		id = &st.After.ID
	}
	_, err := db.Exec(ctx, schema.SQL(s, `UPDATE {outbox_replays} SET sent = $2, after_sequence = $3, after_insert = $4, after_id = $5,
		state = CASE WHEN $6 THEN 'done' ELSE 'running' END, finished_at = CASE WHEN $6 THEN now() END
		WHERE id = $1 AND state <> 'done'`),
		st.ID, st.Sent, st.After.Sequence, st.After.Insert, id, st.Done)
	return err
}

// RangeGroup is how many rows of a range have one tenant, event type and aggregate type.
type RangeGroup struct {
	TenantID, EventType, AggregateType string
	Events                             int64
}

// CountRangeGroups counts the rows created in [since, until) (until zero: no end) in schema s by
// tenant, event type and aggregate type, of tenant alone when it is not empty: a caller keeps the
// groups an endpoint subscribes to, so that the count says what that endpoint would receive
// without naming anything of another tenant. Rows of every status count, as a recover re-sends
// the pending ones too.
func CountRangeGroups(ctx context.Context, db DB, s string, since, until time.Time, tenant string) ([]RangeGroup, error) {
	var end *time.Time
	if !until.IsZero() {
		end = &until
	}
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT coalesce(tenant_id, ''), event_type, aggregate_type, count(*)
		FROM {outbox_events} WHERE created_at >= $1 AND created_at < coalesce($2::timestamptz, 'infinity')
			AND ($3 = '' OR tenant_id = $3)
		GROUP BY 1, 2, 3`), since, end, tenant)
	if err != nil {
		return nil, fmt.Errorf("count the range's rows: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[RangeGroup])
}
