package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The endpoint backlog (outbox_endpoint_backlog): the events an endpoint of a pipeline spilled
// off the WAL, by stream position. The events stay in outbox_events; an entry names one.

// BacklogEntry is one spilled event of an endpoint: its stream position (commit LSN and index in
// the transaction), its id, the attempts made before it was spilled, and whether its delivery
// marks the row done.
type BacklogEntry struct {
	LSN      pglogrepl.LSN
	Idx      int
	EventID  string
	Attempts int
	Mark     bool
}

// BacklogEvent is an entry with its event, as a drain reads it. Missing is set when the row is
// not found in outbox_events: not visible yet (its commit was decoded a moment before it was
// visible to other sessions), or deleted by hand (prune keeps the rows a backlog names).
type BacklogEvent struct {
	BacklogEntry
	Event
	Missing bool
}

// SpillBacklog records entries in the backlog of endpoint in pipeline; an entry recorded already
// (the same position, sent again after a restart) is kept as it is.
func SpillBacklog(ctx context.Context, db DB, s, pipeline, endpoint string, es []BacklogEntry) error {
	lsns, idxs, ids, attempts, marks := make([]string, len(es)), make([]int32, len(es)), make([]string, len(es)),
		make([]int32, len(es)), make([]bool, len(es))
	for i, e := range es {
		lsns[i], idxs[i], ids[i], attempts[i], marks[i] = e.LSN.String(), int32(e.Idx), e.EventID, int32(e.Attempts), e.Mark
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_backlog} (pipeline, endpoint_id, lsn, idx, event_id, attempts, mark)
		SELECT $1, $2, l::pg_lsn, i, e, a, m FROM unnest($3::text[], $4::int[], $5::uuid[], $6::int[], $7::bool[]) AS u(l, i, e, a, m)
		ON CONFLICT (pipeline, endpoint_id, lsn, idx) DO NOTHING`), pipeline, endpoint, lsns, idxs, ids, attempts, marks)
	if err != nil {
		return fmt.Errorf("record %d events in the backlog of endpoint %s: %w", len(es), endpoint, err)
	}
	return nil
}

// BacklogPage returns up to limit entries of the backlog after position (lsn, idx) and up to
// position (toLSN, toIdx), in stream order, with their events (each with the sequence recorded
// when it was delivered, dead-lettered or parked: what a replay --since re-sends it with).
func BacklogPage(ctx context.Context, db DB, s, pipeline, endpoint string, lsn pglogrepl.LSN, idx int, toLSN pglogrepl.LSN, toIdx, limit int) ([]BacklogEvent, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT b.lsn::text, b.idx, b.event_id::text, b.attempts, b.mark, o.id IS NULL,
			coalesce(o.aggregate_type, ''), coalesce(o.aggregate_id, ''), coalesce(o.event_type, ''), coalesce(o.payload::text, ''),
			coalesce(o.headers::text, ''), coalesce(o.created_at, b.spilled_at), coalesce(o.tenant_id, ''),
			coalesce(o.event_sequence, '')
		FROM {outbox_endpoint_backlog} b LEFT JOIN {outbox_events} o ON o.id = b.event_id
		WHERE b.pipeline = $1 AND b.endpoint_id = $2 AND (b.lsn, b.idx) > ($3::pg_lsn, $4)
			AND (b.lsn, b.idx) <= ($5::pg_lsn, $6)
		ORDER BY b.lsn, b.idx LIMIT $7`), pipeline, endpoint, lsn.String(), idx, toLSN.String(), toIdx, limit)
	if err != nil {
		return nil, fmt.Errorf("read the backlog of endpoint %s: %w", endpoint, err)
	}
	defer rows.Close()
	var out []BacklogEvent
	for rows.Next() {
		var e BacklogEvent
		var l, payload, headers string
		if err := rows.Scan(&l, &e.Idx, &e.EventID, &e.Attempts, &e.Mark, &e.Missing, &e.AggregateType, &e.AggregateID,
			&e.EventType, &payload, &headers, &e.CreatedAt, &e.TenantID, &e.Sequence); err != nil {
			return nil, err
		}
		if e.LSN, err = pglogrepl.ParseLSN(l); err != nil {
			return nil, err
		}
		e.ID = e.EventID
		e.setText(payload, headers)
		out = append(out, e)
	}
	return out, rows.Err()
}

// TrimBacklog forgets the entries of the backlog up to position (lsn, idx), delivered (or
// dead-lettered, parked) all of them.
func TrimBacklog(ctx context.Context, db DB, s, pipeline, endpoint string, lsn pglogrepl.LSN, idx int) (int64, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_endpoint_backlog}
		WHERE pipeline = $1 AND endpoint_id = $2 AND (lsn, idx) <= ($3::pg_lsn, $4)`), pipeline, endpoint, lsn.String(), idx)
	if err != nil {
		return 0, fmt.Errorf("trim the backlog of endpoint %s: %w", endpoint, err)
	}
	return tag.RowsAffected(), nil
}

// DropBacklog forgets the whole backlog of endpoint in pipeline (the endpoint was removed) and
// returns the entries it forgot, in stream order: the caller settles their rows.
func DropBacklog(ctx context.Context, db DB, s, pipeline, endpoint string) ([]BacklogEntry, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `WITH d AS (DELETE FROM {outbox_endpoint_backlog} WHERE pipeline = $1 AND endpoint_id = $2
			RETURNING lsn, idx, event_id, attempts, mark)
		SELECT lsn::text, idx, event_id::text, attempts, mark FROM d ORDER BY lsn, idx`), pipeline, endpoint)
	if err != nil {
		return nil, fmt.Errorf("drop the backlog of endpoint %s: %w", endpoint, err)
	}
	defer rows.Close()
	var out []BacklogEntry
	for rows.Next() {
		var e BacklogEntry
		var l string
		if err := rows.Scan(&l, &e.Idx, &e.EventID, &e.Attempts, &e.Mark); err != nil {
			return nil, err
		}
		if e.LSN, err = pglogrepl.ParseLSN(l); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("drop the backlog of endpoint %s: %w", endpoint, err)
	}
	return out, nil
}

// BacklogSize is an endpoint's backlog: how many entries, and the position of the last one.
type BacklogSize struct {
	Entries int64
	LSN     pglogrepl.LSN
	Idx     int
}

// BacklogSizes returns the backlog of every endpoint of pipeline that has one, by endpoint id.
func BacklogSizes(ctx context.Context, db DB, s, pipeline string) (map[string]BacklogSize, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT DISTINCT ON (endpoint_id) endpoint_id, lsn::text, idx,
			count(*) OVER (PARTITION BY endpoint_id)
		FROM {outbox_endpoint_backlog} WHERE pipeline = $1 ORDER BY endpoint_id, lsn DESC, idx DESC`), pipeline)
	if err != nil {
		return nil, fmt.Errorf("read the endpoints' backlogs: %w", err)
	}
	defer rows.Close()
	out := map[string]BacklogSize{}
	for rows.Next() {
		var id, l string
		var b BacklogSize
		if err := rows.Scan(&id, &l, &b.Idx, &b.Entries); err != nil {
			return nil, err
		}
		if b.LSN, err = pglogrepl.ParseLSN(l); err != nil {
			return nil, err
		}
		out[id] = b
	}
	return out, rows.Err()
}

// BacklogOldest returns, for each of endpoints of pipeline whose backlog names an event still in
// outbox_events, the created_at of the first such event in stream order: one index probe per
// endpoint (the primary key's order), so that its cost grows with the endpoints asked for, not
// with the size of their backlogs.
func BacklogOldest(ctx context.Context, db DB, s, pipeline string, endpoints []string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	if len(endpoints) == 0 {
		return out, nil
	}
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT e.id, f.created_at FROM unnest($2::text[]) AS e(id)
		CROSS JOIN LATERAL (SELECT o.created_at FROM {outbox_endpoint_backlog} b JOIN {outbox_events} o ON o.id = b.event_id
			WHERE b.pipeline = $1 AND b.endpoint_id = e.id ORDER BY b.lsn, b.idx LIMIT 1) f`), pipeline, endpoints)
	if err != nil {
		return nil, fmt.Errorf("read the oldest events of the endpoints' backlogs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = at
	}
	return out, rows.Err()
}
