package state

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// A page of an endpoint's delivery log for the API: newest first, by keyset, each table read
// through its (pipeline, endpoint_id, time) index whatever the number of rows.

// LogCursor is a position in an endpoint's log, newest first: the entry's time, then its event
// id, attempt and kind (a failed attempt before a delivery), all descending. The zero cursor is
// before the newest entry.
type LogCursor struct {
	At        time.Time
	EventID   string
	Attempt   int
	Delivered bool
}

// LogPageQuery selects a page of an endpoint's log: entries in [Since, Until), after Cursor,
// failed attempts only or deliveries only when Failed or Delivered is set, at most Limit.
type LogPageQuery struct {
	Endpoint          string
	Since, Until      time.Time
	Failed, Delivered bool
	Cursor            LogCursor
	Limit             int
}

// logPipelines lists the pipelines of both log tables by a loose index scan (a few probes of
// each index per pipeline): the indexes lead with the pipeline, so each pipeline's range of one
// endpoint is then a range scan.
const logPipelines = `pipes AS (
	SELECT DISTINCT p FROM (
		WITH RECURSIVE a(p) AS (
			(SELECT pipeline FROM {outbox_delivery_attempts} ORDER BY pipeline LIMIT 1)
			UNION ALL
			SELECT (SELECT pipeline FROM {outbox_delivery_attempts} WHERE pipeline > a.p ORDER BY pipeline LIMIT 1)
			FROM a WHERE a.p IS NOT NULL),
		d(p) AS (
			(SELECT pipeline FROM {outbox_deliveries} ORDER BY pipeline LIMIT 1)
			UNION ALL
			SELECT (SELECT pipeline FROM {outbox_deliveries} WHERE pipeline > d.p ORDER BY pipeline LIMIT 1)
			FROM d WHERE d.p IS NOT NULL)
		SELECT p FROM a UNION ALL SELECT p FROM d) x WHERE p IS NOT NULL)`

// logPageSQL reads a page over $1 endpoint, $2 since, $3 until, $4..$7 the cursor (time, event
// id, attempt, delivered; $4 is the until when the cursor is zero), $8 limit, $9 failed only,
// $10 deliveries only, $11 the cursor's time plus DeliveryRowSpan.
//
// Failed attempts: per pipeline, the index backwards from the cursor, $8 rows.
//
// Deliveries: a row holds one flush's deliveries, each entry's time within the row's
// [first_at, last_at], less than DeliveryRowSpan apart, and rows of one endpoint overlap in time
// (an attempt is logged when it ends, under the time it began). So the newest $8 entries are
// found in two index ranges: the $8 rows that end before the cursor (all their entries are
// before it) give a lower bound, the $8-th newest of their entries (no later than the true
// $8-th, since those are $8 entries before the cursor; since, when they are fewer); then the rows
// whose last_at is between the bound and the cursor plus DeliveryRowSpan hold every entry of the
// page (a row ending later began after the cursor). OFFSET 0 keeps that range a subquery of its
// own per pipeline: pulled up into a join, the bound would be known only at run time.
const logPageSQL = `WITH ` + logPipelines + `,
failed AS (
	SELECT x.* FROM pipes CROSS JOIN LATERAL (
		SELECT a.pipeline, a.event_id, a.attempt, a.at, coalesce(a.status_code, 0) AS status, a.latency_ms, a.error,
			false AS delivered
		FROM {outbox_delivery_attempts} a
		WHERE NOT $10 AND a.pipeline = pipes.p AND a.endpoint_id = $1 AND a.at >= $2 AND a.at < $3 AND a.at <= $4
			AND (a.at, a.event_id, a.attempt, false) < ($4, $5::uuid, $6, $7)
		ORDER BY a.at DESC, a.event_id DESC, a.attempt DESC LIMIT $8) x
),
recent AS (
	SELECT x.* FROM pipes CROSS JOIN LATERAL (
		SELECT d.event_ids, d.delivered_at, d.attempts FROM {outbox_deliveries} d
		WHERE NOT $9 AND d.pipeline = pipes.p AND d.endpoint_id = $1 AND d.last_at >= $2 AND d.last_at < $4
		ORDER BY d.last_at DESC LIMIT $8) x
),
bound AS (
	SELECT CASE WHEN count(*) < $8 THEN $2::timestamptz ELSE min(at) END AS t FROM (
		SELECT u.at FROM recent r CROSS JOIN LATERAL unnest(r.event_ids, r.delivered_at, r.attempts) AS u(id, at, a)
		WHERE u.at >= $2 AND u.at < $3
		ORDER BY u.at DESC LIMIT $8) y
),
delivered AS (
	SELECT x.* FROM pipes CROSS JOIN bound CROSS JOIN LATERAL (
		SELECT d.pipeline, u.id AS event_id, u.a AS attempt, u.at, 0 AS status, u.l AS latency_ms, '' AS error, true AS delivered
		FROM {outbox_deliveries} d CROSS JOIN LATERAL unnest(d.event_ids, d.delivered_at, d.attempts, d.latency_ms) AS u(id, at, a, l)
		WHERE NOT $9 AND d.pipeline = pipes.p AND d.endpoint_id = $1 AND d.last_at >= bound.t AND d.last_at <= $11
			AND d.first_at <= $4 AND u.at >= bound.t AND u.at >= $2 AND u.at < $3
			AND (u.at, u.id, u.a, true) < ($4, $5::uuid, $6, $7)
		OFFSET 0) x
)
SELECT pipeline, event_id::text, attempt, at, status, latency_ms, error, delivered FROM (
	SELECT * FROM failed UNION ALL SELECT * FROM delivered) e
ORDER BY at DESC, event_id DESC, attempt DESC, delivered DESC
LIMIT $8`

// maxUUID sorts after every event id: the cursor's id before the first page.
const maxUUID = "ffffffff-ffff-ffff-ffff-ffffffffffff"

// EndpointLogPage returns a page of q.Endpoint's delivery log in schema s, newest first.
func EndpointLogPage(ctx context.Context, db DB, s string, q LogPageQuery) ([]DeliveryRecord, error) {
	c := q.Cursor
	if c.At.IsZero() {
		c = LogCursor{At: q.Until, EventID: maxUUID, Attempt: 1<<31 - 1, Delivered: true}
	}
	rows, err := db.Query(ctx, schema.SQL(s, logPageSQL), q.Endpoint, q.Since, q.Until, c.At, c.EventID, c.Attempt, c.Delivered,
		q.Limit, q.Failed, q.Delivered, c.At.Add(DeliveryRowSpan))
	if err != nil {
		return nil, fmt.Errorf("read the delivery log of endpoint %s: %w", q.Endpoint, err)
	}
	defer rows.Close()
	var out []DeliveryRecord
	for rows.Next() {
		r := DeliveryRecord{Endpoint: q.Endpoint}
		if err := rows.Scan(&r.Pipeline, &r.EventID, &r.Attempt, &r.At, &r.Status, &r.LatencyMS, &r.Error, &r.Delivered); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ExplainEndpointLogPage returns the plan PostgreSQL executes for q (EXPLAIN ANALYZE, one line
// per node), for the benchmark and the test that show a page is read through the indexes.
func ExplainEndpointLogPage(ctx context.Context, db DB, s string, q LogPageQuery) (string, error) {
	c := q.Cursor
	if c.At.IsZero() {
		c = LogCursor{At: q.Until, EventID: maxUUID, Attempt: 1<<31 - 1, Delivered: true}
	}
	rows, err := db.Query(ctx, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+schema.SQL(s, logPageSQL), q.Endpoint, q.Since,
		q.Until, c.At, c.EventID, c.Attempt, c.Delivered, q.Limit, q.Failed, q.Delivered, c.At.Add(DeliveryRowSpan))
	if err != nil {
		return "", err
	}
	var lines []string
	var line string
	if _, err := pgx.ForEachRow(rows, []any{&line}, func() error { lines = append(lines, line); return nil }); err != nil {
		return "", err
	}
	return strings.Join(lines, "\n"), nil
}
