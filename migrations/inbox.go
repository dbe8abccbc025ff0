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

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// InboxHistoryTable is where UpInbox records the inbox set's versions, in the inbox's schema:
// its own table, so that neither the relay's history nor an application's goose_db_version is
// ever read or written by it.
const InboxHistoryTable = schema.InboxVersionTable

// inboxMigration is one version of the inbox set. The set is written in Go, not as SQL files,
// because its statements name the schema explicitly (a consumer's Schema need not be on its
// search_path) and because version 2 builds its index CONCURRENTLY, outside a transaction.
type inboxMigration struct {
	version int64
	name    string
	tx      func(ctx context.Context, tx *sql.Tx, s string) error // in a transaction, in schema s
	db      func(ctx context.Context, db *sql.DB, s string) error // or outside one
}

// inboxSet is the inbox's migration set: what a consumer's database needs, nothing of the
// outbox. Like the relay's set it is never edited once shipped; later needs come as new
// versions that only add. inbox_events itself may also come from the relay's 00001 (it creates
// the same table): version 1 then adopts it.
var inboxSet = []inboxMigration{
	{version: 1, name: "inbox_events", tx: createInboxEvents},
	{version: 2, name: "inbox_prune_index", db: createPruneIndex},
}

// inboxColumnTypes are the types of inbox_events' columns as the relay's 00001 creates them, in
// format_type's spelling; the columns themselves are schema.Tables' (inboxEventsColumns).
var inboxColumnTypes = map[string]string{
	"id":             "uuid",
	"received_at":    "timestamp with time zone",
	"processed_at":   "timestamp with time zone",
	"handler_status": "text",
	"payload":        "jsonb",
	"signature":      "text",
}

type inboxColumn struct{ name, typ string }

// inboxEventsColumns are inbox_events' columns as the relay's 00001 creates them
// (schema.FirstColumns), with their types: the shape an existing table must have to be
// adopted. A column without a type in inboxColumnTypes has typ "" and fails the check, and
// TestInboxColumnTypes, until it is given one.
func inboxEventsColumns() []inboxColumn {
	var cols []inboxColumn
	for _, name := range schema.FirstColumns(schema.Inbox) {
		cols = append(cols, inboxColumn{name, inboxColumnTypes[name]})
	}
	return cols
}

// createInboxEvents is version 1: inbox_events exactly as the relay's 00001 creates it (the
// same columns, defaults and index name), IF NOT EXISTS so that a table 00001 made is adopted
// with its rows; UpInbox has checked its shape beforehand.
func createInboxEvents(ctx context.Context, tx *sql.Tx, s string) error {
	t := qualified(s, schema.Inbox)
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
func createPruneIndex(ctx context.Context, db *sql.DB, s string) error {
	var invalid bool
	err := db.QueryRowContext(ctx, `SELECT NOT i.indisvalid FROM pg_index i
		JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2`, s, pruneIndex).Scan(&invalid)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	if invalid {
		if _, err := db.ExecContext(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+qualified(s, pruneIndex)); err != nil {
			return err
		}
	}
	_, err = db.ExecContext(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+pgx.Identifier{pruneIndex}.Sanitize()+
		` ON `+qualified(s, schema.Inbox)+` (received_at) WHERE handler_status = 'done'`)
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
	s, err := resolveSchema(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	applied, err := inboxApplied(ctx, db, s)
	if err != nil {
		return nil, err
	}
	if applied == 0 {
		if err := checkAdoptable(ctx, db, s); err != nil {
			return nil, err
		}
	}
	p, err := inboxProvider(db, s)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox in schema %s: %w", s, err)
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

// resolveSchema returns name, or current_schema() when it is empty, after checking the
// schema exists.
func resolveSchema(ctx context.Context, db *sql.DB, name string) (string, error) {
	if name == "" {
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
	if err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("migrate the inbox: look up schema %s: %w", name, err)
	}
	if !exists {
		return "", fmt.Errorf("migrate the inbox: schema %q does not exist: create it (CREATE SCHEMA %s) or name an existing one",
			name, schema.Quote(name))
	}
	return name, nil
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

func inboxApplied(ctx context.Context, db *sql.DB, s string) (int64, error) {
	return InboxApplied(ctx, sqlQuerier{db}, s)
}

// checkAdoptable refuses an inbox_events that the inbox set has not recorded and whose shape
// is not the relay's: another application's table, which version 1 would otherwise adopt.
func checkAdoptable(ctx context.Context, db *sql.DB, s string) error {
	table := qualified(s, schema.Inbox)
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
	for _, c := range inboxEventsColumns() {
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

func inboxProvider(db *sql.DB, s string) (*goose.Provider, error) {
	store, err := database.NewStore(database.DialectPostgres, qualified(s, InboxHistoryTable))
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	ms := make([]*goose.Migration, 0, len(inboxSet))
	for _, m := range inboxSet {
		ms = append(ms, goose.NewGoMigration(m.version, m.goFunc(s), nil))
	}
	// The relay's lock (UpWith's): the two sets never migrate one database at once, so 00001
	// and the inbox's version 1 never race to create inbox_events.
	p, err := goose.NewProvider(goose.DialectCustom, db, nil, goose.WithStore(historyStore{store}),
		goose.WithSessionLocker(sessionLock{}), goose.WithDisableGlobalRegistry(true), goose.WithGoMigrations(ms...))
	if err != nil {
		return nil, fmt.Errorf("migrate the inbox: %w", err)
	}
	return p, nil
}

func (m inboxMigration) goFunc(s string) *goose.GoFunc {
	if m.tx != nil {
		return &goose.GoFunc{RunTx: func(ctx context.Context, tx *sql.Tx) error { return m.tx(ctx, tx, s) }}
	}
	return &goose.GoFunc{RunDB: func(ctx context.Context, db *sql.DB) error { return m.db(ctx, db, s) }}
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

// qualified is schema.Qualify for names that are not tables of schema.Tables (the history
// table, an index) as well as for those that are: "app"."inbox_events", or only the name when
// s is empty, which search_path then resolves.
func qualified(s, name string) string { return schema.Qualify(s, name) }

// sessionLock is lockKey as goose's session lock of the inbox set: goose takes it on the
// connection it migrates with and releases it there, so the lock spans the whole set, as
// UpWith's spans the relay's. It waits for another migrate as long as ctx allows, polling as
// UpWith does (waitLock).
type sessionLock struct{}

// SessionLock implements lock.SessionLocker.
func (sessionLock) SessionLock(ctx context.Context, conn *sql.Conn) error {
	err := waitLock(ctx, func(ctx context.Context) (bool, error) {
		var ok bool
		err := conn.QueryRowContext(ctx, "SELECT pg_try_advisory_lock($1)", int64(lockKey)).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return nil
}

// SessionUnlock implements lock.SessionLocker.
func (sessionLock) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", int64(lockKey))
	return err
}

// sqlQuerier lets InboxApplied read through database/sql.
type sqlQuerier struct{ db *sql.DB }

func (q sqlQuerier) QueryRow(ctx context.Context, query string, args ...any) pgx.Row {
	return q.db.QueryRowContext(ctx, query, args...)
}
