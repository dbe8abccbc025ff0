package state

import (
	"context"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A pipeline's own state of the events it could not deliver, in outbox_pipeline_events: for a
// pipeline that does not own the rows' status columns (pgstore.Pipeline's OwnState).

// pipelineEventSQL records one event's per-pipeline state; it inserts nothing for a row not yet
// visible.
const pipelineEventSQL = `INSERT INTO {outbox_pipeline_events} (pipeline, event_id, status, retries, last_error, event_sequence)
	SELECT $1, e.id, $3, $4, $5, $6 FROM {outbox_events} e WHERE e.id = $2
	ON CONFLICT (pipeline, event_id) DO UPDATE SET status = excluded.status, retries = excluded.retries,
		last_error = excluded.last_error, event_sequence = excluded.event_sequence, updated_at = now()`

// RecordPipelineEvent records pipeline's state of event id (status failed or abandoned, its
// retries, last error and stream position) and returns how many rows it wrote (0: the row is
// not visible yet).
func RecordPipelineEvent(ctx context.Context, db DB, s, pipeline, id, status string, retries int, lastErr, seq string) (int64, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, pipelineEventSQL), pipeline, id, status, retries, lastErr, seq)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ParkPipelineEvents records the events ids parked for pipeline, each with its stream position
// (seqs, index for index), and returns how many rows it wrote.
func ParkPipelineEvents(ctx context.Context, db DB, s, pipeline string, ids, seqs []string) (int64, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_pipeline_events} (pipeline, event_id, status, event_sequence)
			SELECT $3, o.id, 'parked', p.seq FROM unnest($1::uuid[], $2::text[]) AS p(id, seq) JOIN {outbox_events} o ON o.id = p.id
			ON CONFLICT (pipeline, event_id) DO UPDATE SET status = 'parked', event_sequence = excluded.event_sequence,
				updated_at = now()`), ids, seqs, pipeline)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// ForgetReplayed forgets pipeline's failed and parked events of agg: a replay delivered them.
func ForgetReplayed(ctx context.Context, db DB, s, pipeline string, agg Aggregate) error {
	_, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_pipeline_events} p USING {outbox_events} e
			WHERE p.event_id = e.id AND p.pipeline = $3 AND e.aggregate_type = $1 AND e.aggregate_id = $2
			  AND p.status IN ('failed', 'parked')`), agg.Type, agg.ID, pipeline)
	return err
}
