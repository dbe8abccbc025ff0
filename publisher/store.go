package publisher

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Store keeps dead letters and parked aggregates durable. The publisher writes through it
// before acknowledging an event it will not deliver now, so the slot can move past the event
// while its row still holds everything a replay needs.
type Store interface {
	// Parked returns the parked aggregates, loaded at start.
	Parked(ctx context.Context) ([]cdc.Aggregate, error)
	// DeadLetter marks ev failed with its attempts and last error, and parks its aggregate.
	DeadLetter(ctx context.Context, ev *cdc.Event, attempts int, lastErr string) error
	// Park marks events held behind a dead letter.
	Park(ctx context.Context, evs []*cdc.Event) error
	// Replayable returns the failed and parked events of an aggregate in commit order, as
	// events of tx (the replay request's transaction).
	Replayable(ctx context.Context, agg cdc.Aggregate, tx *cdc.Tx) ([]*cdc.Event, error)
	// Unpark forgets a parked aggregate once its replay is delivered.
	Unpark(ctx context.Context, agg cdc.Aggregate) error
	// BackfillPage returns up to limit still-pending backfill events of slot after position
	// after, in order, as events of tx, and the last position read.
	BackfillPage(ctx context.Context, slot string, after int64, limit int, tx *cdc.Tx) ([]*cdc.Event, int64, error)
	// BackfillDone forgets a slot's backfill.
	BackfillDone(ctx context.Context, slot string) error
	// Abandoned records an event a shadow pipeline gave up on after its last attempt; it is
	// settled, never parked.
	Abandoned(ctx context.Context, ev *cdc.Event, attempts int, lastErr string) error
}

// PGStore is the Store on the outbox tables, scoped to one pipeline.
type PGStore struct {
	Pool *pgxpool.Pool
	// Pipeline names the pipeline whose parked aggregates and dead letters this is. Empty:
	// "default".
	Pipeline string
	// OwnState keeps the pipeline's failed and parked events in outbox_pipeline_events instead
	// of the row's status, retries and last_error columns, which belong to one pipeline (the
	// status owner). False (the zero value): the row's columns, as before pipelines.
	OwnState bool
	// Schema is the PostgreSQL schema of the outbox tables. Empty: unqualified names, which
	// the pool's search_path resolves (its current_schema() when that holds them).
	Schema string
}

// q names the tables of s.Schema in query (see schema.SQL).
func (s PGStore) q(query string) string { return schema.SQL(s.Schema, query) }

func (s PGStore) pipeline() string {
	if s.Pipeline == "" {
		return "default"
	}
	return s.Pipeline
}

// Parked implements Store.
func (s PGStore) Parked(ctx context.Context) ([]cdc.Aggregate, error) {
	rows, err := s.Pool.Query(ctx, s.q(`SELECT aggregate_type, aggregate_id FROM {outbox_parked_aggregates} WHERE pipeline = $1`),
		s.pipeline())
	if err != nil {
		return nil, fmt.Errorf("load parked aggregates: %w", err)
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[cdc.Aggregate])
}

// pipelineEventSQL records one event's per-pipeline state; it inserts nothing for a row not yet
// visible (see errNotVisible).
const pipelineEventSQL = `INSERT INTO {outbox_pipeline_events} (pipeline, event_id, status, retries, last_error, event_sequence)
	SELECT $1, e.id, $3, $4, $5, $6 FROM {outbox_events} e WHERE e.id = $2
	ON CONFLICT (pipeline, event_id) DO UPDATE SET status = excluded.status, retries = excluded.retries,
		last_error = excluded.last_error, event_sequence = excluded.event_sequence, updated_at = now()`

// DeadLetter implements Store.
func (s PGStore) DeadLetter(ctx context.Context, ev *cdc.Event, attempts int, lastErr string) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		var tag pgconn.CommandTag
		var err error
		if s.OwnState {
			tag, err = tx.Exec(ctx, s.q(pipelineEventSQL), s.pipeline(), ev.ID, "failed", attempts-1, lastErr, Sequence(ev))
		} else {
			tag, err = tx.Exec(ctx, s.q(`UPDATE {outbox_events} SET status = 'failed', retries = $2, last_error = $3, event_sequence = $4
				WHERE id = $1`), ev.ID, attempts-1, lastErr, Sequence(ev))
		}
		if err != nil {
			return err
		}
		if err := visible(tag.RowsAffected(), 1); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.q(`INSERT INTO {outbox_parked_aggregates} (aggregate_type, aggregate_id, first_event_id, reason, pipeline, own_state)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (pipeline, aggregate_type, aggregate_id) DO UPDATE SET first_event_id = $3, reason = $4, parked_at = now()`),
			ev.AggregateType, ev.AggregateID, ev.ID, lastErr, s.pipeline(), s.OwnState)
		return err
	})
}

// Abandoned implements Store.
func (s PGStore) Abandoned(ctx context.Context, ev *cdc.Event, attempts int, lastErr string) error {
	tag, err := s.Pool.Exec(ctx, s.q(pipelineEventSQL), s.pipeline(), ev.ID, "abandoned", attempts-1, lastErr, Sequence(ev))
	if err != nil {
		return err
	}
	return visible(tag.RowsAffected(), 1)
}

// Park implements Store.
func (s PGStore) Park(ctx context.Context, evs []*cdc.Event) error {
	if len(evs) == 0 {
		return nil
	}
	ids := make([]string, len(evs))
	seqs := make([]string, len(evs))
	for i, ev := range evs {
		ids[i], seqs[i] = ev.ID, Sequence(ev)
	}
	var tag pgconn.CommandTag
	var err error
	if s.OwnState {
		tag, err = s.Pool.Exec(ctx, s.q(`INSERT INTO {outbox_pipeline_events} (pipeline, event_id, status, event_sequence)
			SELECT $3, o.id, 'parked', p.seq FROM unnest($1::uuid[], $2::text[]) AS p(id, seq) JOIN {outbox_events} o ON o.id = p.id
			ON CONFLICT (pipeline, event_id) DO UPDATE SET status = 'parked', event_sequence = excluded.event_sequence,
				updated_at = now()`), ids, seqs, s.pipeline())
	} else {
		tag, err = s.Pool.Exec(ctx, s.q(`UPDATE {outbox_events} o SET status = 'parked', event_sequence = p.seq
			FROM unnest($1::uuid[], $2::text[]) AS p(id, seq) WHERE o.id = p.id`), ids, seqs)
	}
	if err != nil {
		return err
	}
	return visible(tag.RowsAffected(), len(ids))
}

// errNotVisible means an update found fewer rows than it named. Logical decoding can hand over a
// transaction a moment before its commit is visible to other sessions (the WAL is flushed before
// the commit is published), so an update right after receipt can miss rows; the caller retries.
var errNotVisible = errors.New("outbox rows not visible yet")

func visible(affected int64, want int) error {
	if affected < int64(want) {
		return fmt.Errorf("%w: updated %d of %d", errNotVisible, affected, want)
	}
	return nil
}

// Replayable implements Store.
func (s PGStore) Replayable(ctx context.Context, agg cdc.Aggregate, tx *cdc.Tx) ([]*cdc.Event, error) {
	q := `
		SELECT id::text, event_type, payload::text, coalesce(headers::text, ''), coalesce(event_sequence, ''), created_at
		FROM {outbox_events}
		WHERE aggregate_type = $1 AND aggregate_id = $2 AND status IN ('failed', 'parked') AND $3 <> ''
		ORDER BY event_sequence, created_at`
	if s.OwnState {
		q = `
		SELECT e.id::text, e.event_type, e.payload::text, coalesce(e.headers::text, ''), coalesce(p.event_sequence, ''), e.created_at
		FROM {outbox_pipeline_events} p JOIN {outbox_events} e ON e.id = p.event_id
		WHERE e.aggregate_type = $1 AND e.aggregate_id = $2 AND p.pipeline = $3 AND p.status IN ('failed', 'parked')
		ORDER BY p.event_sequence, e.created_at`
	}
	rows, err := s.Pool.Query(ctx, s.q(q), agg.Type, agg.ID, s.pipeline())
	if err != nil {
		return nil, fmt.Errorf("load events to replay: %w", err)
	}
	defer rows.Close()
	var evs []*cdc.Event
	for rows.Next() {
		ev := &cdc.Event{AggregateType: agg.Type, AggregateID: agg.ID, Tx: tx}
		var payload, headers string
		if err := rows.Scan(&ev.ID, &ev.EventType, &payload, &headers, &ev.Seq, &ev.CreatedAt); err != nil {
			return nil, err
		}
		ev.Payload = []byte(payload)
		if headers != "" {
			ev.Headers = []byte(headers)
		}
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// Unpark implements Store.
func (s PGStore) Unpark(ctx context.Context, agg cdc.Aggregate) error {
	return pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, s.q(`DELETE FROM {outbox_parked_aggregates} WHERE aggregate_type = $1 AND aggregate_id = $2 AND pipeline = $3`),
			agg.Type, agg.ID, s.pipeline()); err != nil || !s.OwnState {
			return err
		}
		// The replay delivered them: this pipeline's record of them is done.
		_, err := tx.Exec(ctx, s.q(`DELETE FROM {outbox_pipeline_events} p USING {outbox_events} e
			WHERE p.event_id = e.id AND p.pipeline = $3 AND e.aggregate_type = $1 AND e.aggregate_id = $2
			  AND p.status IN ('failed', 'parked')`), agg.Type, agg.ID, s.pipeline())
		return err
	})
}

// BackfillPage implements Store.
func (s PGStore) BackfillPage(ctx context.Context, slot string, after int64, limit int, tx *cdc.Tx) ([]*cdc.Event, int64, error) {
	rows, err := s.Pool.Query(ctx, s.q(`
		SELECT b.position, e.id::text, e.aggregate_type, e.aggregate_id, e.event_type, e.payload::text,
		       coalesce(e.headers::text, ''), e.created_at
		FROM {outbox_backfill} b JOIN {outbox_events} e ON e.id = b.event_id
		WHERE b.slot = $1 AND b.position > $2 AND (e.status = 'pending' OR $4)
		ORDER BY b.position LIMIT $3`), slot, after, limit, s.OwnState)
	if err != nil {
		return nil, after, fmt.Errorf("read backfill: %w", err)
	}
	defer rows.Close()
	var evs []*cdc.Event
	last := after
	for rows.Next() {
		ev := &cdc.Event{Tx: tx}
		var payload, headers string
		var pos int64
		if err := rows.Scan(&pos, &ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType, &payload, &headers, &ev.CreatedAt); err != nil {
			return nil, after, err
		}
		ev.Payload, ev.Index, last = []byte(payload), int(pos), pos
		if headers != "" {
			ev.Headers = []byte(headers)
		}
		evs = append(evs, ev)
	}
	return evs, last, rows.Err()
}

// BackfillDone implements Store.
func (s PGStore) BackfillDone(ctx context.Context, slot string) error {
	_, err := s.Pool.Exec(ctx, s.q(`DELETE FROM {outbox_backfill} WHERE slot = $1`), slot)
	return err
}
