package state_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Every read that re-sends rows from the table (a backfill page, an aggregate's replay, a
// replay --since page) carries the row's tenant, "" for NULL: an endpoint with a tenant routes
// a re-sent event as it routed the streamed one.
func TestTableReadsCarryTheTenant(t *testing.T) {
	dsn, pool := relaytest.MigratedDB(t)
	ctx := context.Background()
	since := time.Now().Add(-time.Hour)
	if _, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, tenant_id, event_sequence)
		VALUES ('00000000-0000-0000-0000-000000000001', 'order', '1', 'order.created', '{}', 'pending', 'acme', NULL),
		       ('00000000-0000-0000-0000-000000000002', 'order', '1', 'order.created', '{}', 'pending', NULL, NULL),
		       ('00000000-0000-0000-0000-000000000003', 'order', '2', 'order.created', '{}', 'failed', 'globex', '0000000000000100-00000000'),
		       ('00000000-0000-0000-0000-000000000004', 'order', '2', 'order.created', '{}', 'parked', NULL, '0000000000000200-00000000')`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := state.RecordBackfill(ctx, conn, "public", "s1", false, ""); err != nil {
		t.Fatal(err)
	}
	page, err := state.BackfillPage(ctx, pool, "public", "s1", 0, 10, false)
	if err != nil {
		t.Fatal(err)
	}
	var backfill []state.Event
	for _, e := range page {
		backfill = append(backfill, e.Event)
	}
	wantTenants(t, "backfill page", backfill, "acme", "")

	replayable, err := state.Replayable(ctx, pool, "public", "default", state.Aggregate{Type: "order", ID: "2"}, false)
	if err != nil {
		t.Fatal(err)
	}
	wantTenants(t, "replayable", replayable, "globex", "")

	replays, err := state.ReplayPage(ctx, pool, "public", state.ReplayRange{Since: since}, state.ReplayCursor{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	var replayed []state.Event
	for _, e := range replays {
		replayed = append(replayed, e.Event)
	}
	wantTenants(t, "replay --since page", replayed, "globex", "")
}

func wantTenants(t *testing.T, what string, evs []state.Event, want ...string) {
	t.Helper()
	var got []string
	for _, e := range evs {
		got = append(got, e.TenantID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: tenants %q, want %q", what, got, want)
	}
}
