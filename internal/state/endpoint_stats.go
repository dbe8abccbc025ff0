package state

import (
	"context"
	"fmt"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// What the API's GET /api/v1/endpoints/{id}/stats reads of one endpoint, over every pipeline:
// its lanes' reported status (outbox_endpoint_status), its backlog (outbox_endpoint_backlog),
// and its successes and failures since a time from the delivery log, each through an index that
// leads with (pipeline, endpoint_id).

// EndpointStats is one endpoint's figures, summed over the pipelines that deliver to it.
type EndpointStats struct {
	// Undelivered and OldestUndelivered are what its lanes last reported (the events they hold
	// undelivered, their backlog included, and the oldest one's commit time).
	Undelivered       int64
	OldestUndelivered time.Time
	// Backlog is how many events wait in its backlog table, off the WAL.
	Backlog     int64
	LastSuccess time.Time
	LastError   string
	LastErrorAt time.Time
	// FailuresInRow is the longest current run of failed attempts among its lanes.
	FailuresInRow int
	FailingSince  time.Time
	// Reported is when a lane last saved its status; zero: no relay has reported on it.
	Reported time.Time
	// Succeeded and Failed count the deliveries and failed attempts the log holds since the
	// time asked.
	Succeeded, Failed int64
}

const endpointStatsSQL = `WITH ` + logPipelines + `,
lanes AS (SELECT p FROM pipes UNION SELECT pipeline FROM {outbox_endpoint_status} WHERE endpoint_id = $1),
st AS (SELECT coalesce(sum(undelivered), 0) AS undelivered, min(oldest_undelivered_at) AS oldest,
		max(last_success_at) AS success, (array_agg(last_error ORDER BY last_error_at DESC NULLS LAST))[1] AS err,
		max(last_error_at) AS err_at, coalesce(max(failures_in_row), 0) AS failures, min(failing_since) AS failing,
		max(updated_at) AS reported
	FROM {outbox_endpoint_status} WHERE endpoint_id = $1)
SELECT st.undelivered, st.oldest, st.success, coalesce(st.err, ''), st.err_at, st.failures, st.failing, st.reported,
	(SELECT count(*) FROM lanes CROSS JOIN LATERAL (
		SELECT 1 FROM {outbox_endpoint_backlog} b WHERE b.pipeline = lanes.p AND b.endpoint_id = $1) x),
	(SELECT coalesce(sum(n), 0) FROM lanes CROSS JOIN LATERAL (
		SELECT (SELECT count(*) FROM unnest(d.delivered_at) t WHERE t >= $2) AS n
		FROM {outbox_deliveries} d WHERE d.pipeline = lanes.p AND d.endpoint_id = $1 AND d.last_at >= $2) x),
	(SELECT count(*) FROM lanes CROSS JOIN LATERAL (
		SELECT 1 FROM {outbox_delivery_attempts} a WHERE a.pipeline = lanes.p AND a.endpoint_id = $1 AND a.at >= $2) x)
FROM st`

// ReadEndpointStats returns endpoint id's figures in schema s, counting the log from since on.
func ReadEndpointStats(ctx context.Context, db DB, s, id string, since time.Time) (EndpointStats, error) {
	var st EndpointStats
	var oldest, success, errAt, failing, reported *time.Time
	err := db.QueryRow(ctx, schema.SQL(s, endpointStatsSQL), id, since).Scan(&st.Undelivered, &oldest, &success, &st.LastError,
		&errAt, &st.FailuresInRow, &failing, &reported, &st.Backlog, &st.Succeeded, &st.Failed)
	if err != nil {
		return st, fmt.Errorf("read the figures of endpoint %s: %w", id, err)
	}
	st.OldestUndelivered, st.LastSuccess, st.LastErrorAt = orZero(oldest), orZero(success), orZero(errAt)
	st.FailingSince, st.Reported = orZero(failing), orZero(reported)
	return st, nil
}
