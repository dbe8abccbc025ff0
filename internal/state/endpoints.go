package state

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The endpoints' data plane: the versions log (outbox_endpoint_versions), the endpoint state
// each pipeline applied by the commit LSN of each change, and the status its lanes report
// (outbox_endpoint_status). publisher.PGEndpointStore calls these.

// EndpointVersion is one row of the versions log: endpoint ID's row (to_jsonb) as the change
// committed at LSN left it; a nil Row is a removal.
type EndpointVersion struct {
	ID  string
	LSN pglogrepl.LSN
	Row []byte
}

// RecordEndpointVersion adds a version to pipeline's log; one recorded already stays as it is.
func RecordEndpointVersion(ctx context.Context, db DB, s, pipeline, id string, lsn pglogrepl.LSN, row []byte) error {
	var r any
	if row != nil {
		r = string(row)
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
		VALUES ($1, $2, $3::pg_lsn, $4::jsonb) ON CONFLICT DO NOTHING`), pipeline, id, lsn.String(), r)
	return err
}

// EndpointVersions returns pipeline's log in LSN order (the bootstrap marker left out), and
// whether it was bootstrapped.
func EndpointVersions(ctx context.Context, db DB, s, pipeline string) (bool, []EndpointVersion, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT endpoint_id, lsn::text, row::text FROM {outbox_endpoint_versions}
		WHERE pipeline = $1 ORDER BY lsn, endpoint_id`), pipeline)
	if err != nil {
		return false, nil, err
	}
	defer rows.Close()
	boot := false
	var out []EndpointVersion
	for rows.Next() {
		var id, lsn string
		var row *string
		if err := rows.Scan(&id, &lsn, &row); err != nil {
			return false, nil, err
		}
		if id == "" {
			boot = true
			continue
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return false, nil, err
		}
		v := EndpointVersion{ID: id, LSN: l}
		if row != nil {
			v.Row = []byte(*row)
		}
		out = append(out, v)
	}
	return boot, out, rows.Err()
}

// BootstrapEndpointVersions records, unless pipeline's log has its marker, the marker and every
// endpoint as db sees it now, at lsn: in a slot's exported snapshot at its consistent point (the
// endpoints as of the slot's first transaction), or at 0/0 for a slot that already existed.
func BootstrapEndpointVersions(ctx context.Context, db DB, s, pipeline string, lsn pglogrepl.LSN) error {
	_, err := db.Exec(ctx, schema.SQL(s, `WITH marker AS (
			INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
			SELECT $1, '', $2::pg_lsn, NULL
			WHERE NOT EXISTS (SELECT 1 FROM {outbox_endpoint_versions} WHERE pipeline = $1 AND endpoint_id = '')
			ON CONFLICT DO NOTHING RETURNING 1)
		INSERT INTO {outbox_endpoint_versions} (pipeline, endpoint_id, lsn, row)
		SELECT $1, e.id, $2::pg_lsn, to_jsonb(e) FROM {outbox_endpoints} e WHERE EXISTS (SELECT 1 FROM marker)
		ON CONFLICT DO NOTHING`), pipeline, lsn.String())
	return err
}

// PruneEndpointVersions forgets what no transaction after confirmed needs: each endpoint keeps
// its newest version at or below confirmed (unless that is a removal) and every later one.
func PruneEndpointVersions(ctx context.Context, db DB, s, pipeline string, confirmed pglogrepl.LSN) (int64, error) {
	tag, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_endpoint_versions} v
		WHERE v.pipeline = $1 AND v.endpoint_id <> '' AND v.lsn <= $2::pg_lsn
		  AND (EXISTS (SELECT 1 FROM {outbox_endpoint_versions} n WHERE n.pipeline = v.pipeline
		               AND n.endpoint_id = v.endpoint_id AND n.lsn > v.lsn AND n.lsn <= $2::pg_lsn)
		       OR (v.row IS NULL AND NOT EXISTS (SELECT 1 FROM {outbox_endpoint_versions} n WHERE n.pipeline = v.pipeline
		               AND n.endpoint_id = v.endpoint_id AND n.lsn > v.lsn)))`), pipeline, confirmed.String())
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// EndpointStatus is one row of outbox_endpoint_status; a zero time is NULL.
type EndpointStatus struct {
	Pipeline, EndpointID string
	Undelivered          int64
	OldestUndelivered    time.Time
	LastSuccess          time.Time
	LastError            string
	LastErrorAt          time.Time
	FailuresInRow        int
	UpdatedAt            time.Time // read only
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// SaveEndpointStatus upserts rows in one statement.
func SaveEndpointStatus(ctx context.Context, db DB, s string, rows []EndpointStatus) error {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows)
	pipes, ids, errs := make([]string, n), make([]string, n), make([]*string, n)
	und, fails := make([]int64, n), make([]int32, n)
	oldest, succ, errAt := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	for i, r := range rows {
		pipes[i], ids[i], und[i], fails[i] = r.Pipeline, r.EndpointID, r.Undelivered, int32(r.FailuresInRow)
		oldest[i], succ[i], errAt[i] = nullTime(r.OldestUndelivered), nullTime(r.LastSuccess), nullTime(r.LastErrorAt)
		if r.LastError != "" {
			e := r.LastError
			errs[i] = &e
		}
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_endpoint_status} AS t (pipeline, endpoint_id, undelivered,
			oldest_undelivered_at, last_success_at, last_error, last_error_at, failures_in_row, updated_at)
		SELECT p, e, u, o, su, le, la, f, now()
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[], $5::timestamptz[], $6::text[], $7::timestamptz[], $8::int[])
		  AS r(p, e, u, o, su, le, la, f)
		ON CONFLICT (pipeline, endpoint_id) DO UPDATE SET undelivered = excluded.undelivered,
			oldest_undelivered_at = excluded.oldest_undelivered_at, last_success_at = excluded.last_success_at,
			last_error = excluded.last_error, last_error_at = excluded.last_error_at,
			failures_in_row = excluded.failures_in_row, updated_at = excluded.updated_at`),
		pipes, ids, und, oldest, succ, errs, errAt, fails)
	return err
}

// EndpointStatuses returns every row of outbox_endpoint_status, by endpoint and pipeline.
func EndpointStatuses(ctx context.Context, db DB, s string) ([]EndpointStatus, error) {
	rows, err := db.Query(ctx, schema.SQL(s, `SELECT pipeline, endpoint_id, undelivered, oldest_undelivered_at, last_success_at,
		coalesce(last_error, ''), last_error_at, failures_in_row, updated_at FROM {outbox_endpoint_status} ORDER BY endpoint_id, pipeline`))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (EndpointStatus, error) {
		var st EndpointStatus
		var oldest, succ, errAt *time.Time
		err := r.Scan(&st.Pipeline, &st.EndpointID, &st.Undelivered, &oldest, &succ, &st.LastError, &errAt, &st.FailuresInRow, &st.UpdatedAt)
		for _, p := range []struct {
			src *time.Time
			dst *time.Time
		}{{oldest, &st.OldestUndelivered}, {succ, &st.LastSuccess}, {errAt, &st.LastErrorAt}} {
			if p.src != nil {
				*p.dst = *p.src
			}
		}
		return st, err
	})
}

// ForgetEndpointStatus deletes a removed endpoint's status in pipeline.
func ForgetEndpointStatus(ctx context.Context, db DB, s, pipeline, id string) error {
	_, err := db.Exec(ctx, schema.SQL(s, `DELETE FROM {outbox_endpoint_status} WHERE pipeline = $1 AND endpoint_id = $2`), pipeline, id)
	return err
}
