package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The endpoints' state of each pipeline (or shard), run with endpoints:
//
//   - outbox_endpoint_versions: the endpoint rows the pipeline applied, each at the commit LSN of
//     its change, so that a relay that starts or takes over routes every transaction with the
//     endpoints committed before it. A bootstrap records the endpoints as they are at one point
//     (the slot's consistent point, read in its exported snapshot; 0/0 for a slot that existed
//     before), with a marker row (endpoint_id ''); the stream's changes follow. The newest
//     bootstrap is the whole truth as of its LSN: the versions before it belong to an earlier
//     slot of the pipeline, whose stream may have missed changes, and are never returned.
//   - outbox_endpoint_status: what each endpoint lane last reported, for `status --endpoints`.

// markerID is the endpoint_id of a bootstrap's marker row.
const markerID = ""

// EndpointVersion is an endpoint's row as of the commit LSN of its change.
type EndpointVersion struct {
	ID  string
	LSN pglogrepl.LSN
	// Row is to_jsonb of the endpoint's row (as jsonb prints it); nil: the endpoint was removed.
	Row []byte
}

// ErrMarkerID is returned by RecordEndpointVersion for an empty id, which only a bootstrap's
// marker row may have.
var ErrMarkerID = errors.New("an endpoint version needs an endpoint id ('' marks a bootstrap)")

// RecordEndpointVersion records that pipeline applied endpoint id's row (nil: its removal) at
// lsn, the commit LSN of the change. Recording the same change again changes nothing.
func RecordEndpointVersion(ctx context.Context, db DB, s, pipeline, id string, lsn pglogrepl.LSN, row []byte) error {
	if id == markerID {
		return ErrMarkerID
	}
	var arg *string
	if row != nil {
		r := string(row)
		arg = &r
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
		VALUES ($1, $2, $3::pg_lsn, $4::jsonb) ON CONFLICT DO NOTHING`), pipeline, id, lsn.String(), arg)
	if err != nil {
		return fmt.Errorf("record version %s of endpoint %q for pipeline %q: %w", lsn, id, pipeline, err)
	}
	return nil
}

// newestMarker is an SQL expression over $1 (the pipeline): the LSN of its newest bootstrap,
// 0/0 when it has none.
const newestMarker = `coalesce((SELECT max(m.lsn) FROM {outbox_endpoint_versions} m
	WHERE m.pipeline = $1 AND m.endpoint_id = ''), '0/0')`

// EndpointVersions returns pipeline's versions since its newest bootstrap (all of them when it
// has none), ordered by LSN, then id (bytewise), the marker left out, and whether it was
// bootstrapped.
func EndpointVersions(ctx context.Context, db DB, s, pipeline string) (bootstrapped bool, vs []EndpointVersion, err error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT endpoint_id, lsn::text, row::text FROM {outbox_endpoint_versions}
		WHERE pipeline = $1 AND lsn >= `+newestMarker+`
		ORDER BY lsn, endpoint_id COLLATE "C"`), pipeline)
	if err != nil {
		return false, nil, fmt.Errorf("read the endpoint versions of pipeline %q: %w", pipeline, err)
	}
	defer rows.Close()
	for rows.Next() {
		var v EndpointVersion
		var lsn string
		var row *string
		if err := rows.Scan(&v.ID, &lsn, &row); err != nil {
			return false, nil, fmt.Errorf("read the endpoint versions of pipeline %q: %w", pipeline, err)
		}
		if v.LSN, err = pglogrepl.ParseLSN(lsn); err != nil {
			return false, nil, fmt.Errorf("endpoint version of pipeline %q: lsn %q: %w", pipeline, lsn, err)
		}
		if v.ID == markerID {
			bootstrapped = true
			continue
		}
		if row != nil {
			v.Row = []byte(*row)
		}
		vs = append(vs, v)
	}
	if err := rows.Err(); err != nil {
		return false, nil, fmt.Errorf("read the endpoint versions of pipeline %q: %w", pipeline, err)
	}
	return bootstrapped, vs, nil
}

// BootstrapEndpointVersions records, in one statement, a marker and every row of s's
// outbox_endpoints as it is in db's snapshot, at lsn: with db a transaction in a new slot's
// exported snapshot and lsn its consistent point, exactly the endpoints as of the slot's start;
// with lsn 0, for a slot that existed before, the endpoints as they are now. It does nothing
// when pipeline has a bootstrap at lsn or later already (so with lsn 0, whenever it has one),
// and a bootstrap at a later LSN supersedes the versions before it (EndpointVersions): a
// recreated slot starts from its own snapshot, whatever its predecessor's stream missed.
func BootstrapEndpointVersions(ctx context.Context, db DB, s, pipeline string, lsn pglogrepl.LSN) error {
	_, err := db.Exec(ctx, schema.SQL(s, `
		WITH marker AS (`+insertMarker+`)
		INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
		SELECT $1, e.id, $2::pg_lsn, to_jsonb(e) FROM {outbox_endpoints} e
		WHERE EXISTS (SELECT 1 FROM marker)
		ON CONFLICT DO NOTHING`), pipeline, lsn.String())
	if err != nil {
		return fmt.Errorf("record the endpoints of pipeline %q as of %s: %w", pipeline, lsn, err)
	}
	return nil
}

// insertMarker inserts the marker of a bootstrap of pipeline $1 at $2, unless it has one at $2
// or later, and returns a row when it did.
const insertMarker = `INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
	SELECT $1, '', $2::pg_lsn, NULL
	WHERE NOT EXISTS (SELECT 1 FROM {outbox_endpoint_versions} WHERE pipeline = $1 AND endpoint_id = '' AND lsn >= $2::pg_lsn)
	ON CONFLICT DO NOTHING
	RETURNING 1`

// CopyEndpointVersions is BootstrapEndpointVersions for a slot on a standby: it reads the
// endpoints in stx (a transaction on the standby, in the new slot's exported snapshot; the
// standby is a physical copy, so the relay's tables are in the same schema there) and records
// them with the marker in ptx, a transaction on the primary; nothing when pipeline has a
// bootstrap at lsn or later already.
func CopyEndpointVersions(ctx context.Context, stx, ptx DB, s, pipeline string, lsn pglogrepl.LSN) error {
	var marked bool
	if err := ptx.QueryRow(ctx, schema.SQL(s, `WITH marker AS (`+insertMarker+`) SELECT EXISTS (SELECT 1 FROM marker)`),
		pipeline, lsn.String()).Scan(&marked); err != nil || !marked {
		return wrapBootstrap(err, pipeline, lsn)
	}
	rows, err := stx.Query(ctx, schema.SQL(s, `SELECT id, to_jsonb(e)::text FROM {outbox_endpoints} e`))
	if err != nil {
		return wrapBootstrap(err, pipeline, lsn)
	}
	var ids, texts []string
	var id, text string
	if _, err := pgx.ForEachRow(rows, []any{&id, &text}, func() error {
		ids, texts = append(ids, id), append(texts, text)
		return nil
	}); err != nil {
		return wrapBootstrap(err, pipeline, lsn)
	}
	_, err = ptx.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
		SELECT $1, r.id, $2::pg_lsn, r.row::jsonb FROM unnest($3::text[], $4::text[]) AS r(id, row)
		ON CONFLICT DO NOTHING`), pipeline, lsn.String(), ids, texts)
	return wrapBootstrap(err, pipeline, lsn)
}

func wrapBootstrap(err error, pipeline string, lsn pglogrepl.LSN) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("record the endpoints of pipeline %q as of %s: %w", pipeline, lsn, err)
}

// PruneEndpointVersions deletes what no routing of a transaction after confirmed (pipeline's
// confirmed position) can use, and returns how many rows it deleted: per endpoint, every
// version superseded by a later one at or below confirmed, and the newest at or below confirmed
// when it is a removal and the endpoint's latest version; and everything before the newest
// bootstrap, older markers included. It keeps the newest marker, and every version after
// confirmed.
func PruneEndpointVersions(ctx context.Context, db DB, s, pipeline string, confirmed pglogrepl.LSN) (int64, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, `
		DELETE FROM {outbox_endpoint_versions} v
		WHERE v.pipeline = $1 AND (
			v.lsn < `+newestMarker+`
			OR (v.endpoint_id <> '' AND v.lsn <= $2::pg_lsn AND (
				EXISTS (SELECT 1 FROM {outbox_endpoint_versions} w WHERE w.pipeline = v.pipeline
					AND w.endpoint_id = v.endpoint_id AND w.lsn > v.lsn AND w.lsn <= $2::pg_lsn)
				OR (v.row IS NULL AND NOT EXISTS (SELECT 1 FROM {outbox_endpoint_versions} w
					WHERE w.pipeline = v.pipeline AND w.endpoint_id = v.endpoint_id AND w.lsn > v.lsn)))))`),
		pipeline, confirmed.String())
	if err != nil {
		return 0, fmt.Errorf("prune the endpoint versions of pipeline %q: %w", pipeline, err)
	}
	return tag.RowsAffected(), nil
}

// EndpointStatus is what one endpoint lane of a pipeline last reported. A zero time is NULL,
// and so is an empty LastError.
type EndpointStatus struct {
	Pipeline, EndpointID string
	Undelivered          int64
	OldestUndelivered    time.Time
	LastSuccess          time.Time
	LastError            string
	LastErrorAt          time.Time
	FailuresInRow        int
	// FailingSince is when the endpoint's current run of failed attempts began (its first
	// failed attempt after its last success); zero while it is not failing. Auto-disable counts
	// from it, across restarts.
	FailingSince time.Time
	// UpdatedAt is when the row was last saved; SaveEndpointStatus ignores it.
	UpdatedAt time.Time
}

// SaveEndpointStatus records rows, in one statement however many there are; a later row of the
// same pipeline and endpoint wins over an earlier one.
func SaveEndpointStatus(ctx context.Context, db DB, s string, rows []EndpointStatus) error {
	rows = lastOfEach(rows)
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	pipelines, ids, errs := make([]string, n), make([]string, n), make([]string, n)
	undelivered, failures := make([]int64, n), make([]int32, n)
	oldest, success, errorAt := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	failing := make([]*time.Time, n)
	for i, r := range rows {
		failing[i] = orNull(r.FailingSince)
		pipelines[i], ids[i], errs[i] = r.Pipeline, r.EndpointID, r.LastError
		undelivered[i], failures[i] = r.Undelivered, int32(min(r.FailuresInRow, 1<<31-1))
		oldest[i], success[i], errorAt[i] = orNull(r.OldestUndelivered), orNull(r.LastSuccess), orNull(r.LastErrorAt)
	}
	_, err := db.Exec(ctx, schema.SQL(s, `
		INSERT INTO {outbox_endpoint_status} AS t (pipeline, endpoint_id, undelivered, oldest_undelivered_at,
			last_success_at, last_error, last_error_at, failures_in_row, failing_since, updated_at)
		SELECT r.pipeline, r.endpoint_id, r.undelivered, r.oldest, r.success, NULLIF(r.err, ''), r.error_at, r.failures,
			r.failing, now()
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::text[],
			$7::timestamptz[], $8::integer[], $9::timestamptz[])
			AS r(pipeline, endpoint_id, undelivered, oldest, success, err, error_at, failures, failing)
		ON CONFLICT (pipeline, endpoint_id) DO UPDATE SET undelivered = excluded.undelivered,
			oldest_undelivered_at = excluded.oldest_undelivered_at, last_success_at = excluded.last_success_at,
			last_error = excluded.last_error, last_error_at = excluded.last_error_at,
			failures_in_row = excluded.failures_in_row, failing_since = excluded.failing_since,
			updated_at = excluded.updated_at`),
		pipelines, ids, undelivered, oldest, success, errs, errorAt, failures, failing)
	if err != nil {
		return fmt.Errorf("save the status of %d endpoint lanes: %w", n, err)
	}
	return nil
}

// lastOfEach returns rows with only the last row of each pipeline and endpoint, in the order
// of their first appearance: one INSERT ... ON CONFLICT DO UPDATE may not touch a row twice.
func lastOfEach(rows []EndpointStatus) []EndpointStatus {
	type key struct{ pipeline, id string }
	at := make(map[key]int, len(rows))
	out := make([]EndpointStatus, 0, len(rows))
	for _, r := range rows {
		k := key{r.Pipeline, r.EndpointID}
		if i, ok := at[k]; ok {
			out[i] = r
			continue
		}
		at[k] = len(out)
		out = append(out, r)
	}
	return out
}

func orNull(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// EndpointStatuses returns every endpoint lane's status in s, by pipeline, then endpoint id.
func EndpointStatuses(ctx context.Context, db DB, s string) ([]EndpointStatus, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT pipeline, endpoint_id, undelivered, oldest_undelivered_at,
			last_success_at, coalesce(last_error, ''), last_error_at, failures_in_row, failing_since, updated_at
		FROM {outbox_endpoint_status} ORDER BY pipeline COLLATE "C", endpoint_id COLLATE "C"`))
	if err != nil {
		return nil, fmt.Errorf("read the endpoints' status: %w", err)
	}
	defer rows.Close()
	var out []EndpointStatus
	for rows.Next() {
		var r EndpointStatus
		var oldest, success, errorAt, failing *time.Time
		if err := rows.Scan(&r.Pipeline, &r.EndpointID, &r.Undelivered, &oldest, &success, &r.LastError, &errorAt,
			&r.FailuresInRow, &failing, &r.UpdatedAt); err != nil {
			return nil, fmt.Errorf("read the endpoints' status: %w", err)
		}
		r.OldestUndelivered, r.LastSuccess, r.LastErrorAt = orZero(oldest), orZero(success), orZero(errorAt)
		r.FailingSince = orZero(failing)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the endpoints' status: %w", err)
	}
	return out, nil
}

func orZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

// EndpointsFailingSince returns, by endpoint id, when each of pipeline's endpoints that is
// failing began to (its status's failing_since), for a relay that starts: a run of failures
// that began before a restart keeps counting towards the endpoint's auto-disable.
func EndpointsFailingSince(ctx context.Context, db DB, s, pipeline string) (map[string]time.Time, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT endpoint_id, failing_since FROM {outbox_endpoint_status}
		WHERE pipeline = $1 AND endpoint_id <> '' AND failing_since IS NOT NULL`), pipeline)
	if err != nil {
		return nil, fmt.Errorf("read when the endpoints of pipeline %q began failing: %w", pipeline, err)
	}
	out := map[string]time.Time{}
	var id string
	var at time.Time
	if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error {
		out[id] = at
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read when the endpoints of pipeline %q began failing: %w", pipeline, err)
	}
	return out, nil
}

// ForgetEndpointStatus deletes the status of pipeline's lane of endpoint id (a removed
// endpoint's).
func ForgetEndpointStatus(ctx context.Context, db DB, s, pipeline, id string) error {
	_, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_endpoint_status} WHERE pipeline = $1 AND endpoint_id = $2`),
		pipeline, id)
	if err != nil {
		return fmt.Errorf("forget the status of endpoint %q of pipeline %q: %w", id, pipeline, err)
	}
	return nil
}

// ForgetEndpointPipeline deletes pipeline's endpoint versions, its lanes' status and backlogs: the
// pipeline (or shard) was dropped, and one created again under its name bootstraps anew.
func ForgetEndpointPipeline(ctx context.Context, db DB, s, pipeline string) error {
	for _, q := range []string{`DELETE FROM {outbox_endpoint_versions} WHERE pipeline = $1`,
		`DELETE FROM {outbox_endpoint_status} WHERE pipeline = $1`,
		// A new slot of the pipeline starts from its own position: the old backlogs are not its.
		`DELETE FROM {outbox_endpoint_backlog} WHERE pipeline = $1`} {
		if _, err := db.Exec(ctx, schema.SQL(s, q), pipeline); err != nil {
			return fmt.Errorf("forget the endpoints' state of pipeline %q: %w", pipeline, err)
		}
	}
	return nil
}

// EndpointMarker returns the LSN of pipeline's newest bootstrap, and false when it has none:
// the versions at that LSN are the endpoints the log begins with; every later one is a change
// that applies from its commit on.
func EndpointMarker(ctx context.Context, db DB, s, pipeline string) (pglogrepl.LSN, bool, error) {
	var lsn *string
	if err := db.QueryRow(ctx, schema.SQL(s, `SELECT max(lsn)::text FROM {outbox_endpoint_versions}
		WHERE pipeline = $1 AND endpoint_id = ''`), pipeline).Scan(&lsn); err != nil {
		return 0, false, fmt.Errorf("read the endpoint bootstrap of pipeline %q: %w", pipeline, err)
	}
	if lsn == nil {
		return 0, false, nil
	}
	l, err := pglogrepl.ParseLSN(*lsn)
	return l, err == nil, err
}

// BeginOutage records that endpoint id's circuit breaker opened on some shard or relay, unless
// an outage of it is recorded already (outbox_endpoint_outages).
func BeginOutage(ctx context.Context, db DB, s, id string) error {
	if _, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_outages} (endpoint_id) VALUES ($1)
		ON CONFLICT DO NOTHING`), id); err != nil {
		return fmt.Errorf("record the outage of endpoint %q: %w", id, err)
	}
	return nil
}

// EndOutage ends endpoint id's recorded outage, and reports whether this call did: of the shards
// and relays that see the endpoint recover, one does, and reports it.
func EndOutage(ctx context.Context, db DB, s, id string) (bool, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_endpoint_outages} WHERE endpoint_id = $1`), id)
	if err != nil {
		return false, fmt.Errorf("end the outage of endpoint %q: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}
