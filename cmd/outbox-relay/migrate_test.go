package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// publicTables lists the tables of schema public.
func publicTables(t *testing.T, dsn string) string { return schemaTables(t, dsn, "public") }

// schemaTables lists the tables of schema s.
func schemaTables(t *testing.T, dsn, name string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var s string
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(tablename, ' ' ORDER BY tablename), '')
		FROM pg_tables WHERE schemaname = $1`, name).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// migrate --inbox-only creates inbox_events and its history, nothing of the outbox, and leaves
// an application's goose_db_version alone; a later full migrate adds the outbox and keeps the
// inbox's rows; then --inbox-only has nothing left to do.
func TestMigrateInboxOnly(t *testing.T) {
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `CREATE TABLE app_history (version bigint); INSERT INTO app_history VALUES (20240215090000)`); err != nil {
		t.Fatal(err)
	}

	out, stderr, code := cli(t, "migrate", "--inbox-only", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 00001 inbox/00001_inbox_events") || !strings.Contains(out, "applied 00002 inbox/00002_inbox_prune_index") {
		t.Fatalf("migrate --inbox-only: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got, want := publicTables(t, dsn), "app_history inbox_events "+migrations.InboxHistoryTable; got != want {
		t.Fatalf("tables %q, want %q: the inbox alone", got, want)
	}
	if out, _, code := cli(t, "migrate", "--inbox-only", "--dsn", dsn); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second migrate --inbox-only: exit %d, stdout %q", code, out)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO inbox_events (id, handler_status, payload) VALUES (gen_random_uuid(), 'done', '{}')`); err != nil {
		t.Fatal(err)
	}

	out, stderr, code = cli(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 00001 00001_init.sql") || strings.Contains(out, "inbox/") {
		t.Fatalf("full migrate after --inbox-only: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	var outbox bool
	var inboxRows int
	if err := conn.QueryRow(ctx, `SELECT to_regclass('outbox_events') IS NOT NULL, (SELECT count(*) FROM inbox_events)`).
		Scan(&outbox, &inboxRows); err != nil {
		t.Fatal(err)
	}
	if !outbox || inboxRows != 1 {
		t.Fatalf("after the full migrate: outbox_events %v, inbox rows %d; want the outbox and the one inbox row", outbox, inboxRows)
	}
}

// A full migrate installs the inbox set too, so --inbox-only afterwards finds nothing to do.
func TestMigrateIncludesTheInboxSet(t *testing.T) {
	dsn := pgtest.NewDB(t)
	out, stderr, code := cli(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 00002 inbox/00002_inbox_prune_index") {
		t.Fatalf("migrate: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if out, _, code := cli(t, "migrate", "--inbox-only", "--dsn", dsn); code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate --inbox-only after migrate: exit %d, stdout %q", code, out)
	}
	if out, _, code := cli(t, "migrate", "--dsn", dsn); code != 0 || strings.TrimSpace(out) != `schema "public" is up to date` {
		t.Fatalf("second migrate: exit %d, stdout %q", code, out)
	}
}

// --schema (or OUTBOX_RELAY_SCHEMA) reaches the inbox set as it does the relay's: --inbox-only
// creates the schema and puts inbox_events and its history there, and a full migrate of that
// schema adds the outbox beside it and applies the inbox set there too (not in the
// search_path's public), keeping the inbox's rows.
func TestMigrateInboxOnlyInASchema(t *testing.T) {
	dsn := pgtest.NewDB(t)
	out, stderr, code := cli(t, "migrate", "--inbox-only", "--schema", "app", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 00002 inbox/00002_inbox_prune_index") {
		t.Fatalf("migrate --inbox-only --schema app: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got, want := schemaTables(t, dsn, "app"), "inbox_events "+migrations.InboxHistoryTable; got != want {
		t.Fatalf("schema app has %q, want %q", got, want)
	}
	if got := publicTables(t, dsn); got != "" {
		t.Fatalf("schema public has %q, want nothing", got)
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO app.inbox_events (id, handler_status, payload) VALUES (gen_random_uuid(), 'done', '{}')`); err != nil {
		t.Fatal(err)
	}

	t.Setenv("OUTBOX_RELAY_SCHEMA", "app")
	out, stderr, code = cli(t, "migrate", "--dsn", dsn)
	if code != 0 || !strings.Contains(out, "applied 00001 00001_init.sql") || strings.Contains(out, "inbox/") {
		t.Fatalf("migrate with OUTBOX_RELAY_SCHEMA=app after --inbox-only: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if got := publicTables(t, dsn); got != "" {
		t.Fatalf("schema public has %q after migrating app, want nothing", got)
	}
	var outbox bool
	var inboxRows int
	if err := conn.QueryRow(ctx, `SELECT to_regclass('app.outbox_events') IS NOT NULL, (SELECT count(*) FROM app.inbox_events)`).
		Scan(&outbox, &inboxRows); err != nil {
		t.Fatal(err)
	}
	if !outbox || inboxRows != 1 {
		t.Fatalf("after the full migrate: app.outbox_events %v, inbox rows %d; want the outbox and the one inbox row", outbox, inboxRows)
	}
	if out, _, code := cli(t, "migrate", "--dsn", dsn); code != 0 || strings.TrimSpace(out) != `schema "app" is up to date` {
		t.Fatalf("second migrate: exit %d, stdout %q", code, out)
	}
}
