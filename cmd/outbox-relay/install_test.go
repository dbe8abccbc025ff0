package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// The install scenarios of "my application's existing database" (docs/guides/existing-database.md), through the
// real command line: migrate, run (a child process), status, replay, pause, resume, prune.

// installDB is a fresh database, the pool of a producer on it, and a slot name of its own
// (slots are per cluster).
type installDB struct {
	dsn  string
	pool *pgxpool.Pool
	slot string
}

func newInstallDB(t *testing.T, setup string) *installDB {
	t.Helper()
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if setup != "" {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, setup); err != nil {
			t.Fatalf("%s: %v", setup, err)
		}
		conn.Close(ctx)
	}
	pool, err := relaytest.Pool(ctx, dsn) // after setup: role settings apply to new sessions
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &installDB{dsn: dsn, pool: pool, slot: fmt.Sprintf("install_%d", rand.Uint32())}
}

// searchPathApp makes the database's sessions (of the test's role) start with search_path app,
// as an application's role often does.
const searchPathApp = `CREATE SCHEMA app;
	DO $$ BEGIN EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = app', current_user, current_database()); END $$`

// runRelay starts `outbox-relay run` against recv in a child process, on db's slot, and waits
// until it streams; the test's end stops it with SIGTERM and expects exit 0.
func (db *installDB) runRelay(t *testing.T, recv *relaytest.Receiver, env []string, args ...string) {
	t.Helper()
	env = append([]string{"DB_DSN=" + db.dsn, "WEBHOOK_URL=" + recv.URL, "WEBHOOK_SECRET=s3cret"}, env...)
	p, lines := startCLI(t, env, append([]string{"run", "--slot", db.slot, "--publication", db.slot,
		"--metrics-addr", "", "--log-format", "json"}, args...)...)
	t.Cleanup(func() {
		if code := p.stop(t, syscall.SIGTERM); code != 0 {
			t.Errorf("run exited %d:\n%s", code, p.stderr.String())
		}
	})
	waitLine(t, lines, `"message":"streaming"`)
}

// status runs `status --json` with args and returns its document and exit code.
func (db *installDB) status(t *testing.T, args ...string) (installStatus, int, string) {
	t.Helper()
	stdout, stderr, code := cli(t, append([]string{"status", "--dsn", db.dsn, "--slot", db.slot, "--json"}, args...)...)
	var doc installStatus
	if stdout != "" {
		if err := json.Unmarshal([]byte(stdout), &doc); err != nil {
			t.Fatalf("status --json: %v\n%s", err, stdout)
		}
	}
	return doc, code, stderr
}

type installStatus struct {
	Healthy          bool             `json:"healthy"`
	Reason           string           `json:"reason"`
	Schema           string           `json:"schema"`
	Rows             map[string]int64 `json:"rows"`
	ParkedAggregates int              `json:"parked_aggregates"`
}

// waitDone waits until status, with args, reports n rows done and none pending, healthy.
func (db *installDB) waitDone(t *testing.T, n int64, args ...string) installStatus {
	t.Helper()
	var doc installStatus
	relaytest.WaitFor(t, time.Minute, fmt.Sprintf("status: %d rows done", n), func() bool {
		var code int
		doc, code, _ = db.status(t, args...)
		return code == 0 && doc.Healthy && doc.Rows["done"] == n && doc.Rows["pending"] == 0
	})
	return doc
}

func waitDelivered(t *testing.T, recv *relaytest.Receiver, res relaytest.Result) {
	t.Helper()
	var rep relaytest.Report
	relaytest.WaitFor(t, time.Minute, "every event delivered", func() bool {
		rep = relaytest.Check(res, recv.Deliveries())
		return len(rep.Lost) == 0
	})
	if !rep.OK() {
		t.Fatalf("delivery broken: %s", rep)
	}
}

func mustCLI(t *testing.T, args ...string) string {
	t.Helper()
	stdout, stderr, code := cli(t, args...)
	if code != 0 {
		t.Fatalf("outbox-relay %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	return stdout
}

func tablesIn(t *testing.T, pool *pgxpool.Pool, s string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, s).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The application's role has search_path = app: migrate puts everything into app (its
// current_schema()), and run, status and the producer's plain outbox.Enqueue all find it there,
// with no flag at all.
func TestInstallWithTheRolesSearchPath(t *testing.T) {
	db := newInstallDB(t, searchPathApp)
	mustCLI(t, "migrate", "--dsn", db.dsn)
	if n := tablesIn(t, db.pool, "public"); n != 0 || tablesIn(t, db.pool, "app") == 0 {
		t.Fatalf("%d tables in public after migrate; want all of them in app", n)
	}
	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	db.runRelay(t, recv, nil)
	res, err := relaytest.Produce(context.Background(), db.pool, relaytest.Workload{Events: 60, Aggregates: 6, MaxTxSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, recv, res)
	if doc := db.waitDone(t, 60); doc.Schema != "app" {
		t.Fatalf("status read schema %q, want app", doc.Schema)
	}
}

// The tables in app by --schema while the search_path is public, where a decoy outbox_events
// (another application's, of the same shape) is in the relay's publication: the relay delivers
// app's rows only, and every command given the schema (flag or OUTBOX_RELAY_SCHEMA) works on
// app; a command not given it is refused with the fix.
func TestInstallWithSchemaFlagBesideADecoy(t *testing.T) {
	db := newInstallDB(t, "")
	ctx := context.Background()
	mustCLI(t, "migrate", "--dsn", db.dsn, "--schema", "app")
	if n := tablesIn(t, db.pool, "public"); n != 0 {
		t.Fatalf("%d tables in public after migrate --schema app", n)
	}
	mustExec(t, db.pool, `CREATE TABLE public.outbox_events (LIKE app.outbox_events INCLUDING ALL)`)
	if _, stderr, code := cli(t, "status", "--dsn", db.dsn, "--slot", db.slot); code != 1 || !strings.Contains(stderr, "pass --schema app") {
		t.Fatalf("status without the schema: exit %d, %q; want 1 naming --schema app", code, stderr)
	}

	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	db.runRelay(t, recv, []string{"OUTBOX_RELAY_SCHEMA=app"})
	var published []string
	if err := db.pool.QueryRow(ctx, `SELECT array_agg(prrelid::regclass::text) FROM pg_publication_rel r
		JOIN pg_publication p ON p.oid = r.prpubid WHERE p.pubname = $1`, db.slot).Scan(&published); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(published, []string{"app.outbox_events"}) {
		t.Fatalf("the publication carries %v, want app.outbox_events", published)
	}
	mustExec(t, db.pool, `ALTER PUBLICATION `+pgx.Identifier{db.slot}.Sanitize()+` ADD TABLE public.outbox_events`)
	var decoys []string
	for i := 0; i < 3; i++ {
		var id string
		if err := db.pool.QueryRow(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', 'decoy', 'order.changed', '{"seq": 1}') RETURNING id::text`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		decoys = append(decoys, id)
	}
	// The positive control: app's rows, committed after the decoys, arrive.
	res, err := relaytest.Produce(ctx, db.pool, relaytest.Workload{Events: 60, Aggregates: 6, MaxTxSize: 4, Schema: "app"})
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, recv, res)
	for _, d := range recv.Deliveries() {
		if slices.Contains(decoys, d.ID) {
			t.Fatalf("row %s of public.outbox_events was delivered", d.ID)
		}
	}
	if doc := db.waitDone(t, 60, "--schema", "app"); doc.Schema != "app" {
		t.Fatalf("status read schema %q", doc.Schema)
	}
	mustCLI(t, "pause", "--dsn", db.dsn, "--schema", "app", "--reason", "test")
	mustCLI(t, "resume", "--dsn", db.dsn, "--schema", "app")
	var controls int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM app.outbox_pipeline_control`).Scan(&controls); err != nil || controls != 1 {
		t.Fatalf("app.outbox_pipeline_control has %d rows (%v), want the pause's", controls, err)
	}
	if out := mustCLI(t, "prune", "--dsn", db.dsn, "--schema", "app", "--older-than", "1h", "--dry-run"); !strings.Contains(out, "would delete 0") {
		t.Fatalf("prune --dry-run: %s", out)
	}
	if out := mustCLI(t, "replay", "--dsn", db.dsn, "--schema", "app", "--all", "--dry-run"); !strings.Contains(out, "nothing to replay") {
		t.Fatalf("replay --dry-run: %s", out)
	}
	if _, stderr, code := cli(t, "pause", "--dsn", db.dsn, "--schema", "nope"); code != 1 ||
		!strings.Contains(stderr, "run `outbox-relay migrate --schema nope`") {
		t.Fatalf("pause --schema nope: exit %d, %q", code, stderr)
	}
}

// A schema installed by running the files' Up sections (psql -f, Flyway, Atlas) has no version
// history: run accepts it because it is complete, and creates no version table of its own.
func TestRunOnASchemaInstalledFromTheFiles(t *testing.T) {
	db := newInstallDB(t, "")
	if err := relaytest.ApplyUpSections(context.Background(), db.dsn, migrations.Latest()); err != nil {
		t.Fatal(err)
	}
	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	db.runRelay(t, recv, nil)
	res, err := relaytest.Produce(context.Background(), db.pool, relaytest.Workload{Events: 30, Aggregates: 3, MaxTxSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	waitDelivered(t, recv, res)
	db.waitDone(t, 30)
	var own bool
	if err := db.pool.QueryRow(context.Background(), `SELECT to_regclass('outbox_relay_schema') IS NOT NULL`).Scan(&own); err != nil || own {
		t.Fatalf("run created outbox_relay_schema (%v, %v): a check must leave no trace", own, err)
	}
}

// A database of the last release (its versions 1 to 10 in goose_db_version, beside the
// application's) with rows it left: one delivered, one pending, an aggregate dead-lettered and
// parked. A plain migrate moves the relay's history (the application's rows stay as they
// were) and re-runs nothing; then run delivers the pending row (backfill) and new ones, status
// is healthy, and replay re-sends the parked aggregate in order.
func TestUpgradeInPlaceFromTheLastRelease(t *testing.T) {
	db := newInstallDB(t, "")
	ctx := context.Background()
	if err := relaytest.LegacyMigrate(ctx, db.dsn); err != nil {
		t.Fatal(err)
	}
	app := fstest.MapFS{"20240215090000_orders.sql": {Data: []byte("-- +goose Up\nCREATE TABLE orders (id bigserial PRIMARY KEY);\n" +
		"-- +goose Down\nDROP TABLE orders;\n")}}
	if err := relaytest.GooseUp(ctx, db.dsn, app); err != nil {
		t.Fatal(err)
	}
	appRows := func() []string {
		rows, err := db.pool.Query(ctx, `SELECT t::text FROM goose_db_version t WHERE version_id = 0 OR version_id > 10 ORDER BY id`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	before := appRows()
	mustExec(t, db.pool, `
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, processed_at)
			VALUES ('order', 'old', 'order.changed', '{"seq": 1}', 'done', now());
		INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
			VALUES ('order', 'pending', 'order.changed', '{"seq": 1}');
		INSERT INTO outbox_events (id, aggregate_type, aggregate_id, event_type, payload, status, retries, last_error, event_sequence)
			VALUES ('0190d3a0-0000-7000-8000-000000000001', 'order', '7', 'order.changed', '{"seq": 1}', 'failed', 2, 'HTTP 502',
			        '0000000001000000-00000000'),
			       ('0190d3a0-0000-7000-8000-000000000002', 'order', '7', 'order.changed', '{"seq": 2}', 'parked', 0, NULL,
			        '0000000002000000-00000000');
		INSERT INTO outbox_parked_aggregates (aggregate_type, aggregate_id, first_event_id, reason)
			VALUES ('order', '7', '0190d3a0-0000-7000-8000-000000000001', 'HTTP 502')`)
	var pendingID string
	if err := db.pool.QueryRow(ctx, `SELECT id::text FROM outbox_events WHERE aggregate_id = 'pending'`).Scan(&pendingID); err != nil {
		t.Fatal(err)
	}

	out := mustCLI(t, "migrate", "--dsn", db.dsn)
	t.Log(out)
	if !strings.Contains(out, `moved the relay's versions 1-10 from "public"."goose_db_version" to "public"."outbox_relay_schema"`) ||
		!strings.Contains(out, "the other rows of") {
		t.Fatalf("migrate said %q; want the move named", out)
	}
	for v := int64(1); v <= schema.LegacyLatest; v++ {
		if strings.Contains(out, fmt.Sprintf("applied %05d %s", v, migrations.Source(v))) {
			t.Fatalf("migration %d ran again: %s", v, out)
		}
	}
	if after := appRows(); !slices.Equal(after, before) {
		t.Fatalf("the application's goose_db_version rows changed:\n before %q\n after  %q", before, after)
	}
	var relayRows int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id BETWEEN 1 AND 10`).Scan(&relayRows); err != nil || relayRows != 0 {
		t.Fatalf("%d relay rows left in goose_db_version (%v)", relayRows, err)
	}

	recv := relaytest.NewReceiver("s3cret")
	t.Cleanup(recv.Close)
	db.runRelay(t, recv, nil, "--max-attempts", "2")
	res, err := relaytest.Produce(ctx, db.pool, relaytest.Workload{Events: 30, Aggregates: 3, MaxTxSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	res.Committed = append(res.Committed, relaytest.Committed{ID: pendingID, Aggregate: "order/pending", Seq: 1})
	waitDelivered(t, recv, res)
	if doc, _, _ := db.status(t); doc.ParkedAggregates != 1 {
		t.Fatalf("status after the upgrade: %+v; want the parked aggregate kept", doc)
	}
	mustCLI(t, "replay", "--dsn", db.dsn, "--all")
	relaytest.WaitFor(t, time.Minute, "the parked aggregate re-sent", func() bool { return recv.Has("0190d3a0-0000-7000-8000-000000000002") })
	var seqs []int
	for _, d := range recv.Deliveries() {
		if d.Aggregate == "order/7" {
			seqs = append(seqs, d.Seq)
		}
	}
	if !slices.Equal(seqs, []int{1, 2}) {
		t.Fatalf("order/7 delivered as %v, want 1 then 2", seqs)
	}
	if doc := db.waitDone(t, 30+1+1+2); doc.ParkedAggregates != 0 {
		t.Fatalf("after the replay: %+v", doc)
	}
}
