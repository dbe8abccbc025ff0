package schema

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Querier runs queries; *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Found is what one schema of a database holds of Tables: the columns and indexes of each table
// present.
type Found struct {
	Schema   string
	tables   map[string][]string
	indexes  map[string][]string
	triggers map[string][]string // enabled ones only
	// noInbox: inbox_events is left out of every answer (WithoutInbox).
	noInbox bool
}

// Piece is a table, a column, an index or a trigger of Tables that a schema lacks (or has).
type Piece struct {
	Table   string
	Column  string // a column of Table
	Index   string // an index on Table
	Trigger string // a trigger on Table
	Since   int64  // the migration version that adds it
}

func (p Piece) String() string {
	switch {
	case p.Column != "":
		return "column " + p.Table + "." + p.Column
	case p.Index != "":
		return "index " + p.Index + " on " + p.Table
	case p.Trigger != "":
		return "enabled trigger " + p.Trigger + " on " + p.Table // a disabled one counts as missing
	}
	return "table " + p.Table
}

// Read returns what schema s holds of Tables. It only reads the catalog.
func Read(ctx context.Context, q Querier, s string) (Found, error) {
	f := Found{Schema: s, tables: map[string][]string{}, indexes: map[string][]string{}, triggers: map[string][]string{}}
	// One row per column, one per index ('i') and one per enabled trigger ('t'; a disabled one
	// writes nothing), each with its table.
	rows, err := q.Query(ctx, `
		SELECT c.relname::text, 'c', coalesce(a.attname::text, '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')
		UNION ALL
		SELECT c.relname::text, 'i', i.relname::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_index x ON x.indrelid = c.oid JOIN pg_class i ON i.oid = x.indexrelid
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')
		UNION ALL
		SELECT c.relname::text, 't', t.tgname::text
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_trigger t ON t.tgrelid = c.oid AND NOT t.tgisinternal AND t.tgenabled IN ('O', 'A')
		WHERE n.nspname = $1 AND c.relname = ANY($2) AND c.relkind IN ('r', 'p')
		ORDER BY 1, 2`, s, Names())
	if err != nil {
		return f, fmt.Errorf("read the tables of schema %s: %w", s, err)
	}
	var table, kind, name string
	_, err = pgx.ForEachRow(rows, []any{&table, &kind, &name}, func() error {
		switch kind {
		case "i":
			f.indexes[table] = append(f.indexes[table], name)
			return nil
		case "t":
			f.triggers[table] = append(f.triggers[table], name)
			return nil
		}
		cols := f.tables[table] // a table without columns still gets its entry
		if name != "" {
			cols = append(cols, name)
		}
		f.tables[table] = cols
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("read the tables of schema %s: %w", s, err)
	}
	return f, nil
}

// Has reports whether the schema has table.
func (f Found) Has(table string) bool {
	_, ok := f.tables[table]
	return ok
}

// Columns returns table's columns in order, nil when the table is missing.
func (f Found) Columns(table string) []string { return f.tables[table] }

// Empty reports whether the schema has none of Tables.
func (f Found) Empty() bool { return len(f.tables) == 0 }

// Foreign reports whether the schema has an outbox_events that lacks the first migration's
// columns: another application's table, not the relay's.
func (f Found) Foreign() bool { return f.ForeignTable(Events) }

// ForeignTable reports whether the schema has table but without the columns the migration
// that creates it gives it (FirstColumns): another application's table of that name.
func (f Found) ForeignTable(table string) bool {
	if !f.Has(table) {
		return false
	}
	for _, c := range FirstColumns(table) {
		if !slices.Contains(f.tables[table], c) {
			return true
		}
	}
	return false
}

// WithoutInbox returns f with inbox_events left out, neither present nor missing: the relay's
// migrations see a schema so when the inbox's own set (migrations.UpInbox) made that table,
// which is then the inbox set's to check and change.
func (f Found) WithoutInbox() Found {
	out := Found{Schema: f.Schema, tables: map[string][]string{}, indexes: map[string][]string{}, triggers: f.triggers,
		noInbox: true}
	for name, cols := range f.tables {
		if name != Inbox {
			out.tables[name] = cols
		}
	}
	for name, idx := range f.indexes {
		if name != Inbox {
			out.indexes[name] = idx
		}
	}
	return out
}

// Missing lists the pieces that migrations up to version upTo add and the schema lacks, in
// Tables order; the inbox's table only if inbox. A missing table is one piece, not one per
// column, index and trigger.
func (f Found) Missing(upTo int64, inbox bool) []Piece {
	return f.pieces(func(since int64) bool { return since <= upTo }, inbox, false)
}

// Extra lists the pieces that migrations after version after add and the schema has anyway.
func (f Found) Extra(after int64) []Piece {
	return f.pieces(func(since int64) bool { return since > after }, true, true)
}

func (f Found) pieces(in func(since int64) bool, inbox, present bool) []Piece {
	var out []Piece
	for _, t := range Tables {
		if t.Inbox && (!inbox || f.noInbox) {
			continue
		}
		cols, has := f.tables[t.Name]
		if !has {
			if in(t.Since) && !present {
				out = append(out, Piece{Table: t.Name, Since: t.Since})
			}
			continue
		}
		for _, c := range t.Columns {
			if in(c.Since) && slices.Contains(cols, c.Name) == present {
				out = append(out, Piece{Table: t.Name, Column: c.Name, Since: c.Since})
			}
		}
		for _, x := range t.Indexes {
			if in(x.Since) && slices.Contains(f.indexes[t.Name], x.Name) == present {
				out = append(out, Piece{Table: t.Name, Index: x.Name, Since: x.Since})
			}
		}
		for _, x := range t.Triggers {
			if in(x.Since) && slices.Contains(f.triggers[t.Name], x.Name) == present {
				out = append(out, Piece{Table: t.Name, Trigger: x.Name, Since: x.Since})
			}
		}
	}
	return out
}

// Shape returns the highest migration version v (up to latest) whose tables, columns, triggers and
// indexes the schema has in full, inbox included (unless WithoutInbox), and whether it has nothing a later version adds (exact):
// then it looks exactly like a schema migrated to v. 0 means not even the first version is
// complete.
func (f Found) Shape(latest int64) (v int64, exact bool) {
	for v < latest && len(f.Missing(v+1, true)) == 0 {
		v++
	}
	return v, len(f.Extra(v)) == 0
}

// List writes pieces for a message: "table outbox_reshard, column outbox_slots.publication_oid".
func List(pieces []Piece) string {
	s := make([]string, len(pieces))
	for i, p := range pieces {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
