package migrations_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

func openDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

func upInbox(t *testing.T, db *sql.DB, schema string) []int64 {
	t.Helper()
	res, err := migrations.UpInbox(context.Background(), db, schema)
	if err != nil {
		t.Fatal(err)
	}
	var vs []int64
	for _, r := range res {
		vs = append(vs, r.Version)
	}
	return vs
}

// strings1 runs a query that returns one text column and collects it.
func strings1(t *testing.T, conn *pgx.Conn, query string, args ...any) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), query, args...)
	if err != nil {
		t.Fatal(err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return list
}

// tables lists the tables of schema.
func tables(t *testing.T, conn *pgx.Conn, schema string) []string {
	return strings1(t, conn, `SELECT tablename::text FROM pg_tables WHERE schemaname = $1 ORDER BY 1`, schema)
}

// inboxIndexes lists the valid indexes on schema's inbox_events.
func inboxIndexes(t *testing.T, conn *pgx.Conn, schema string) []string {
	return strings1(t, conn, `SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		WHERE i.indrelid = (quote_ident($1) || '.inbox_events')::regclass AND i.indisvalid ORDER BY 1`, schema)
}

// appGooseHistory gives the database an application's own goose history, with versions the
// way goose's timestamps make them.
func appGooseHistory(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `
		CREATE TABLE goose_db_version (id serial PRIMARY KEY, version_id bigint NOT NULL, is_applied boolean NOT NULL,
			tstamp timestamp DEFAULT now());
		INSERT INTO goose_db_version (version_id, is_applied, tstamp) VALUES
			(0, true, '2024-01-01'), (20240215090000, true, '2024-02-15 09:00'), (20240301120000, true, '2024-03-01 12:00')`)
	if err != nil {
		t.Fatal(err)
	}
}

func gooseHistory(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	return strings.Join(strings1(t, conn, `SELECT concat_ws(' ', id, version_id, is_applied, tstamp) FROM goose_db_version ORDER BY id`), "\n")
}

var wantInboxIndexes = []string{"idx_inbox_done_received", "idx_inbox_handler_status", "inbox_events_pkey"}

// A consumer's database gets inbox_events and nothing of the outbox; the application's own
// goose history is neither read nor written; a second run is a no-op.
func TestUpInboxInstallsOnlyTheInbox(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	appGooseHistory(t, conn)
	before := gooseHistory(t, conn)
	db := openDB(t, dsn)

	if got := upInbox(t, db, ""); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
	if got, want := tables(t, conn, "public"), []string{"goose_db_version", "inbox_events", migrations.InboxHistoryTable}; !slices.Equal(got, want) {
		t.Fatalf("tables %v, want %v: the inbox alone", got, want)
	}
	if got := inboxIndexes(t, conn, "public"); !slices.Equal(got, wantInboxIndexes) {
		t.Fatalf("indexes %v, want %v", got, wantInboxIndexes)
	}
	if after := gooseHistory(t, conn); after != before {
		t.Fatalf("the application's goose_db_version changed:\n%s\nwas\n%s", after, before)
	}
	if got := upInbox(t, db, ""); len(got) != 0 {
		t.Fatalf("second run applied %v", got)
	}
	v, err := migrations.InboxApplied(context.Background(), conn, "public")
	if err != nil || v != migrations.InboxLatest() {
		t.Fatalf("InboxApplied = %d, %v; want %d", v, err, migrations.InboxLatest())
	}
}

func insertInboxRows(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	_, err := conn.Exec(context.Background(), `INSERT INTO inbox_events (id, handler_status, payload, processed_at)
		SELECT gen_random_uuid(), 'done', jsonb_build_object('n', i), now() FROM generate_series(1, $1) i`, n)
	if err != nil {
		t.Fatal(err)
	}
}

func countRows(t *testing.T, conn *pgx.Conn, table string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// A database the relay's migrate made (inbox_events from 00001) later gets the inbox set: the
// table is adopted with its rows, gains the prune index, and nothing is created twice.
func TestUpInboxAfterUp(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	insertInboxRows(t, conn, 3)
	relayHistory := gooseRows(t, conn, "outbox_relay_schema")

	if got := upInbox(t, openDB(t, dsn), ""); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
	if n := countRows(t, conn, "inbox_events"); n != 3 {
		t.Fatalf("%d inbox rows after adopting the table, want the 3 it had", n)
	}
	if got := inboxIndexes(t, conn, "public"); !slices.Equal(got, wantInboxIndexes) {
		t.Fatalf("indexes %v, want %v", got, wantInboxIndexes)
	}
	if got := gooseRows(t, conn, "outbox_relay_schema"); !slices.Equal(got, relayHistory) {
		t.Fatalf("the relay's history changed:\n%s\nwas\n%s", got, relayHistory)
	}
	if res, err := migrations.Up(ctx, dsn); err != nil || len(res) != 0 {
		t.Fatalf("Up again: %v, %v; want nothing to do", res, err)
	}
}

// The reverse: the inbox set first, then the relay's full migrate, which must create the
// outbox and keep the inbox's table, rows and indexes as they are.
func TestUpAfterUpInbox(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	db := openDB(t, dsn)
	upInbox(t, db, "")
	conn := connect(t, dsn)
	insertInboxRows(t, conn, 3)

	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatalf("Up on a database with the inbox set: %v", err)
	}
	if n := countRows(t, conn, "outbox_events"); n != 0 {
		t.Fatalf("outbox_events has %d rows", n)
	}
	if n := countRows(t, conn, "inbox_events"); n != 3 {
		t.Fatalf("%d inbox rows after the relay's migrate, want the 3 it had", n)
	}
	if got := inboxIndexes(t, conn, "public"); !slices.Equal(got, wantInboxIndexes) {
		t.Fatalf("indexes %v, want %v", got, wantInboxIndexes)
	}
	if got := upInbox(t, db, ""); len(got) != 0 {
		t.Fatalf("inbox set again applied %v", got)
	}
	if res, err := migrations.Up(ctx, dsn); err != nil || len(res) != 0 {
		t.Fatalf("Up again: %v, %v; want nothing to do", res, err)
	}
}

// Another application's inbox_events is refused with the way out, and nothing is created,
// not even the history table.
func TestUpInboxRefusesAForeignTable(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	if _, err := conn.Exec(context.Background(), `CREATE TABLE inbox_events (id bigserial PRIMARY KEY, body text)`); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.UpInbox(context.Background(), openDB(t, dsn), "")
	t.Log(err)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), "RENAME TO inbox_events_old") ||
		!strings.Contains(err.Error(), "column id is bigint, not uuid") {
		t.Fatalf("UpInbox over a foreign inbox_events: %v; want ErrConflict naming the difference and the way out", err)
	}
	if got := tables(t, conn, "public"); !slices.Equal(got, []string{"inbox_events"}) {
		t.Fatalf("a refused migrate left tables %v", got)
	}
}

// With a schema named, the inbox goes there, history included, whatever search_path says; with
// none, it goes to current_schema().
func TestUpInboxInSchema(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `CREATE SCHEMA app; CREATE SCHEMA other`); err != nil {
		t.Fatal(err)
	}
	db := openDB(t, dsn)
	if got := upInbox(t, db, "app"); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("applied %v, want [1 2]", got)
	}
	if got, want := tables(t, conn, "app"), []string{"inbox_events", migrations.InboxHistoryTable}; !slices.Equal(got, want) {
		t.Fatalf("schema app has %v, want %v", got, want)
	}
	if got := tables(t, conn, "public"); len(got) != 0 {
		t.Fatalf("schema public has %v, want nothing", got)
	}
	if got := inboxIndexes(t, conn, "app"); !slices.Equal(got, wantInboxIndexes) {
		t.Fatalf("indexes %v, want %v", got, wantInboxIndexes)
	}

	// The connection's current_schema() when no schema is named.
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = "other"
	otherDB := stdlib.OpenDB(*cfg)
	defer otherDB.Close()
	if got := upInbox(t, otherDB, ""); !slices.Equal(got, []int64{1, 2}) {
		t.Fatalf("applied %v in current_schema() other, want [1 2]", got)
	}
	if got, want := tables(t, conn, "other"), []string{"inbox_events", migrations.InboxHistoryTable}; !slices.Equal(got, want) {
		t.Fatalf("schema other has %v, want %v", got, want)
	}

	_, err = migrations.UpInbox(ctx, db, "missing")
	if err == nil || !strings.Contains(err.Error(), `CREATE SCHEMA "missing"`) {
		t.Fatalf("UpInbox into a missing schema: %v; want the CREATE SCHEMA to run", err)
	}
}

// Several processes installing the inbox at once, and the relay's migrate among them, apply
// each version once and end with one of everything.
func TestConcurrentUpInboxAndUp(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	const n = 3
	var wg sync.WaitGroup
	applied := make([]int, n)
	errs := make([]error, n+1)
	for i := range n {
		db := openDB(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := migrations.UpInbox(ctx, db, "")
			applied[i], errs[i] = len(r), err
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, errs[n] = migrations.Up(ctx, dsn)
	}()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrator %d: %v", i, err)
		}
	}
	if total := applied[0] + applied[1] + applied[2]; total != 2 {
		t.Fatalf("the inbox versions were applied %d times in all, want 2", total)
	}
	conn := connect(t, dsn)
	var versions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+migrations.InboxHistoryTable+` WHERE version_id > 0`).Scan(&versions); err != nil {
		t.Fatal(err)
	}
	if versions != 2 {
		t.Fatalf("%d inbox versions recorded, want 2", versions)
	}
	if got := inboxIndexes(t, conn, "public"); !slices.Equal(got, wantInboxIndexes) {
		t.Fatalf("indexes %v, want %v", got, wantInboxIndexes)
	}
}

// The relay's migrate still refuses an inbox_events that neither set made.
func TestUpRefusesAForeignInboxTable(t *testing.T) {
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	if _, err := conn.Exec(context.Background(), `CREATE TABLE inbox_events (id bigserial PRIMARY KEY, body text)`); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.Up(context.Background(), dsn)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), `ALTER TABLE "public"."inbox_events" RENAME TO inbox_events_old`) {
		t.Fatalf("Up over a foreign inbox_events: %v; want ErrConflict naming the way out", err)
	}
	if got := tables(t, conn, "public"); !slices.Equal(got, []string{"inbox_events"}) {
		t.Fatalf("a refused migrate left tables %v", got)
	}
}

// The inbox set waits for the relay's migrate on the same database, and so never runs beside
// it (one lock for both sets): held mid-run by migration 11, whose index build waits for a
// writer, the lock keeps UpInbox from starting until the relay's migrate has finished; then
// both complete. (With a lock of its own, UpInbox would take it at once and apply its version
// 1.) Waiting for the lock must not hold a snapshot either, or the index build would wait
// for the waiting migrate in turn: TestConcurrentUpAppliesEachVersionOnce and
// TestConcurrentUpInboxAndUp hang then.
func TestUpInboxWaitsForUp(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	backToVersion10(t, conn) // so that the next Up builds migration 11's indexes
	writer := connect(t, dsn)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', '1', 'order.created', '{}')`); err != nil {
		t.Fatal(err)
	}
	upDone := make(chan error, 1)
	go func() { _, err := migrations.Up(ctx, dsn); upDone <- err }()
	waitForSQL(t, conn, "the relay's index build waiting for the writer",
		`SELECT count(*) > 0 FROM pg_stat_progress_create_index WHERE phase LIKE 'waiting for writers%'`)

	type inboxResult struct {
		applied []migrations.Result
		err     error
	}
	inboxDone := make(chan inboxResult, 1)
	go func() {
		r, err := migrations.UpInbox(ctx, openDB(t, dsn+"&application_name=upinbox"), "")
		inboxDone <- inboxResult{r, err}
	}()
	// Refused the lock at least twice: two tries, each a statement of its own.
	var starts []time.Time
	waitFor(t, "UpInbox refused the migration lock twice", func() bool {
		var start *time.Time
		err := conn.QueryRow(ctx, `SELECT max(query_start) FROM pg_stat_activity
			WHERE application_name = 'upinbox' AND query LIKE '%pg_try_advisory_lock%'`).Scan(&start)
		if err != nil {
			t.Fatal(err)
		}
		if start != nil && !slices.Contains(starts, *start) {
			starts = append(starts, *start)
		}
		return len(starts) >= 2
	})
	if v, err := migrations.InboxApplied(ctx, conn, "public"); err != nil || v != 0 {
		t.Fatalf("UpInbox applied version %d (%v) while the relay's migrate held the lock", v, err)
	}
	select {
	case r := <-inboxDone:
		t.Fatalf("UpInbox returned while the relay's migrate held the lock: %v, %v", r.applied, r.err)
	default:
	}

	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-upDone; err != nil {
		t.Fatalf("the relay's migrate: %v", err)
	}
	r := <-inboxDone
	if r.err != nil || len(r.applied) != 2 {
		t.Fatalf("UpInbox after the relay's migrate: %v, %v; want versions 1 and 2", r.applied, r.err)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitForSQL(t *testing.T, conn *pgx.Conn, what, query string) {
	t.Helper()
	waitFor(t, what, func() bool {
		var ok bool
		if err := conn.QueryRow(context.Background(), query).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	})
}
