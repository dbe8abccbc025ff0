package inspect_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/internal/schemacheck"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// Status checks the schema the relay needs by what it holds, and each way it can be wrong
// names its own fix.
func TestCheckSchemaNamesTheFix(t *testing.T) {
	for _, tc := range []struct {
		name   string
		setup  func(t *testing.T) *pgxpool.Pool // nil: migrated by this binary
		alter  string
		schema string // --schema
		want   error
		fix    string
	}{
		{name: "migrated"},
		{name: "older version", alter: fmt.Sprintf("DROP TABLE outbox_endpoint_status, outbox_endpoint_versions; "+
			"DROP TRIGGER outbox_endpoints_emit_row ON outbox_endpoints; DROP TRIGGER outbox_endpoints_emit_truncate ON outbox_endpoints; "+
			"DELETE FROM outbox_relay_schema WHERE version_id = %d", migrations.Latest()), want: schemacheck.ErrNoSchema,
			fix: fmt.Sprintf("the schema is at version %d and this binary needs version %d (it lacks enabled trigger outbox_endpoints_emit_row "+
				"on outbox_endpoints (00014_endpoint_stream.sql), enabled trigger outbox_endpoints_emit_truncate on outbox_endpoints "+
				"(00014_endpoint_stream.sql), table outbox_endpoint_versions (00014_endpoint_stream.sql), table outbox_endpoint_status "+
				"(00014_endpoint_stream.sql)): run `outbox-relay migrate`", migrations.Latest()-1, migrations.Latest())},
		{name: "trigger disabled by hand", alter: "ALTER TABLE outbox_endpoints DISABLE TRIGGER outbox_endpoints_emit_row",
			want: schemacheck.ErrNoSchema, fix: "enabled trigger outbox_endpoints_emit_row on outbox_endpoints (00014_endpoint_stream.sql) missing"},
		{name: "column renamed by hand", alter: "ALTER TABLE outbox_events RENAME COLUMN event_type TO kind", want: schemacheck.ErrNoSchema,
			fix: "column outbox_events.event_type (00001_init.sql) missing although outbox_relay_schema records version"},
		{name: "index dropped by hand", alter: "DROP INDEX uq_outbox_dedup_key", want: schemacheck.ErrNoSchema,
			fix: "index uq_outbox_dedup_key on outbox_events (00001_init.sql) missing"},
		{name: "foreign table", alter: "DROP TABLE outbox_relay_schema; DROP TABLE outbox_events; " +
			"CREATE TABLE outbox_events (id bigserial PRIMARY KEY, topic text)", want: schemacheck.ErrForeignTable, fix: "RENAME TO"},
		{name: "installed by another tool", setup: installedFromFiles},
		{name: "installed by another tool, partly", setup: installedFromFiles, alter: "DROP TABLE outbox_reshard",
			want: schemacheck.ErrNoSchema, fix: "lacks table outbox_reshard (00009_reshard.sql), and has no version history of the relay " +
				"(installed from the migration files by another tool?): apply the Up sections of those files with that tool"},
		{name: "installed by another tool, older", setup: func(t *testing.T) *pgxpool.Pool { return installedUpTo(t, 9) },
			want: schemacheck.ErrNoSchema, fix: "or run `outbox-relay migrate` (it records versions 1 to 9, which are there, and applies the rest)"},
		{name: "the last release's, not upgraded", setup: legacy, alter: "ALTER TABLE outbox_slots DROP COLUMN publication_oid; " +
			"DELETE FROM goose_db_version WHERE version_id = 10", want: schemacheck.ErrNoSchema,
			fix: "version 9 (recorded in goose_db_version by an earlier release)"},
		{name: "tables in another schema", alter: "CREATE SCHEMA app; ALTER TABLE outbox_events SET SCHEMA app", want: schemacheck.ErrNoSchema,
			fix: "does not exist in schema \"public\" (the connection's current_schema(), first on its search_path) of this database: " +
				"run `outbox-relay migrate`; a table outbox_events exists in schema app: if it is the relay's, pass --schema app"},
		{name: "named schema missing", schema: "nope", want: schemacheck.ErrNoSchema,
			fix: "schema \"nope\" does not exist in this database: run `outbox-relay migrate --schema nope`"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var pool *pgxpool.Pool
			if tc.setup != nil {
				pool = tc.setup(t)
			} else {
				_, pool = migrated(t)
			}
			if tc.alter != "" {
				exec(t, pool, tc.alter)
			}
			_, err := schemacheck.Check(context.Background(), pool, tc.schema)
			t.Log(err)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.fix) {
				t.Fatalf("err = %v, want %v naming %q", err, tc.want, tc.fix)
			}
		})
	}
}

// installedFromFiles installs the schema as psql -f of each file's Up section would.
func installedFromFiles(t *testing.T) *pgxpool.Pool { return installedUpTo(t, migrations.Latest()) }

func installedUpTo(t *testing.T, v int64) *pgxpool.Pool {
	return poolAfter(t, func(dsn string) error { return relaytest.ApplyUpSections(context.Background(), dsn, v) })
}

// legacy migrates as the last release did, into goose_db_version.
func legacy(t *testing.T) *pgxpool.Pool {
	return poolAfter(t, func(dsn string) error { return relaytest.LegacyMigrate(context.Background(), dsn) })
}

func poolAfter(t *testing.T, install func(dsn string) error) *pgxpool.Pool {
	t.Helper()
	dsn := pgtest.NewDB(t)
	if err := install(dsn); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
