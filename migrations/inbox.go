package migrations

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"
)

// InboxHistoryTable is where UpInbox records the inbox set's versions, in the inbox's schema:
// its own table, so that neither the relay's history nor an application's goose_db_version is
// ever read or written by it.
const InboxHistoryTable = "outbox_relay_inbox_schema"

// inboxMigration is one version of the inbox set. The set is written in Go, not as SQL files,
// because its statements name the schema explicitly (a consumer's Schema need not be on its
// search_path) and because version 2 builds its index CONCURRENTLY, outside a transaction.
type inboxMigration struct {
	version int64
	name    string
	tx      func(ctx context.Context, tx *sql.Tx, schema string) error // in a transaction
	db      func(ctx context.Context, db *sql.DB, schema string) error // or outside one
}

// inboxSet is the inbox's migration set: what a consumer's database needs, nothing of the
// outbox. Like the relay's set it is never edited once shipped; later needs come as new
// versions that only add. inbox_events itself may also come from the relay's 00001 (it creates
// the same table): version 1 then adopts it.
var inboxSet = []inboxMigration{
	{version: 1, name: "inbox_events", tx: createInboxEvents},
	{version: 2, name: "inbox_prune_index", db: createPruneIndex},
}

// inboxEventsColumns are inbox_events' columns as the relay's 00001 creates them, in
// format_type's spelling: the shape an existing table must have to be adopted.
var inboxEventsColumns = []struct{ name, typ string }{
	{"id", "uuid"},
	{"received_at", "timestamp with time zone"},
	{"processed_at", "timestamp with time zone"},
	{"handler_status", "text"},
	{"payload", "jsonb"},
	{"signature", "text"},
}

// createInboxEvents is version 1: inbox_events exactly as the relay's 00001 creates it (the
// same columns, defaults and index name), IF NOT EXISTS so that a table 00001 made is adopted
// with its rows; UpInbox has checked its shape beforehand.
func createInboxEvents(ctx context.Context, tx *sql.Tx, schema string) error {
	t := qualified(schema, "inbox_events")
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
    id             uuid PRIMARY KEY,
    received_at    timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz,
    handler_status text NOT NULL,
    payload        jsonb NOT NULL,
    signature      text
)`,
		`CREATE INDEX IF NOT EXISTS idx_inbox_handler_status ON ` + t + ` (handler_status)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// pruneIndex serves inbox.Prune: its predicate is Prune's (handler_status = 'done', ordered by
// received_at), so each batch is a range scan of the oldest done rows.
const pruneIndex = "idx_inbox_done_received"

// createPruneIndex is version 2. An inbox_events that nothing pruned so far can be large, and a
// plain CREATE INDEX would block every delivery for as long as the build takes, so it is built
// CONCURRENTLY: deliveries go on, and the build waits for transactions already running to end.
// A build that was interrupted leaves an invalid index of that name, which IF NOT EXISTS would
// keep: it is dropped and built again.
func createPruneIndex(ctx context.Context, db *sql.DB, schema string) error {
	var invalid bool
	err := db.QueryRowContext(ctx, `SELECT NOT i.indisvalid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, schema, pruneIndex).Scan(&invalid)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if invalid {
		if _, err := db.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+qualified(schema, pruneIndex)); err != nil {
			return err
		}
	}
	_, err = db.ExecContext(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+pgx.Identifier{pruneIndex}.Sanitize()+
		` ON `+qualified(schema, "inbox_events")+` (received_at) WHERE handler_status = 'done'`)
	return err
}

// InboxLatest is the highest version of the inbox set in this binary.
func InboxLatest() int64 { return inboxSet[len(inboxSet)-1].version }

// UpInbox applies the inbox set to db: inbox_events and what it needs, nothing of the outbox,
// in schema, or in the connection's current_schema() when schema is empty. Its versions go
// into InboxHistoryTable in that schema. It returns the versions it applied; running it again
// is a no-op. It holds the same session advisory lock as Up, so it never runs at the same time
// as Up or another UpInbox on the same database. db must allow two connections: the lock is held
// on one while the index is built on another.
//
// A database where the relay's migrations made inbox_events already keeps that table and its
// rows: version 1 adopts it, after checking it has the relay's columns. A table of that name
// with other columns is refused, and nothing is changed.
func UpInbox(ctx context.Context, db *sql.DB, schema string) ([]Result, error) {
	schema, err := resolveSchema(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	applied, err := inboxApplied(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	if applied == 0 {
		if err := checkAdoptable(ctx, db, schema); err != nil {
			return nil, err
		}
	}
	p, err := inboxProvider(db, schema)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox in schema %s: %w", schema, err)
	}
	out := make([]Result, 0, len(results))
	for _, r := range results {
		out = append(out, Result{Version: r.Source.Version, Source: inboxSource(r.Source.Version)})
	}
	return out, nil
}

// inboxSource names an inbox version the way Result.Source names the relay's files.
func inboxSource(version int64) string {
	for _, m := range inboxSet {
		if m.version == version {
			return fmt.Sprintf("inbox/%05d_%s", m.version, m.name)
		}
	}
	return fmt.Sprintf("inbox/%05d", version)
}

// resolveSchema returns schema, or current_schema() when it is empty, after checking the
// schema exists.
func resolveSchema(ctx context.Context, db *sql.DB, schema string) (string, error) {
	if schema == "" {
		var cur sql.NullString
		if err := db.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
			return "", fmt.Errorf("migrate the inbox: read current_schema(): %w", err)
		}
		if !cur.Valid {
			return "", errors.New("migrate the inbox: no schema of search_path exists, so there is nowhere to create " +
				"inbox_events: create one (CREATE SCHEMA app), or name an existing schema (inbox.Config.Schema, --schema)")
		}
		return cur.String, nil
	}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
		return "", fmt.Errorf("migrate the inbox: look up schema %s: %w", schema, err)
	}
	if !exists {
		return "", fmt.Errorf("migrate the inbox: schema %q does not exist: create it (CREATE SCHEMA %s) or name an existing one",
			schema, pgx.Identifier{schema}.Sanitize())
	}
	return schema, nil
}

// InboxApplied returns the highest inbox version recorded in schema's InboxHistoryTable (the
// one search_path finds when schema is empty), or 0 when there is none. It creates nothing.
func InboxApplied(ctx context.Context, q Querier, schema string) (int64, error) {
	var exists bool
	history := qualified(schema, InboxHistoryTable)
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, history).Scan(&exists); err != nil {
		return 0, fmt.Errorf("look up %s: %w", history, err)
	}
	if !exists {
		return 0, nil
	}
	var v int64
	if err := q.QueryRow(ctx, `SELECT coalesce(max(version_id), 0) FROM `+history).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the inbox's schema version from %s: %w", history, err)
	}
	return v, nil
}

func inboxApplied(ctx context.Context, db *sql.DB, schema string) (int64, error) {
	return InboxApplied(ctx, sqlQuerier{db}, schema)
}

// checkAdoptable refuses an inbox_events that the inbox set has not recorded and whose shape
// is not the relay's: another application's table, which version 1 would otherwise adopt.
func checkAdoptable(ctx context.Context, db *sql.DB, schema string) error {
	table := qualified(schema, "inbox_events")
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&exists); err != nil {
		return fmt.Errorf("look up %s: %w", table, err)
	}
	if !exists {
		return nil
	}
	problems, err := inboxShapeProblems(ctx, db, table)
	if err != nil || len(problems) == 0 {
		return err
	}
	return fmt.Errorf("%w: table %s exists, but it is not the inbox's (%s), so it was not created by `outbox-relay migrate`; "+
		"nothing was changed. Rename it (ALTER TABLE %s RENAME TO inbox_events_old) or install the inbox in another schema "+
		"(inbox.Config.Schema), then migrate again", ErrConflict, table, strings.Join(problems, "; "), table)
}

// inboxShapeProblems lists how table differs from the inbox_events the inbox needs: a missing
// or differently typed column, or an id that is not unique on its own (ON CONFLICT (id) needs it).
func inboxShapeProblems(ctx context.Context, db *sql.DB, table string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	defer rows.Close()
	have := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			return nil, fmt.Errorf("read the columns of %s: %w", table, err)
		}
		have[name] = typ
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", table, err)
	}
	var problems []string
	for _, c := range inboxEventsColumns {
		switch typ, ok := have[c.name]; {
		case !ok:
			problems = append(problems, "no column "+c.name)
		case typ != c.typ:
			problems = append(problems, fmt.Sprintf("column %s is %s, not %s", c.name, typ, c.typ))
		}
	}
	var unique bool
	err = db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a
		ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
		WHERE i.indrelid = $1::regclass AND i.indisunique AND i.indnkeyatts = 1 AND i.indpred IS NULL AND a.attname = 'id')`,
		table).Scan(&unique)
	if err != nil {
		return nil, fmt.Errorf("read the indexes of %s: %w", table, err)
	}
	if !unique && have["id"] != "" {
		problems = append(problems, "id is not its primary key")
	}
	return problems, nil
}

func inboxProvider(db *sql.DB, schema string) (*goose.Provider, error) {
	// The same lock id as Up (goose's default): the two sets never migrate one database at
	// once, so 00001 and the inbox's version 1 never race to create inbox_events. Probed every
	// second rather than goose's five, for up to the same five minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(lock.DefaultLockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	store, err := database.NewStore(database.DialectPostgres, qualified(schema, InboxHistoryTable))
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	ms := make([]*goose.Migration, 0, len(inboxSet))
	for _, m := range inboxSet {
		ms = append(ms, goose.NewGoMigration(m.version, m.goFunc(schema), nil))
	}
	p, err := goose.NewProvider(goose.DialectCustom, db, nil, goose.WithStore(historyStore{store}),
		goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true), goose.WithGoMigrations(ms...))
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	return p, nil
}

func (m inboxMigration) goFunc(schema string) *goose.GoFunc {
	if m.tx != nil {
		return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error { return m.tx(ctx, tx, schema) }}
	}
	return &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error { return m.db(ctx, db, schema) }}
}

// historyStore is goose's PostgreSQL store under a schema-qualified, quoted table name. goose
// builds its statements by pasting the name in, which a quoted name survives, but its own
// existence check splits the name at the dot and compares it unquoted; this one asks
// to_regclass, which reads the name as PostgreSQL does.
type historyStore struct{ database.Store }

// TableExists reports whether the history table exists.
func (s historyStore) TableExists(ctx context.Context, db database.DBTxConn) (bool, error) {
	var exists bool
	err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, s.Tablename()).Scan(&exists)
	return exists, err
}

// qualified quotes schema and name as one identifier, "app"."inbox_events", or only the name
// when schema is empty, which search_path then resolves.
func qualified(schema, name string) string {
	if schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, name}.Sanitize()
}
