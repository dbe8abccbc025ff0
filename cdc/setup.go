package cdc

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/internal/diagnose"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/schemacheck"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Errors that no retry can fix. Each message says what to do.
var (
	ErrWalLevel      = errors.New("wal_level is not logical")
	ErrNoOutboxTable = schema.ErrNoTable
	ErrNoReplication = errors.New("role lacks the REPLICATION attribute")
	ErrSlotInvalid   = errors.New("replication slot was invalidated")
	ErrSlotMissing   = errors.New("replication slot disappeared")
	ErrSlotMismatch  = errors.New("replication slot is not a pgoutput slot of this database")
	ErrNoPrivilege   = errors.New("missing privilege")
	ErrBadDSN        = errors.New("the database DSN cannot be parsed")
	errSlotActive    = errors.New("replication slot is active in another process")
)

var (
	// ErrPublicationMissing means the publication was dropped (or dropped and created again)
	// while the slot decoded WAL: the slot cannot decode past that point and has to be recreated.
	ErrPublicationMissing = errors.New("publication was dropped while the slot was in use")
	// ErrRecreateSlot is wrapped when only recreating the slot (SetupOptions.RecreateSlot, with
	// every other relay on it stopped) recovers.
	ErrRecreateSlot = errors.New("the slot must be recreated")
	// ErrPublicationTable is wrapped when the publication exists but does not publish the
	// outbox_events of the relay's schema: it is another schema's relay's, or was made before the
	// schema changed.
	ErrPublicationTable = errors.New("the publication does not publish the relay's outbox_events")
)

// SetupResult tells what Setup found or created.
type SetupResult struct {
	SlotCreated        bool
	PublicationCreated bool
	// SlotRecreated: an existing slot was dropped and created again, because it was invalidated
	// (with RecreateSlot) or older than the publication (which was missing, see SlotRecreatedWhy).
	SlotRecreated    bool
	SlotRecreatedWhy string
	Backfill         int  // pending rows recorded for backfill
	CommitOrder      bool // the backfill is in commit order (track_commit_timestamp = on)
	// Failover is the slot's PostgreSQL 17 failover option after Setup (failover.go).
	Failover FailoverResult
	// Schema is the schema of the relay's tables that Setup checked and published:
	// SetupOptions.Schema, or the connection's current_schema().
	Schema string
	// Move, if set, is a move of the slot from another server of the cluster to the one the
	// relay is configured for (placement.go): pass it to the stream as Config.Move. Nil: the
	// slot is decoded where the relay is configured to decode.
	Move *Move
	// FilterChanged: the existing publication's row filter was OldFilter and is now Filter
	// (both canonical, as PostgreSQL prints them; empty is no filter).
	FilterChanged     bool
	OldFilter, Filter string
}

// SetupOptions are Setup's choices beyond the names.
type SetupOptions struct {
	// NoBackfill turns the backfill off. If false (the default), whenever Setup creates the
	// slot it records the pending rows that exist at that moment (read in the slot's exported
	// snapshot, so exactly the rows the stream will not carry) for the publisher to deliver
	// first.
	NoBackfill bool
	// RecreateSlot drops the slot unless another process streams from it (an invalidated slot,
	// wal_status = lost, always) and creates it again, with a backfill (also when there was no
	// slot). It is meant for one run that repairs a slot which cannot stream, or a move whose old
	// slot was lost (ErrMoveBroken, ErrSlotUnreachable). If false, an invalidated slot is an
	// error that names this option.
	RecreateSlot bool
	// Failover chooses whether the slot is a failover slot; the zero value FailoverAuto makes it
	// one on PostgreSQL 17+ (failover.go).
	Failover FailoverMode
	// ReplicationDSN, if set, is a hot standby (PostgreSQL 16+) where the slot lives and is
	// decoded; the checks, the publication and the backfill records still use dsn, the primary
	// (standby.go). Empty: the slot is on dsn's server. Either way a slot found on the other
	// server is moved (SetupResult.Move).
	ReplicationDSN string
	// Logger receives progress of slow steps; the zero value logs nothing.
	Logger zerolog.Logger
	// Schema is the schema of the relay's tables, whose outbox_events the publication carries.
	// Empty: the connection's current_schema().
	Schema string
	// Filter is the publication's row filter, an SQL boolean over outbox_events columns
	// (PostgreSQL 15+); a publication with another filter is altered to this one, which applies
	// to rows committed after that. Empty (the default): every row. A backfill records only the
	// pending rows it matches.
	Filter string
	// Endpoints says the pipeline runs with endpoints: Setup also checks the privileges on the
	// endpoint tables, and whenever it creates the slot it records, in the slot's exported
	// snapshot, the endpoints as of the slot's start (in outbox_endpoint_versions, under
	// Pipeline), so the pipeline routes its first transactions by exactly those. If false (the
	// default), the endpoint tables are not touched.
	Endpoints bool
	// Pipeline is the name of the pipeline (or shard) the slot is for, as its dead letters and
	// endpoint versions are keyed; required with Endpoints.
	Pipeline string
}

// ErrSetupOptions is wrapped when SetupOptions contradict each other.
var ErrSetupOptions = errors.New("invalid setup options")

// Setup checks that the server and database can feed the relay, and creates the publication
// and the slot if they are missing. It drops an existing slot only when that slot cannot
// stream: when it was invalidated and opts.RecreateSlot asks for it, or when the publication
// had to be created although the slot existed (the slot then decodes WAL written while the
// publication was missing, which fails forever). A slot it creates backfills the pending rows
// unless opts.NoBackfill (opts.RecreateSlot always backfills). When the slot still lives on
// another server of the cluster than the one it is to be decoded on (the primary or
// opts.ReplicationDSN), it creates the new slot and returns the move in SetupResult.Move, for the
// stream to drain the old one first (placement.go, move.go). Its errors name the fix.
func Setup(ctx context.Context, dsn, slot, publication string, opts SetupOptions) (SetupResult, error) {
	var res SetupResult
	if opts.Endpoints && opts.Pipeline == "" {
		return res, fmt.Errorf("%w: Endpoints without Pipeline: set SetupOptions.Pipeline to the pipeline's (or shard's) "+
			"name, which its endpoint versions are recorded under", ErrSetupOptions)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, connectError(err)
	}
	defer conn.Close(context.Background())
	if res.Schema, err = schema.Resolve(ctx, conn, opts.Schema); err != nil {
		return res, fmt.Errorf("%w: %w", ErrSchema, err)
	}
	s := res.Schema
	// Nothing is created before every check has passed, so a refused start leaves nothing behind.
	for _, check := range []func(context.Context, *pgx.Conn) error{checkWalLevel,
		func(ctx context.Context, conn *pgx.Conn) error { return checkSchemaUsage(ctx, conn, s, opts.Endpoints) },
		func(ctx context.Context, conn *pgx.Conn) error {
			return schemacheck.MissingOutboxTable(ctx, conn, opts.Schema, s)
		},
		checkReplicationRole,
		func(ctx context.Context, conn *pgx.Conn) error { return checkPrivileges(ctx, conn, s, opts.Endpoints) },
		func(ctx context.Context, conn *pgx.Conn) error { return checkSchema(ctx, conn, opts.Schema) }} {
		if err := check(ctx, conn); err != nil {
			return res, err
		}
	}
	if res.PublicationCreated, err = ensurePublication(ctx, conn, publication, s, opts.Filter); err != nil {
		return res, err
	}
	if res.FilterChanged, res.OldFilter, res.Filter, err = applyFilter(ctx, conn, publication, s, opts.Filter); err != nil {
		return res, err
	}
	p, err := newPlacement(ctx, conn, dsn, slot, s, opts)
	if err != nil {
		return res, err
	}
	defer p.close()
	if res.Move, err = p.place(ctx); err != nil {
		return res, err
	}
	if res.Move == nil {
		if err := setupSlot(ctx, p, publication, &res); err != nil {
			return res, err
		}
	}
	if !p.target.isStandby() {
		res.Failover, err = applyFailover(ctx, dsn, conn, slot, opts.Failover, opts.Logger)
	}
	return res, err
}

// setupSlot makes the slot ready on the target when no move is needed: it recreates a slot that
// cannot stream, checks an existing one, or creates it with a backfill of the pending rows.
func setupSlot(ctx context.Context, p *placement, publication string, res *SetupResult) error {
	if err := recreateIfNeeded(ctx, p.primary, p.tconn, p.slot, publication, p.schema, p.opts, res); err != nil {
		return err
	}
	if err := checkNotSynced(ctx, p.tconn, p.slot); err != nil {
		return err
	}
	exists, err := slotExists(ctx, p.tconn, p.slot)
	switch {
	case err != nil:
		return err
	case exists:
		err = lookupSlot(ctx, p.tconn, p.slot)
	default:
		backfill := !p.opts.NoBackfill || res.SlotRecreated || p.opts.RecreateSlot
		if p.target.isStandby() {
			res.Backfill, res.CommitOrder, err = createStandbySlotWithBackfill(ctx, p, publication, backfill)
		} else {
			res.Backfill, res.CommitOrder, err = createSlotWithBackfill(ctx, p.primaryDSN, p.primary, p.slot, publication,
				p.schema, backfill, p.opts)
		}
		res.SlotCreated = err == nil
		if sqlstate(err) == pgerrcode.DuplicateObject {
			// Another relay (or `reshard`) created it meanwhile, with its own backfill record.
			res.Backfill, err = 0, lookupSlot(ctx, p.tconn, p.slot)
		}
	}
	if err != nil {
		return err
	}
	return p.recordTarget(ctx)
}

// recreateIfNeeded drops slot (on its server, through slotConn) when it cannot stream again:
// invalidated (with RecreateSlot), or older than the publication Setup just created (primary
// holds the publication and outbox_slots).
func recreateIfNeeded(ctx context.Context, primary, slotConn *pgx.Conn, slot, publication, s string, opts SetupOptions,
	res *SetupResult) error {
	var err error
	if opts.RecreateSlot {
		if res.SlotRecreated, err = dropForRecreate(ctx, slotConn, slot); err != nil || res.SlotRecreated {
			res.SlotRecreatedWhy = "recreating the slot was asked for"
			return err
		}
	}
	why := "older than publication " + publication + ", which was missing"
	if !res.PublicationCreated {
		replaced, err := state.PublicationReplaced(ctx, primary, slot, publication, s)
		if err != nil || !replaced {
			return err
		}
		why = "older than publication " + publication + ", which was dropped and created again since the slot was made"
	}
	exists, err := slotExists(ctx, slotConn, slot)
	if err != nil || !exists {
		return err
	}
	if err := dropSlot(ctx, slotConn, slot); err != nil {
		return fmt.Errorf("%w: publication %q was missing, so slot %q cannot decode its WAL; dropping it failed: %v: %w; "+
			"stop every relay on it and recreate the slot", ErrPublicationMissing, publication, slot, err, ErrRecreateSlot)
	}
	res.SlotRecreated, res.SlotRecreatedWhy = true, why
	return nil
}

// dropSlot drops slot, waiting a few seconds for a walsender that just failed on it to let go.
func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
		switch sqlstate(err) {
		case pgerrcode.UndefinedObject:
			return nil // dropped meanwhile, by the relay that failed on it
		case pgerrcode.ObjectInUse:
			if time.Now().After(deadline) {
				return err
			}
		default:
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func slotExists(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
	return n > 0, err
}

// dropForRecreate drops slot when it is invalidated, or inactive (no relay streams it, so one
// that fails on it can be replaced), and reports whether it did.
func dropForRecreate(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var status string
	var active bool
	err := conn.QueryRow(ctx, "SELECT coalesce(wal_status, ''), active FROM pg_replication_slots WHERE slot_name = $1",
		slot).Scan(&status, &active)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && status != "lost" && active) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up slot: %w", err)
	}
	if err := dropSlot(ctx, conn, slot); err != nil {
		return false, fmt.Errorf("drop slot %q to recreate it: %w", slot, err)
	}
	return true, nil
}

func checkWalLevel(ctx context.Context, conn *pgx.Conn) error {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if level != "logical" {
		return fmt.Errorf("%w (it is %q): run ALTER SYSTEM SET wal_level = logical (or set it in postgresql.conf) "+
			"and restart PostgreSQL; a reload is not enough", ErrWalLevel, level)
	}
	return nil
}

func checkReplicationRole(ctx context.Context, conn *pgx.Conn) error {
	var user string
	var ok bool
	err := conn.QueryRow(ctx, `SELECT current_user, rolreplication OR rolsuper FROM pg_roles WHERE rolname = current_user`).
		Scan(&user, &ok)
	if err != nil {
		return fmt.Errorf("read role attributes: %w", err)
	}
	if !ok {
		return fmt.Errorf("%w: run ALTER ROLE %s WITH REPLICATION as a superuser (and allow it in pg_hba.conf)",
			ErrNoReplication, pgx.Identifier{user}.Sanitize())
	}
	return nil
}

// ensurePublication creates publication name for outbox_events of schema s, unless it exists;
// an existing one must carry that table.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name, s, filter string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication: %w", err)
	}
	if exists {
		return false, checkPublicationTable(ctx, conn, name, s)
	}
	where := ""
	if filter != "" {
		// Insert-only: with updates published too, a filter column outside the replica identity
		// would make every later UPDATE of the table fail.
		where = " WHERE (" + filter + ")"
	}
	stmt := "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize() + " FOR TABLE " + schema.Qualify(s, OutboxTable) +
		where + " WITH (publish = 'insert')"
	_, err := conn.Exec(ctx, stmt)
	switch code := sqlstate(err); {
	case err == nil:
		return true, nil
	case code == pgerrcode.DuplicateObject:
		return false, nil // another relay created it first
	case code == pgerrcode.InsufficientPrivilege:
		return false, fmt.Errorf("%w to create the publication: run `%s` as the owner of outbox_events", ErrNoPrivilege, stmt)
	}
	return false, fmt.Errorf("create publication: %w", err)
}

// checkPublicationTable fails unless publication name publishes s's outbox_events (all tables
// do): a relay would otherwise stream nothing from it, since its decoder takes only that table.
func checkPublicationTable(ctx context.Context, conn *pgx.Conn, name, s string) error {
	table := schema.Qualify(s, OutboxTable)
	var carries bool
	var tables []string
	err := conn.QueryRow(ctx, `SELECT p.puballtables OR EXISTS (SELECT 1 FROM pg_publication_rel r
			WHERE r.prpubid = p.oid AND r.prrelid = $2::regclass),
		coalesce((SELECT array_agg(format('%I.%I', n.nspname, c.relname) ORDER BY 1) FROM pg_publication_rel r
			JOIN pg_class c ON c.oid = r.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE r.prpubid = p.oid), '{}')
		FROM pg_publication p WHERE p.pubname = $1`, name, table).Scan(&carries, &tables)
	if errors.Is(err, pgx.ErrNoRows) || carries {
		return nil
	}
	if err != nil {
		return fmt.Errorf("look up the tables of publication %q: %w", name, err)
	}
	published := "no table"
	if len(tables) > 0 {
		published = strings.Join(tables, ", ")
	}
	return fmt.Errorf("%w: publication %q publishes %s, not %s (another schema's relay uses it, or it was made before "+
		"the schema changed): give this relay a slot and a publication of its own (each schema's relay needs its own), or, if "+
		"no relay uses it, drop it with DROP PUBLICATION %s: the next start creates it for %s and recreates the slot with "+
		"a backfill", ErrPublicationTable, name, published, table, pgx.Identifier{name}.Sanitize(), table)
}

func ensureSlot(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	err := lookupSlot(ctx, conn, name)
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, err
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
	switch sqlstate(err) {
	case "":
		return err == nil, err
	case pgerrcode.DuplicateObject:
		return false, nil
	case pgerrcode.ConfigurationLimitExceeded:
		return false, slotLimitError(ctx, conn, name, err)
	case pgerrcode.InsufficientPrivilege:
		return false, fmt.Errorf("%w to create slot %q: ALTER ROLE ... WITH REPLICATION, or create it as a superuser: "+
			"SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", ErrNoPrivilege, name, name)
	}
	return false, fmt.Errorf("create slot %q: %w", name, err)
}

// lookupSlot checks the existing slot name (an error wrapping pgx.ErrNoRows: there is none).
func lookupSlot(ctx context.Context, conn *pgx.Conn, name string) error {
	var plugin, walStatus, db string
	var sameDB bool
	err := conn.QueryRow(ctx, `
		SELECT coalesce(plugin, ''), coalesce(wal_status, ''), coalesce(database, ''), database = current_database()
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&plugin, &walStatus, &db, &sameDB)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("slot %q: %w", name, err)
	case err != nil:
		return fmt.Errorf("look up slot: %w", err)
	}
	return checkSlot(name, plugin, walStatus, db, sameDB)
}

func checkSlot(name, plugin, walStatus, db string, sameDB bool) error {
	if walStatus == "lost" {
		return slotInvalidError(name)
	}
	if plugin != "pgoutput" || !sameDB {
		return fmt.Errorf("%w: slot %q uses plugin %q in database %q; choose another slot name", ErrSlotMismatch, name, plugin, db)
	}
	return nil
}

func slotInvalidError(name string) error {
	return fmt.Errorf("%w: slot %q lost WAL it needed (wal_status = lost, usually max_slot_wal_keep_size); "+
		"recreate it (SetupOptions.RecreateSlot drops the slot, creates it again and backfills the pending rows), "+
		"or drop it yourself with SELECT pg_drop_replication_slot('%s') and start the relay (it backfills by default)",
		ErrSlotInvalid, name, name)
}

func sqlstate(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// connectError wraps a failure to connect: a DSN that does not parse is ErrBadDSN (no retry
// fixes it), anything else is a connection failure.
func connectError(err error) error {
	var parseErr *pgconn.ParseConfigError
	if errors.As(err, &parseErr) {
		return badDSN(err)
	}
	return fmt.Errorf("connect: %w", err)
}

// badDSN wraps a connection string that does not parse in ErrBadDSN, naming the fix. pgconn's
// message echoes the string with its password masked, and nothing else.
func badDSN(err error) error {
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		return fmt.Errorf("%w: %w; %s", ErrBadDSN, err, diagnose.DSNFix(pe))
	}
	return fmt.Errorf("%w: %w; give a URL (postgres://user:password@host:5432/dbname) or key=value pairs "+
		"(host=... dbname=...)", ErrBadDSN, err)
}
