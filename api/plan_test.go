package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// A page of an endpoint's deliveries reads both log tables through their (pipeline,
// endpoint_id, time) indexes, not by scanning them: with 60,000 entries of 20 endpoints, the
// plan of a page deep in the log has no sequential scan of either table.
func TestDeliveriesPageReadsTheIndexes(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, q := range []string{
		`INSERT INTO outbox_delivery_attempts (pipeline, endpoint_id, event_id, attempt, at, status_code, latency_ms, error)
		 SELECT 'default', 'ep' || (g % 20), gen_random_uuid(), 1, now() - g * interval '10 ms', 500, 5, 'HTTP 500'
		 FROM generate_series(1, 20000) g`,
		`INSERT INTO outbox_deliveries (pipeline, endpoint_id, first_at, last_at, event_ids, delivered_at, attempts, latency_ms)
		 SELECT 'default', 'ep' || (g % 20), now() - (g * 100 + 99) * interval '10 ms', now() - g * 100 * interval '10 ms',
		        array(SELECT gen_random_uuid() FROM generate_series(1, 100)),
		        array(SELECT now() - (g * 100 + i) * interval '10 ms' FROM generate_series(0, 99) i),
		        array_fill(1, ARRAY[100]), array_fill(3, ARRAY[100])
		 FROM generate_series(1, 400) g`,
		`ANALYZE outbox_delivery_attempts`, `ANALYZE outbox_deliveries`,
	} {
		if _, err := e.pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	q := state.LogPageQuery{Endpoint: "ep7", Until: time.Now().Add(-30 * time.Second), Limit: 100}
	plan, err := state.ExplainEndpointLogPage(ctx, e.pool, "", q)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"outbox_delivery_attempts", "outbox_deliveries"} {
		if strings.Contains(plan, "Seq Scan on "+table) {
			t.Errorf("the page scans %s:\n%s", table, plan)
		}
		if !strings.Contains(plan, "using "+table+"_endpoint") && !strings.Contains(plan, "Index Scan on "+table+"_endpoint") {
			t.Errorf("the page does not read %s through its endpoint index:\n%s", table, plan)
		}
	}
	recs, err := state.EndpointLogPage(ctx, e.pool, "", q)
	if err != nil || len(recs) != 100 {
		t.Fatalf("the page: %d entries, %v; want 100 (the plan's query answers)", len(recs), err)
	}
}
