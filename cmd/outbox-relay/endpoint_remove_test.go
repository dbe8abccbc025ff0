package main

import (
	"context"
	"strings"
	"testing"
)

// An endpoint that still holds events (its backlog, its lanes' dead letters and parked
// aggregates, over every pipeline) is not removed without --force, and the refusal counts them;
// with --force the row goes, and so does what it held, in every pipeline, and nothing of
// another endpoint's.
func TestEndpointRemoveCountsWhatItDropsAndWantsForce(t *testing.T) {
	dsn, pool := migratedDB(t)
	for _, id := range []string{"acme", "globex"} {
		var e endpointJSON
		endpointOut(t, dsn, nil, &e, "add", "--id", id, "--url", "https://"+id+".example/webhooks")
	}
	mustExec(t, pool, `INSERT INTO outbox_endpoint_versions (pipeline, endpoint_id, lsn) VALUES ('default', '', '0/0'), ('partners', '', '0/0')`)
	mustExec(t, pool, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status)
		SELECT 'order', g::text, 'order.created', '{}', 'done' FROM generate_series(1, 8) g`)
	// acme: 3 events in its backlog in default and 1 in partners, a dead letter (and the event
	// parked behind it) in default, a parked aggregate in partners; globex: 2 in its backlog.
	mustExec(t, pool, `INSERT INTO outbox_endpoint_backlog (pipeline, endpoint_id, lsn, idx, event_id)
		SELECT CASE WHEN aggregate_id::int <= 3 THEN 'default' WHEN aggregate_id = '4' THEN 'partners' ELSE 'default' END,
		       CASE WHEN aggregate_id::int <= 4 THEN 'acme' ELSE 'globex' END, '0/10'::pg_lsn + aggregate_id::int, 0, id
		FROM outbox_events WHERE aggregate_id::int <= 6`)
	mustExec(t, pool, `INSERT INTO outbox_pipeline_events (pipeline, event_id, status)
		SELECT 'default/acme', id, CASE aggregate_id WHEN '7' THEN 'failed' ELSE 'parked' END FROM outbox_events WHERE aggregate_id IN ('7', '8')`)
	mustExec(t, pool, `INSERT INTO outbox_parked_aggregates (pipeline, aggregate_type, aggregate_id, first_event_id, reason, own_state)
		SELECT 'partners/acme', 'order', '1', id, 'HTTP 500', true FROM outbox_events WHERE aggregate_id = '1'`)
	holds := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM outbox_endpoint_backlog WHERE endpoint_id = 'acme') || ',' ||
			(SELECT count(*) FROM outbox_endpoint_backlog WHERE endpoint_id = 'globex') || ',' ||
			(SELECT count(*) FROM outbox_pipeline_events) || ',' || (SELECT count(*) FROM outbox_parked_aggregates) || ',' ||
			(SELECT count(*) FROM outbox_endpoints)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	_, errOut, code := endpointCLI(t, dsn, nil, "remove", "acme")
	want := "endpoint acme has 4 events in its backlog, 1 dead letters and 1 parked aggregates; " +
		"`outbox-relay endpoint remove acme --force` drops them (replay or enable first to deliver them)"
	if code != 1 || !strings.Contains(errOut, want) {
		t.Fatalf("remove without --force: exit %d, %q; want exit 1 saying %q", code, errOut, want)
	}
	if got := holds(); got != "4,2,2,1,2" {
		t.Fatalf("after the refusal backlog acme, globex, dead letters and parked events, parked aggregates, endpoints: %s, want 4,2,2,1,2", got)
	}
	var removed struct {
		Removed bool
		Dropped map[string]int64
	}
	endpointOut(t, dsn, nil, &removed, "remove", "acme", "--force")
	if !removed.Removed || removed.Dropped["backlog"] != 4 || removed.Dropped["dead_letters"] != 1 || removed.Dropped["parked"] != 1 {
		t.Fatalf("remove --force: %+v", removed)
	}
	if got := holds(); got != "0,2,0,0,1" {
		t.Fatalf("after remove --force backlog acme, globex, dead letters and parked events, parked aggregates, endpoints: %s, want 0,2,0,0,1", got)
	}
	if _, errOut, code := endpointCLI(t, dsn, nil, "remove", "globex"); code != 1 || !strings.Contains(errOut, "endpoint globex has 2 events in its backlog, 0 dead letters and 0 parked aggregates") {
		t.Fatalf("remove globex: exit %d, %q", code, errOut)
	}
}
