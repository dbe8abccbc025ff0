package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The operator console's list of every endpoint (package portal): each endpoint with what its
// lanes last reported (outbox_endpoint_status, summed over pipelines), sorted by a key the
// operator chooses and read a page at a time by keyset, so a page of 5,000 endpoints reads one
// page of rows whatever the page's place.

// OverviewSort is the order of an overview.
type OverviewSort string

// The orders: by id; by state, disabled first, then paused, then enabled; by undelivered events,
// most first; by the age of the oldest undelivered event, oldest first (endpoints with none
// last).
const (
	SortID          OverviewSort = "id"
	SortState       OverviewSort = "state"
	SortUndelivered OverviewSort = "undelivered"
	SortOldest      OverviewSort = "oldest"
)

// overviewKeys is each order's key: a number, ascending, ties broken by id.
var overviewKeys = map[OverviewSort]string{
	SortID:          `0::float8`,
	SortState:       `CASE e.state WHEN 'disabled' THEN 0 WHEN 'paused' THEN 1 ELSE 2 END::float8`,
	SortUndelivered: `(-coalesce(st.undelivered, 0))::float8`,
	SortOldest:      `coalesce(extract(epoch FROM st.oldest), 'infinity')::float8`,
}

// OverviewCursor is where a page of the overview ends: its last row's key and id.
type OverviewCursor struct {
	Key float64
	ID  string
}

// OverviewQuery selects a page: of one tenant and one state when those are set, after Cursor
// (zero: from the first), at most Limit rows.
type OverviewQuery struct {
	Sort     OverviewSort
	TenantID string
	State    string
	Cursor   *OverviewCursor
	Limit    int
}

// OverviewRow is one endpoint of the overview.
type OverviewRow struct {
	ID, TenantID, URL, State, Reason string
	Undelivered                      int64
	OldestUndelivered                *time.Time
	FailuresInRow                    int
	FailingSince                     *time.Time
	LastError                        string
	Key                              float64
}

// EndpointOverview returns the page q selects in schema s. An unknown Sort is SortID.
func EndpointOverview(ctx context.Context, db DB, s string, q OverviewQuery) ([]OverviewRow, error) {
	key, ok := overviewKeys[q.Sort]
	if !ok {
		key = overviewKeys[SortID]
	}
	after := q.Cursor
	if after == nil {
		after = &OverviewCursor{Key: -1e308, ID: ""}
	}
	query := `SELECT * FROM (
		SELECT e.id, coalesce(e.tenant_id, ''), e.url, e.state::text,
			coalesce(CASE e.state WHEN 'paused' THEN e.paused_reason WHEN 'disabled' THEN e.disabled_reason END, ''),
			coalesce(st.undelivered, 0), st.oldest, coalesce(st.failures, 0), st.failing, coalesce(st.err, ''),
			` + key + ` AS k
		FROM {outbox_endpoints} e LEFT JOIN (
			SELECT endpoint_id, sum(undelivered) AS undelivered, min(oldest_undelivered_at) AS oldest,
				max(failures_in_row) AS failures, min(failing_since) AS failing,
				(array_agg(last_error ORDER BY last_error_at DESC NULLS LAST))[1] AS err
			FROM {outbox_endpoint_status} GROUP BY endpoint_id) st ON st.endpoint_id = e.id
		WHERE ($1 = '' OR e.tenant_id = $1) AND ($2 = '' OR e.state::text = $2)) x
	WHERE (k, id) > ($3, $4)
	ORDER BY k, id LIMIT $5`
	rows, err := db.Query(ctx, schema.SQL(s, query), q.TenantID, q.State, after.Key, after.ID, q.Limit)
	if err != nil {
		return nil, fmt.Errorf("read the endpoints' overview: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (OverviewRow, error) {
		var o OverviewRow
		err := r.Scan(&o.ID, &o.TenantID, &o.URL, &o.State, &o.Reason, &o.Undelivered, &o.OldestUndelivered, &o.FailuresInRow,
			&o.FailingSince, &o.LastError, &o.Key)
		return o, err
	})
}
