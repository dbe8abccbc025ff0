package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// appMigrations is an application's own goose history, numbered by timestamp as goose create
// numbers it.
var appMigrations = fstest.MapFS{
	"20240215090000_orders.sql": {Data: []byte("-- +goose Up\nCREATE TABLE orders (id bigserial PRIMARY KEY);\n-- +goose Down\nDROP TABLE orders;\n")},
	"20240301120000_customers.sql": {Data: []byte("-- +goose Up\nCREATE TABLE customers (id bigserial PRIMARY KEY);\n" +
		"-- +goose Down\nDROP TABLE customers;\n")},
}

// gooseRows returns every row of goose_db_version as text, in id order: what "byte for byte"
// compares. Nil when the table does not exist.
func gooseRows(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	ctx := context.Background()
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return nil
	}
	rows, err := conn.Query(ctx, `SELECT t::text FROM `+table+` t ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func versions(t *testing.T, conn *pgx.Conn, table string) []int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT version_id FROM `+table+` WHERE version_id > 0 ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func oneTo(n int64) []int64 {
	var out []int64
	for v := int64(1); v <= n; v++ {
		out = append(out, v)
	}
	return out
}

// Seen: in a database whose goose_db_version holds the application's history, migrate stopped
// with "detected 10 missing (out-of-order) migrations" and created nothing. Now the relay keeps
// its own history: it creates everything, the application's rows stay exactly as they were, a
// second migrate is a no-op, and the application's goose goes on as if the relay were not there.
func TestUpLeavesAnApplicationsGooseHistoryAlone(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	if err := relaytest.GooseUp(ctx, dsn, fstest.MapFS{"20240215090000_orders.sql": appMigrations["20240215090000_orders.sql"]}); err != nil {
		t.Fatal(err)
	}
	before := gooseRows(t, conn, "goose_db_version")
	for i := 0; i < 2; i++ {
		out, err := migrations.UpWith(ctx, dsn, migrations.Options{})
		if err != nil {
			t.Fatalf("migrate %d: %v", i+1, err)
		}
		if want := len(oneTo(migrations.Latest())) * (1 - i); len(out.Applied) != want || out.Moved != nil || out.Adopted != nil {
			t.Fatalf("migrate %d: %+v, want %d applied and nothing moved or adopted", i+1, out, want)
		}
		if got := gooseRows(t, conn, "goose_db_version"); !slices.Equal(got, before) {
			t.Fatalf("migrate %d changed goose_db_version:\n before %q\n after  %q", i+1, before, got)
		}
	}
	if got := versions(t, conn, schema.VersionTable); !slices.Equal(got, oneTo(migrations.Latest())) {
		t.Fatalf("%s records %v", schema.VersionTable, got)
	}
	// The application's next migration applies as usual: its goose sees only its own versions.
	if err := relaytest.GooseUp(ctx, dsn, appMigrations); err != nil {
		t.Fatalf("the application's goose after the relay's migrate: %v", err)
	}
	if got := versions(t, conn, "goose_db_version"); !slices.Equal(got, []int64{20240215090000, 20240301120000}) {
		t.Fatalf("goose_db_version records %v, want only the application's two versions", got)
	}
}

// The other order: the relay first, then an application's goose, which must not see the
// relay's versions as its own (its first migration is then applied, not skipped).
func TestApplicationsGooseAfterTheRelay(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	app := fstest.MapFS{"00001_orders.sql": appMigrations["20240215090000_orders.sql"]}
	if err := relaytest.GooseUp(ctx, dsn, app); err != nil {
		t.Fatal(err)
	}
	var orders bool
	if err := connect(t, dsn).QueryRow(ctx, `SELECT to_regclass('orders') IS NOT NULL`).Scan(&orders); err != nil || !orders {
		t.Fatalf("the application's migration 1 was not applied after the relay's (orders exists %v, %v)", orders, err)
	}
}

// A database migrated by the last release (the relay's versions 1 to 10 in goose_db_version,
// beside the application's, or alone) upgrades with a plain migrate: the relay's rows move to
// its own table with their timestamps, the application's stay byte for byte, nothing is re-run,
// the outbox rows are kept. goose_db_version that held only the relay's rows is dropped.
func TestUpMovesTheLastReleasesHistory(t *testing.T) {
	for _, withApp := range []bool{true, false} {
		t.Run(map[bool]string{true: "beside the application's", false: "alone"}[withApp], func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.NewDB(t)
			conn := connect(t, dsn)
			if err := relaytest.LegacyMigrate(ctx, dsn); err != nil {
				t.Fatal(err)
			}
			if withApp {
				if err := relaytest.GooseUp(ctx, dsn, appMigrations); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := conn.Exec(ctx, `INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
				VALUES ('order', '1', 'order.created', '{}')`); err != nil {
				t.Fatal(err)
			}
			all := gooseRows(t, conn, "goose_db_version")
			var legacyStamps []string
			if err := conn.QueryRow(ctx, `SELECT array_agg(tstamp::text ORDER BY id) FROM goose_db_version
				WHERE version_id BETWEEN 1 AND 10`).Scan(&legacyStamps); err != nil {
				t.Fatal(err)
			}
			out, err := migrations.UpWith(ctx, dsn, migrations.Options{})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%+v", out)
			if !slices.Equal(out.Moved, oneTo(schema.LegacyLatest)) || out.LegacyDropped == withApp {
				t.Fatalf("moved %v (dropped goose_db_version %v), want 1..%d, dropped %v", out.Moved, out.LegacyDropped,
					schema.LegacyLatest, !withApp)
			}
			for _, r := range out.Applied {
				if r.Version <= schema.LegacyLatest {
					t.Fatalf("migration %d ran again after the upgrade", r.Version)
				}
			}
			var stamps []string
			if err := conn.QueryRow(ctx, `SELECT array_agg(tstamp::text ORDER BY id) FROM outbox_relay_schema
				WHERE version_id BETWEEN 1 AND 10`).Scan(&stamps); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(stamps, legacyStamps) {
				t.Fatalf("moved timestamps %v, want %v", stamps, legacyStamps)
			}
			if got := versions(t, conn, schema.VersionTable); !slices.Equal(got, oneTo(migrations.Latest())) {
				t.Fatalf("%s records %v", schema.VersionTable, got)
			}
			got := gooseRows(t, conn, "goose_db_version")
			if withApp {
				want := slices.DeleteFunc(slices.Clone(all), func(r string) bool { return !strings.Contains(r, ",2024") && !strings.Contains(r, ",0,") })
				if !slices.Equal(got, want) {
					t.Fatalf("goose_db_version after the upgrade:\n %q\nwant the application's rows as they were:\n %q", got, want)
				}
			} else if got != nil {
				t.Fatalf("goose_db_version held only the relay's rows and still exists: %q", got)
			}
			var n int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n); err != nil || n != 1 {
				t.Fatalf("outbox rows after the upgrade: %d, %v", n, err)
			}
			again, err := migrations.UpWith(ctx, dsn, migrations.Options{})
			if err != nil || len(again.Applied)+len(again.Moved)+len(again.Adopted) > 0 {
				t.Fatalf("second migrate: %+v, %v; want a no-op", again, err)
			}
		})
	}
}

// An application that numbers its goose migrations 1, 2, 3 as the relay does can own any of
// versions 1 to 10 in a shared goose_db_version: migrate refuses to guess, changes nothing, and
// names the statements that settle it; after them, migrate continues.
func TestUpRefusesAGooseHistoryItCannotTellApart(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	if err := relaytest.LegacyMigrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	// The application's 00011 and 00012 land after the relay's ten in the shared table.
	app := fstest.MapFS{}
	for v := 1; v <= 12; v++ {
		app[fmt.Sprintf("%05d_app.sql", v)] = &fstest.MapFile{Data: []byte(fmt.Sprintf(
			"-- +goose Up\nCREATE TABLE app_%d (id int);\n-- +goose Down\nDROP TABLE app_%d;\n", v, v))}
	}
	if err := relaytest.GooseUp(ctx, dsn, app); err != nil {
		t.Fatal(err)
	}
	before := gooseRows(t, conn, "goose_db_version")
	_, err := migrations.UpWith(ctx, dsn, migrations.Options{})
	t.Log(err)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), "version(s) 11, 12") ||
		!strings.Contains(err.Error(), `CREATE TABLE "public"."outbox_relay_schema"`) {
		t.Fatalf("migrate over an ambiguous goose_db_version: %v; want ErrConflict naming versions 11, 12 and the fix", err)
	}
	if got := gooseRows(t, conn, "goose_db_version"); !slices.Equal(got, before) || gooseRows(t, conn, "outbox_relay_schema") != nil {
		t.Fatal("a refused migrate changed the database")
	}
	// The fix the message names, with N = 10.
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox_relay_schema (id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
		version_id bigint NOT NULL, is_applied boolean NOT NULL, tstamp timestamp NOT NULL DEFAULT now());
		INSERT INTO outbox_relay_schema (version_id, is_applied) SELECT v, true FROM generate_series(0, 10) AS v`); err != nil {
		t.Fatal(err)
	}
	out, err := migrations.UpWith(ctx, dsn, migrations.Options{})
	if err != nil {
		t.Fatalf("migrate after the fix: %v", err)
	}
	if got := gooseRows(t, conn, "goose_db_version"); !slices.Equal(got, before) {
		t.Fatal("migrate after the fix changed goose_db_version")
	}
	t.Logf("%+v", out)
}

// A schema installed from the files by a tool that only runs SQL (psql -f, Flyway) has no
// history: migrate records the versions whose tables, columns and indexes are all there, and
// applies the rest.
func TestUpAdoptsASchemaInstalledFromTheFiles(t *testing.T) {
	for _, upTo := range []int64{6, migrations.Latest()} {
		t.Run(fmt.Sprint("up to ", upTo), func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.NewDB(t)
			if err := relaytest.ApplyUpSections(ctx, dsn, upTo); err != nil {
				t.Fatal(err)
			}
			out, err := migrations.UpWith(ctx, dsn, migrations.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var applied []int64
			for _, r := range out.Applied {
				applied = append(applied, r.Version)
			}
			if !slices.Equal(out.Adopted, oneTo(upTo)) || !slices.Equal(applied, oneTo(migrations.Latest())[upTo:]) {
				t.Fatalf("adopted %v and applied %v, want 1..%d and the rest", out.Adopted, applied, upTo)
			}
			if got := versions(t, connect(t, dsn), schema.VersionTable); !slices.Equal(got, oneTo(migrations.Latest())) {
				t.Fatalf("%s records %v", schema.VersionTable, got)
			}
		})
	}
}

// Part of the relay's tables without any history is not guessed at: migrate names what is
// missing, and from which file, and changes nothing.
func TestUpRefusesAnIncompleteSchemaWithoutHistory(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	if err := relaytest.ApplyUpSections(ctx, dsn, migrations.Latest()); err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx, `ALTER TABLE outbox_events DROP COLUMN headers`); err != nil {
		t.Fatal(err)
	}
	_, err := migrations.UpWith(ctx, dsn, migrations.Options{})
	t.Log(err)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), "column outbox_events.headers (00003_headers.sql)") {
		t.Fatalf("migrate over an incomplete schema: %v; want ErrConflict naming the missing column and its file", err)
	}
	if gooseRows(t, conn, schema.VersionTable) != nil {
		t.Fatal("a refused migrate created the version table")
	}
}

// --schema puts the tables and the version table into that schema, created if missing,
// whatever the search_path says; a name that needs quoting works.
func TestUpIntoANamedSchema(t *testing.T) {
	for _, name := range []string{"app", "My-App"} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			dsn := pgtest.NewDB(t)
			conn := connect(t, dsn)
			out, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: name})
			if err != nil {
				t.Fatal(err)
			}
			if out.Schema != name || len(out.Applied) != int(migrations.Latest()) {
				t.Fatalf("%+v", out)
			}
			f, err := schema.Read(ctx, conn, name)
			if err != nil {
				t.Fatal(err)
			}
			if m := f.Missing(migrations.Latest(), true); len(m) > 0 {
				t.Fatalf("schema %s lacks %s", name, schema.List(m))
			}
			var inPublic int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&inPublic); err != nil {
				t.Fatal(err)
			}
			if inPublic != 0 {
				t.Fatalf("%d tables in public, want none", inPublic)
			}
			if got := versions(t, conn, schema.Qualify(name, schema.VersionTable)); !slices.Equal(got, oneTo(migrations.Latest())) {
				t.Fatalf("version table records %v", got)
			}
			again, err := migrations.UpWith(ctx, dsn, migrations.Options{Schema: name})
			if err != nil || len(again.Applied) > 0 {
				t.Fatalf("second migrate: %+v, %v", again, err)
			}
		})
	}
}

// goose_db_version records fewer versions than the relay's tables show: those rows may be an
// application's (numbered 1, 2, 3 too) while the tables came from elsewhere. Refused, unchanged.
func TestUpRefusesAHistoryThatDoesNotMatchTheTables(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	if err := relaytest.LegacyMigrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id > 3`); err != nil {
		t.Fatal(err)
	}
	before := gooseRows(t, conn, "goose_db_version")
	_, err := migrations.UpWith(ctx, dsn, migrations.Options{})
	t.Log(err)
	if !errors.Is(err, migrations.ErrConflict) || !strings.Contains(err.Error(), "it records versions 1 to 3, but the relay's tables look like version 10") {
		t.Fatalf("migrate: %v; want ErrConflict naming the mismatch", err)
	}
	if got := gooseRows(t, conn, "goose_db_version"); !slices.Equal(got, before) || gooseRows(t, conn, "outbox_relay_schema") != nil {
		t.Fatal("a refused migrate changed the database")
	}
}

// An application's role that owns its schema but may not create schemas migrates into it.
func TestUpIntoAnExistingSchemaWithoutCreateOnTheDatabase(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDB(t)
	conn := connect(t, dsn)
	role := fmt.Sprintf("app_%d", time.Now().UnixNano()%1e9)
	if _, err := conn.Exec(ctx, fmt.Sprintf(`CREATE ROLE %[1]s LOGIN; CREATE SCHEMA app AUTHORIZATION %[1]s;
		REVOKE CREATE ON DATABASE `+pgx.Identifier{conn.Config().Database}.Sanitize()+` FROM PUBLIC`, role)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = conn.Exec(context.Background(), fmt.Sprintf(`DROP OWNED BY %[1]s; DROP ROLE %[1]s`, role))
	})
	roleDSN := strings.Replace(dsn, "postgres://postgres@", "postgres://"+role+"@", 1)
	if _, err := migrations.UpWith(ctx, roleDSN, migrations.Options{Schema: "app"}); err != nil {
		t.Fatalf("migrate --schema app as the schema's owner: %v", err)
	}
}
