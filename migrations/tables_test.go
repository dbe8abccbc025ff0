package migrations_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/migrations"
)

// The tables, columns, indexes and triggers the relay checks for and names (internal/schema) are exactly
// those the migrations create, version by version: a migration that adds one fails here until
// schema.Tables lists it with its version, so the start-up check, the status report and the
// migrations cannot drift apart.
func TestTablesMatchTheMigrations(t *testing.T) {
	latest := migrations.Latest()
	for v := int64(1); v <= latest; v++ {
		if !addsAPiece(v) {
			t.Errorf("no table, column or index of schema.Tables has Since %d: list what migration %s adds "+
				"(every version must add one, so that a schema's shape tells its version)", v, migrations.Source(v))
		}
	}
	dsn := pgtest.NewDB(t)
	ctx := context.Background()
	conn := connect(t, dsn)
	for v := int64(1); v <= latest; v++ {
		if err := migrations.UpTo(ctx, dsn, v); err != nil {
			t.Fatal(err)
		}
		f, err := schema.Read(ctx, conn, "public")
		if err != nil {
			t.Fatal(err)
		}
		if m := f.Missing(v, true); len(m) > 0 {
			t.Errorf("after %s: schema.Tables lists %s, which the migrations have not created", migrations.Source(v), schema.List(m))
		}
		if e := f.Extra(v); len(e) > 0 {
			t.Errorf("after %s: the migrations created %s, which schema.Tables says a later version adds", migrations.Source(v), schema.List(e))
		}
		if shape, exact := f.Shape(latest); shape != v || !exact {
			t.Errorf("after %s: shape is version %d (exact %v), want %d", migrations.Source(v), shape, exact, v)
		}
		for _, u := range unknownPieces(t, conn) {
			t.Errorf("after %s: the migrations created %s, which schema.Tables does not list", migrations.Source(v), u)
		}
	}
}

func addsAPiece(v int64) bool {
	for _, tb := range schema.Tables {
		if tb.Since == v || slices.ContainsFunc(tb.Columns, func(c schema.Column) bool { return c.Since == v }) ||
			slices.ContainsFunc(tb.Indexes, func(x schema.Index) bool { return x.Since == v }) ||
			slices.ContainsFunc(tb.Triggers, func(x schema.Trigger) bool { return x.Since == v }) {
			return true
		}
	}
	return false
}

// unknownPieces lists the tables, columns, (non-primary-key) indexes and triggers of schema public that
// schema.Tables does not know, the version table aside.
func unknownPieces(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	known := map[string]bool{}
	for _, tb := range schema.Tables {
		known["table "+tb.Name] = true
		for _, c := range tb.Columns {
			known["column "+tb.Name+"."+c.Name] = true
		}
		for _, x := range tb.Indexes {
			known["index "+x.Name+" on "+tb.Name] = true
		}
		for _, x := range tb.Triggers {
			known["trigger "+x.Name+" on "+tb.Name] = true
		}
	}
	rows, err := conn.Query(context.Background(), `
		SELECT 'table ' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> $1
		UNION ALL
		SELECT 'column ' || c.relname || '.' || a.attname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname <> $1
		UNION ALL
		SELECT 'index ' || i.relname || ' on ' || c.relname FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid
		JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = 'public' AND NOT x.indisprimary AND c.relname <> $1
		UNION ALL
		SELECT 'trigger ' || t.tgname || ' on ' || c.relname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
		JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' AND NOT t.tgisinternal`, schema.VersionTable)
	if err != nil {
		t.Fatal(err)
	}
	all, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range all {
		if !known[p] {
			out = append(out, fmt.Sprint(p))
		}
	}
	return out
}
