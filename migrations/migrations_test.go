package migrations_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, pgtest.Options{})) }

func TestUpIsIdempotent(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	first, err := migrations.Up(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) == 0 {
		t.Fatal("first Up applied nothing")
	}
	second, err := migrations.Up(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if len(second) != 0 {
		t.Fatalf("second Up applied %d migrations, want 0", len(second))
	}
	v, err := migrations.Version(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	if v != first[len(first)-1].Version {
		t.Fatalf("recorded version %d, want %d", v, first[len(first)-1].Version)
	}
}

func TestConcurrentUpAppliesEachVersionOnce(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	const n = 4
	var wg sync.WaitGroup
	applied := make([]int, n)
	errs := make([]error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := migrations.Up(ctx, dsn)
			applied[i], errs[i] = len(r), err
		}(i)
	}
	wg.Wait()
	total := 0
	for i := range errs {
		if errs[i] != nil {
			t.Fatalf("process %d: %v", i, errs[i])
		}
		total += applied[i]
	}
	conn := connect(t, dsn)
	var versions int
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT version_id) FROM outbox_relay_schema WHERE version_id > 0").Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if total != versions {
		t.Fatalf("%d migrations applied across processes, %d versions recorded", total, versions)
	}
}

func TestSchemaHasTheDesignColumns(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	want := map[string][]string{
		"outbox_events": {
			"id uuid NO gen_random_uuid()", "aggregate_type text NO ", "aggregate_id text NO ",
			"event_type text NO ", "payload jsonb NO ", "dedup_key text YES ",
			"status text NO 'pending'::text", "retries integer NO 0",
			"available_at timestamp with time zone NO now()", "created_at timestamp with time zone NO now()",
			"processed_at timestamp with time zone YES ",
		},
		"inbox_events": {
			"id uuid NO ", "received_at timestamp with time zone NO now()",
			"processed_at timestamp with time zone YES ", "handler_status text NO ",
			"payload jsonb NO ", "signature text YES ",
		},
	}
	for table, cols := range want {
		got := map[string]bool{}
		rows, err := conn.Query(ctx, `
			SELECT column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '')
			FROM information_schema.columns WHERE table_name = $1`, table)
		if err != nil {
			t.Fatal(err)
		}
		list, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range list {
			got[c] = true
		}
		for _, c := range cols {
			if !got[c] {
				t.Errorf("%s: missing column %q; have %v", table, c, list)
			}
		}
	}
	for _, idx := range []string{"uq_outbox_dedup_key", "idx_outbox_status_available", "idx_inbox_handler_status"} {
		var def string
		if err := conn.QueryRow(ctx, "SELECT indexdef FROM pg_indexes WHERE indexname = $1", idx).Scan(&def); err != nil {
			t.Errorf("index %s: %v", idx, err)
		}
	}
}

// The seed's plain-SQL producer must keep working unchanged.
func TestCTEProducer(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id bigserial PRIMARY KEY, customer text, total numeric)`); err != nil {
		t.Fatal(err)
	}
	_, err := conn.Exec(ctx, `
		with new_order as (insert into orders(customer, total) values ('ada', 42.50) returning id, customer, total)
		insert into outbox_events(aggregate_type, aggregate_id, event_type, payload, dedup_key)
		select 'order', id::text, 'order.created', jsonb_build_object('id', id, 'customer', customer, 'total', total), 'order.created:' || id::text
		from new_order`)
	if err != nil {
		t.Fatal(err)
	}
	var aggID, status string
	var retries int
	if err := conn.QueryRow(ctx, `SELECT aggregate_id, status, retries FROM outbox_events`).Scan(&aggID, &status, &retries); err != nil {
		t.Fatal(err)
	}
	if aggID != "1" || status != "pending" || retries != 0 {
		t.Fatalf("got aggregate_id=%s status=%s retries=%d", aggID, status, retries)
	}
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Migrating a database that already has another application's outbox_events names the conflict
// and the way out, and changes nothing; once the table is out of the way, migrate works.
func TestUpRefusesAForeignOutboxTable(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox_events (id bigserial PRIMARY KEY, topic text NOT NULL, body jsonb)`); err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Up(ctx, dsn)
	t.Log(err)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), `ALTER TABLE "public"."outbox_events" RENAME`) {
		t.Fatalf("Up over a foreign outbox_events: %v; want ErrConflict naming the way out", err)
	}
	var goose, topic bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('outbox_relay_schema') IS NOT NULL OR to_regclass('goose_db_version') IS NOT NULL,
		EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = 'outbox_events' AND column_name = 'topic')`).Scan(&goose, &topic); err != nil {
		t.Fatal(err)
	}
	if goose || !topic {
		t.Fatalf("refused migrate changed the database: a version table %v, foreign table intact %v", goose, topic)
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE outbox_events RENAME TO outbox_events_old`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatalf("migrate after renaming the foreign table: %v", err)
	}
}

// backToVersion10 undoes migrations 19 (the endpoints' outages), 18 (the portal's sessions), 17 (the API), 16 (the event-type catalog and egress), 15 (endpoint
// isolation), 14 (the endpoint stream), 13 (endpoints), 12 (slot location) and 11 (the
// concurrently built indexes) of a database migrated to 19: what it looks
// like before migration 11, so that the next Up builds 11's indexes. A later migration must be
// undone here first.
func backToVersion10(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if latest := migrations.Latest(); latest != 19 {
		t.Fatalf("backToVersion10 undoes migrations 19 to 11; undo %d..20 first", latest)
	}
	for _, q := range []string{`DROP TABLE outbox_endpoint_outages`, `DELETE FROM outbox_relay_schema WHERE version_id = 19`,
		`DROP TABLE outbox_portal_sessions`, `DELETE FROM outbox_relay_schema WHERE version_id = 18`,
		`DROP TABLE outbox_api_audit`, `DROP TABLE outbox_api_idempotency`,
		`ALTER TABLE outbox_replays DROP COLUMN event_id`, `ALTER TABLE outbox_endpoints DROP COLUMN description`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 17`,
		`DROP TABLE outbox_event_types`, `DELETE FROM outbox_relay_schema WHERE version_id = 16`,
		`DROP TABLE outbox_deliveries`, `DROP TABLE outbox_delivery_attempts`,
		`DROP TABLE outbox_endpoint_backlog`, `DROP INDEX outbox_pipeline_events_event`, `DROP INDEX outbox_replays_open`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 15`,
		`DROP TABLE outbox_endpoint_status`, `DROP TABLE outbox_endpoint_versions`,
		`DROP TABLE outbox_endpoints`, `DROP FUNCTION outbox_endpoints_emit()`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 14`,
		`ALTER TABLE outbox_events DROP COLUMN tenant_id`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 13`,
		`DROP TABLE outbox_slot_location`, `ALTER TABLE outbox_reshard DROP COLUMN fence_reached_at`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 12`,
		`DROP INDEX outbox_events_replay_order`, `DROP INDEX outbox_backfill_event`,
		`DELETE FROM outbox_relay_schema WHERE version_id = 11`} {
		if _, err := conn.Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// replayIndexValid reports whether outbox_events_replay_order exists and whether it is valid.
func replayIndexValid(t *testing.T, conn *pgx.Conn) (exists, valid bool) {
	t.Helper()
	err := conn.QueryRow(context.Background(), `SELECT count(*) > 0, coalesce(bool_and(i.indisvalid), false)
		FROM pg_index i WHERE i.indexrelid = to_regclass('outbox_events_replay_order')`).Scan(&exists, &valid)
	if err != nil {
		t.Fatal(err)
	}
	return exists, valid
}

// Migration 11 builds its indexes concurrently, so a writer holding the table makes it wait;
// interrupted there, it leaves an invalid index behind and records no version. The next
// migrate builds a valid index (it does not take the invalid one for done) and records the
// version; and the index is used (TestSincePageWalksTheIndexOnce in publisher).
func TestInterruptedIndexBuildIsBuiltAgain(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	backToVersion10(t, conn)
	writer := connect(t, dsn)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.created', '{}')`); err != nil {
		t.Fatal(err)
	}
	upCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := migrations.Up(upCtx, dsn); done <- err }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var phase string
		_ = conn.QueryRow(ctx, `SELECT coalesce(max(phase), '') FROM pg_stat_progress_create_index`).Scan(&phase)
		if strings.HasPrefix(phase, "waiting for writers") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the index build did not wait for the writer (phase %q)", phase)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the interrupted migrate succeeded")
	}
	if exists, valid := replayIndexValid(t, conn); !exists || valid {
		t.Fatalf("after the interruption: index exists %v, valid %v; want an invalid index left behind", exists, valid)
	}
	if h, err := migrations.ReadHistory(ctx, conn, "public"); err != nil || h.Version != 10 {
		t.Fatalf("after the interruption the recorded version is %d (%v), want 10", h.Version, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatalf("migrate after an interrupted index build: %v", err)
	}
	if exists, valid := replayIndexValid(t, conn); !exists || !valid {
		t.Fatalf("after migrating again: index exists %v, valid %v; want a valid index", exists, valid)
	}
	if h, err := migrations.ReadHistory(ctx, conn, "public"); err != nil || h.Version != migrations.Latest() {
		t.Fatalf("recorded version %d (%v), want %d", h.Version, err, migrations.Latest())
	}
}

// Migration 14's trigger function lands in the migrated schema, nowhere else, and fires for a
// writer whose search_path does not hold that schema (it calls pg_catalog by qualified names).
func TestEndpointTriggerLivesInTheRelaysSchema(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: "app"}); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	rows, err := conn.Query(ctx, `SELECT n.nspname::text FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE p.proname = 'outbox_endpoints_emit'`)
	if err != nil {
		t.Fatal(err)
	}
	where, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if len(where) != 1 || where[0] != "app" {
		t.Fatalf("outbox_endpoints_emit() is in schemas %v, want [app]", where)
	}
	for _, q := range []string{`SET search_path TO public`,
		`INSERT INTO app.outbox_endpoints (id, url, secrets) VALUES ('ep_1', 'https://a.example/', '[{"secret": "0123456789abcdef0123"}]')`,
		`UPDATE app.outbox_endpoints SET id = 'ep_2'`, `DELETE FROM app.outbox_endpoints`, `TRUNCATE app.outbox_endpoints`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}
