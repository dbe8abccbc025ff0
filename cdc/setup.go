package cdc

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Errors that no retry can fix. Each message says what to do.
var (
	ErrWalLevel      = errors.New("wal_level is not logical")
	ErrNoOutboxTable = errors.New("table outbox_events does not exist")
	ErrNoReplication = errors.New("role lacks the REPLICATION attribute")
	ErrSlotInvalid   = errors.New("replication slot was invalidated")
	ErrSlotMissing   = errors.New("replication slot disappeared")
	ErrSlotMismatch  = errors.New("replication slot is not a pgoutput slot of this database")
	ErrNoPrivilege   = errors.New("missing privilege")
	ErrBadDSN        = errors.New("the database DSN cannot be parsed")
	errSlotActive    = errors.New("replication slot is active in another process")
)

// SetupResult tells what Setup found or created.
type SetupResult struct {
	SlotCreated        bool
	PublicationCreated bool
	SlotRecreated      bool // an invalidated slot was dropped and created again
	Backfill           int  // pending rows recorded for backfill
}

// SetupOptions are Setup's choices beyond the names.
type SetupOptions struct {
	// Backfill, when the slot is created, records the pending rows that exist at that moment
	// (read in the slot's exported snapshot, so exactly the rows the stream will not carry) for
	// the publisher to deliver first.
	Backfill bool
	// RecreateSlot drops an invalidated slot (wal_status = lost) and creates it again, with a
	// backfill.
	RecreateSlot bool
}

// Setup checks that the server and database can feed the relay, and creates the publication
// and the slot if they are missing. It never drops either, except an invalidated slot when
// opts.RecreateSlot asks for it. Its errors name the fix.
func Setup(ctx context.Context, dsn, slot, publication string, opts SetupOptions) (SetupResult, error) {
	var res SetupResult
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, connectError(err)
	}
	defer conn.Close(context.Background())
	// Nothing is created before every check has passed, so a refused start leaves nothing behind.
	for _, check := range []func(context.Context, *pgx.Conn) error{checkWalLevel, checkOutboxTable, checkReplicationRole,
		checkPrivileges, checkSchema} {
		if err := check(ctx, conn); err != nil {
			return res, err
		}
	}
	if res.PublicationCreated, err = ensurePublication(ctx, conn, publication); err != nil {
		return res, err
	}
	if opts.RecreateSlot {
		if res.SlotRecreated, err = dropIfLost(ctx, conn, slot); err != nil {
			return res, err
		}
		opts.Backfill = opts.Backfill || res.SlotRecreated
	}
	if opts.Backfill {
		return setupWithBackfill(ctx, dsn, conn, slot, res)
	}
	res.SlotCreated, err = ensureSlot(ctx, conn, slot)
	return res, err
}

func setupWithBackfill(ctx context.Context, dsn string, conn *pgx.Conn, slot string, res SetupResult) (SetupResult, error) {
	exists, err := slotExists(ctx, conn, slot)
	if err != nil || exists {
		res.SlotCreated = false
		if err == nil {
			_, err = ensureSlot(ctx, conn, slot) // checks it
		}
		return res, err
	}
	res.Backfill, err = createSlotWithBackfill(ctx, dsn, conn, slot)
	res.SlotCreated = err == nil
	return res, err
}

func slotExists(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var n int
	err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n)
	return n > 0, err
}

// dropIfLost drops slot when it is invalidated, and reports whether it did.
func dropIfLost(ctx context.Context, conn *pgx.Conn, slot string) (bool, error) {
	var status string
	err := conn.QueryRow(ctx, "SELECT coalesce(wal_status, '') FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && status != "lost") {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up slot: %w", err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
		return false, fmt.Errorf("drop invalidated slot %q: %w", slot, err)
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

func checkOutboxTable(ctx context.Context, conn *pgx.Conn) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('outbox_events') IS NOT NULL").Scan(&exists); err != nil {
		return fmt.Errorf("look up outbox_events: %w", err)
	}
	if !exists {
		return fmt.Errorf("%w in this database (or not on search_path): run `outbox-relay migrate` first", ErrNoOutboxTable)
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

func ensurePublication(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil {
		return false, fmt.Errorf("look up publication: %w", err)
	}
	if exists {
		return false, nil
	}
	stmt := "CREATE PUBLICATION " + pgx.Identifier{name}.Sanitize() + " FOR TABLE outbox_events WITH (publish = 'insert')"
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

func ensureSlot(ctx context.Context, conn *pgx.Conn, name string) (bool, error) {
	var plugin, walStatus, db string
	var sameDB bool
	err := conn.QueryRow(ctx, `
		SELECT coalesce(plugin, ''), coalesce(wal_status, ''), coalesce(database, ''), database = current_database()
		FROM pg_replication_slots WHERE slot_name = $1`, name).Scan(&plugin, &walStatus, &db, &sameDB)
	if err == nil {
		return false, checkSlot(name, plugin, walStatus, db, sameDB)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return false, fmt.Errorf("look up slot: %w", err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", name)
	switch sqlstate(err) {
	case "":
		return err == nil, err
	case pgerrcode.DuplicateObject:
		return false, nil
	case pgerrcode.InsufficientPrivilege:
		return false, fmt.Errorf("%w to create slot %q: ALTER ROLE ... WITH REPLICATION, or create it as a superuser: "+
			"SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", ErrNoPrivilege, name, name)
	}
	return false, fmt.Errorf("create slot %q: %w", name, err)
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
		"or drop it yourself with SELECT pg_drop_replication_slot('%s') and backfill", ErrSlotInvalid, name, name)
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

// badDSN wraps a connection string that does not parse in ErrBadDSN, naming the forms that do.
func badDSN(err error) error {
	return fmt.Errorf("%w: %w; give a URL (postgres://user:password@host:5432/dbname) or key=value pairs "+
		"(host=... dbname=...)", ErrBadDSN, err)
}
