package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// settleLimit bounds the wait for outbox_events to settle after the drain: the relays mark
// rows at their status interval (1s), so a few seconds are plenty.
const settleLimit = 30 * time.Second

// pendingRow is a row of outbox_events left pending.
type pendingRow struct {
	ID, What string
	Created  time.Time
}

// waitSettled waits, in an endpoints run once every required pair is delivered, until no row
// of outbox_events is left `pending` (issue 38: remove, disable, a 410 and a replay leave no
// row pending that no endpoint owes; the run has resumed and enabled every endpoint, so none
// owes anything any more). It returns the rows still pending at the limit, a few of them
// described.
func (t *harness) waitSettled(ctx context.Context) (int, []pendingRow) {
	deadline := time.Now().Add(settleLimit)
	for {
		n, some, err := pendingRows(ctx, t.outDSN)
		if err == nil && n == 0 {
			t.logf("outbox_events settled: no row pending")
			return 0, nil
		}
		if time.Now().After(deadline) || !sleep(ctx, sampleTick) {
			if err != nil {
				return -1, []pendingRow{{What: fmt.Sprintf("could not read outbox_events: %v", err)}}
			}
			t.logf("outbox_events: %d rows still pending %s after the drain", n, settleLimit)
			return n, some
		}
	}
}

// pendingRows counts the pending rows of outbox_events and describes the oldest few.
func pendingRows(ctx context.Context, dsn string) (int, []pendingRow, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, nil, err
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE status = 'pending'`).Scan(&n); err != nil {
		return 0, nil, err
	}
	rows, err := conn.Query(ctx, `SELECT id::text, aggregate_type || '/' || aggregate_id, event_type, coalesce(tenant_id, ''),
		created_at FROM outbox_events WHERE status = 'pending' ORDER BY created_at, id LIMIT 20`)
	if err != nil {
		return 0, nil, err
	}
	var some []pendingRow
	for rows.Next() {
		var id, agg, typ, tenant string
		var at time.Time
		if err := rows.Scan(&id, &agg, &typ, &tenant, &at); err != nil {
			return 0, nil, err
		}
		some = append(some, pendingRow{ID: id, Created: at,
			What: fmt.Sprintf("%s (%s, %s, tenant %q, created %s) pending", id, agg, typ, tenant, at.Format(stamp))})
	}
	return n, some, rows.Err()
}
