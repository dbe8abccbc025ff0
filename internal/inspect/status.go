package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schemacheck"
)

// DB is what the queries need. *pgx.Conn and *pgxpool.Pool satisfy it.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ErrNoSchema is wrapped by the error Status returns when a table or column the relay needs is
// missing, or the schema is older than this binary (schemacheck.ErrNoSchema).
var ErrNoSchema = schemacheck.ErrNoSchema

// statuses are the values of outbox_events.status; reports always carry all four.
var statuses = []string{"pending", "done", "failed", "parked"}

// Report is the state of one slot and the outbox table, as read from the database. The JSON
// names are a stable interface for scripts (docs/operations/delivery.md, status). Values the server
// reports as NULL are nil pointers and encode as null.
type Report struct {
	// CheckedAt is the database's clock when the report was taken.
	CheckedAt time.Time `json:"checked_at"`
	// Schema is the PostgreSQL schema of the relay's tables the report read.
	Schema string `json:"schema"`
	// Server is the PostgreSQL server the report was read from.
	Server Server `json:"server"`
	Slot   Slot   `json:"slot"`
	// Rows counts outbox_events rows by status; pending, done, failed and parked are always
	// present. Statuses are marked about 200 ms after delivery and are advisory.
	Rows map[string]int64 `json:"rows"`
	// OldestPending is the pending row created first, or nil when none is pending.
	OldestPending *Pending `json:"oldest_pending"`
	// BeforeSlot counts pending rows older than the slot; nil when the relay has no record of
	// creating it.
	BeforeSlot *BeforeSlot `json:"before_slot"`
	// ParkedAggregates counts every parked aggregate; Parked lists the oldest of them.
	ParkedAggregates int64    `json:"parked_aggregates"`
	Parked           []Parked `json:"parked"`
	// Pipelines lists the pipelines with a control row (paused or resumed at least once); a
	// pipeline without one is not paused.
	Control []PipelineControl `json:"control"`
	// Replays lists the `replay --since` requests not complete: requested, running or
	// abandoned.
	Replays []Replay `json:"replays"`
}

// Slot is the row of pg_replication_slots for the relay's slot, with positions in bytes.
type Slot struct {
	Name   string `json:"name"`
	Exists bool   `json:"exists"`
	// Database and Plugin identify the slot's owner; the relay needs a pgoutput slot in the
	// database it reads (SameDatabase).
	Database     string `json:"database"`
	SameDatabase bool   `json:"same_database"`
	Plugin       string `json:"plugin"`
	// Active is true while some process streams from the slot; ActivePID is its backend.
	Active            bool    `json:"active"`
	ActivePID         *int32  `json:"active_pid"`
	ConfirmedFlushLSN *string `json:"confirmed_flush_lsn"`
	RestartLSN        *string `json:"restart_lsn"`
	// WALStatus is reserved, extended, unreserved or lost (PostgreSQL 13+).
	WALStatus *string `json:"wal_status"`
	// SafeWALSize is how many more bytes of WAL can be written before the slot is in danger of
	// invalidation; nil when max_slot_wal_keep_size is unlimited (-1).
	SafeWALSize *int64 `json:"safe_wal_size_bytes"`
	// RetainedWALBytes is the current WAL position minus restart_lsn: what the slot keeps on disk.
	RetainedWALBytes *int64 `json:"retained_wal_bytes"`
	// LagBytes is the current WAL position minus confirmed_flush_lsn: WAL not yet confirmed as
	// delivered (including WAL of other tables, which is confirmed once the relay is idle).
	LagBytes *int64 `json:"lag_bytes"`

	// The fields below exist only on newer servers; they are always in the JSON, null where the
	// server lacks the column (docs/guides/postgresql-versions.md).

	// Conflicting is true when a slot was invalidated by a recovery conflict (PostgreSQL 16+).
	Conflicting *bool `json:"conflicting"`
	// InvalidationReason says why the slot was invalidated (wal_removed, rows_removed,
	// wal_level_insufficient, idle_timeout on 18), null while it is usable (PostgreSQL 17+).
	InvalidationReason *string `json:"invalidation_reason"`
	// InactiveSince is when the slot was last released by its consumer, null while one streams
	// from it (PostgreSQL 17+).
	InactiveSince *time.Time `json:"inactive_since"`
	// Failover is true when the slot is synchronised to standbys that have
	// sync_replication_slots on (PostgreSQL 17+; see docs/guides/failover.md).
	Failover *bool `json:"failover"`
	// Synced is true on a standby for a slot copied from the primary by slot synchronisation;
	// only such a slot can be used after promotion. On a primary it is false (PostgreSQL 17+).
	Synced *bool `json:"synced"`
	// Temporary is true for a synced slot that the standby has not yet made persistent (it
	// waits until the primary's slot moves past the standby's catalog horizon).
	Temporary bool `json:"temporary"`
}

// Server is the version and role of the server a report was read from.
type Server struct {
	// Version is server_version, e.g. "17.10"; VersionNum is server_version_num, e.g. 170010.
	Version    string `json:"version"`
	VersionNum int    `json:"version_num"`
	// InRecovery is true on a standby (pg_is_in_recovery()); positions and lag are then measured
	// against the last replayed WAL position.
	InRecovery bool `json:"in_recovery"`
	// SynchronizedStandbySlots is the primary's synchronized_standby_slots (PostgreSQL 17+,
	// null before): the standbys' physical slots that failover slots wait for.
	SynchronizedStandbySlots *string `json:"synchronized_standby_slots"`
	// IdleReplicationSlotTimeout is idle_replication_slot_timeout (PostgreSQL 18+, null before;
	// "0" is off): an inactive slot older than this is invalidated at a checkpoint.
	IdleReplicationSlotTimeout *string `json:"idle_replication_slot_timeout"`
	// ReplicationSlots counts the server's slots (every database and kind) against
	// MaxReplicationSlots (max_replication_slots); WALSenders its walsender processes against
	// MaxWALSenders (max_wal_senders). At either limit a missing slot cannot be created, and at
	// the second an inactive one cannot be streamed.
	ReplicationSlots    int `json:"replication_slots"`
	MaxReplicationSlots int `json:"max_replication_slots"`
	WALSenders          int `json:"wal_senders"`
	MaxWALSenders       int `json:"max_wal_senders"`
}

// Pending is the oldest row still marked pending.
type Pending struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	// AgeSeconds is CheckedAt minus CreatedAt.
	AgeSeconds float64 `json:"age_seconds"`
}

// Parked is an aggregate held back behind a dead-lettered event.
type Parked struct {
	AggregateType string `json:"aggregate_type"`
	AggregateID   string `json:"aggregate_id"`
	// FirstEventID is the dead-lettered event; Reason is why it failed.
	FirstEventID string    `json:"first_event_id"`
	Reason       string    `json:"reason"`
	ParkedAt     time.Time `json:"parked_at"`
	// ParkedEvents counts the later events of the aggregate held with status 'parked'.
	ParkedEvents int64 `json:"parked_events"`
}

// Status reads the report for slot from the relay's tables in schema s (empty: the
// connection's current_schema()), listing at most topN parked aggregates, oldest first. A
// missing slot is not an error (see Healthy); a schema that does not fit is (see CheckSchema).
func Status(ctx context.Context, db DB, s, slot string, topN int) (Report, error) {
	r := Report{Parked: []Parked{}, Control: []PipelineControl{}, Replays: []Replay{}}
	var err error
	if r.CheckedAt, r.Schema, err = checkSchema(ctx, db, s); err != nil {
		return r, err
	}
	db = inSchema(db, r.Schema)
	if r.Server, err = readServer(ctx, db); err != nil {
		return r, err
	}
	if r.Slot, err = readSlot(ctx, db, r.Server, slot); err != nil {
		return r, err
	}
	if r.Rows, err = countRows(ctx, db); err != nil {
		return r, err
	}
	if r.OldestPending, err = oldestPending(ctx, db); err != nil {
		return r, err
	}
	if r.BeforeSlot, err = readBeforeSlot(ctx, db, r.Schema, slot); err != nil {
		return r, err
	}
	if r.ParkedAggregates, r.Parked, err = readParked(ctx, db, topN); err != nil {
		return r, err
	}
	if r.Control, err = readControl(ctx, db); err != nil {
		return r, err
	}
	r.Replays, err = readReplays(ctx, db, slot)
	return r, err
}

// Healthy reports whether the slot can feed a running relay: it exists in this database as a
// pgoutput slot, was not invalidated, a process streams from it, and no row older than the
// slot is pending. The reason says what is wrong and what to do, or is "ok".
func (r Report) Healthy() (bool, string) {
	s := r.Slot
	sv := r.Server
	switch {
	case !s.Exists && sv.MaxReplicationSlots > 0 && sv.ReplicationSlots >= sv.MaxReplicationSlots:
		return false, fmt.Sprintf("slot %q does not exist and cannot be created: all replication slots are in use "+
			"(%d of max_replication_slots = %d): drop a slot nothing uses (SELECT slot_name FROM pg_replication_slots "+
			"WHERE NOT active), or raise max_replication_slots (and max_wal_senders, %d of %d in use, with it) and restart "+
			"PostgreSQL; a running relay creates the slot on its own once it can", s.Name, sv.ReplicationSlots,
			sv.MaxReplicationSlots, sv.WALSenders, sv.MaxWALSenders)
	case !s.Exists:
		return false, fmt.Sprintf("slot %q does not exist: start `outbox-relay run` (it creates the slot), "+
			"or pass the --slot name the relay uses", s.Name)
	case !s.SameDatabase || s.Plugin != "pgoutput":
		kind := s.Plugin
		if kind == "" {
			kind = "physical"
		}
		return false, fmt.Sprintf("slot %q is a %s slot of database %q, not a pgoutput slot of this one: "+
			"pass the --slot name this database's relay uses", s.Name, kind, s.Database)
	case s.InvalidationReason != nil || (s.Conflicting != nil && *s.Conflicting):
		reason := "a recovery conflict"
		if s.InvalidationReason != nil {
			reason = *s.InvalidationReason
		}
		return false, fmt.Sprintf("slot %q was invalidated (%s): it can no longer be streamed; "+
			"drop it with SELECT pg_drop_replication_slot('%s'), restart the relay and re-deliver the pending rows",
			s.Name, reason, s.Name)
	case s.WALStatus != nil && *s.WALStatus == "lost":
		return false, fmt.Sprintf("slot %q was invalidated (wal_status lost): the server removed WAL it needed; "+
			"drop it with SELECT pg_drop_replication_slot('%s'), restart the relay and re-deliver the pending rows",
			s.Name, s.Name)
	case !s.Active && sv.MaxWALSenders > 0 && sv.WALSenders >= sv.MaxWALSenders:
		return false, fmt.Sprintf("slot %q is inactive and cannot be streamed: all WAL senders are in use (%d of "+
			"max_wal_senders = %d): stop a replication client nothing needs (SELECT pid, application_name FROM "+
			"pg_stat_replication), or raise max_wal_senders and restart PostgreSQL; a running relay connects on its own "+
			"once it can", s.Name, sv.WALSenders, sv.MaxWALSenders)
	case !s.Active:
		return false, fmt.Sprintf("slot %q is inactive: no process is streaming from it; is `outbox-relay run` up?", s.Name)
	}
	if why := r.unhealthyBeforeSlot(); why != "" {
		return false, why
	}
	return true, "ok"
}

// Warnings lists conditions that do not fail the probe but need attention soon.
func (r Report) Warnings() []string {
	w := []string{}
	if s := r.Slot.WALStatus; s != nil && *s == "unreserved" {
		w = append(w, fmt.Sprintf("slot %q retains more WAL than max_slot_wal_keep_size (wal_status unreserved): "+
			"it will be invalidated at the next checkpoint unless the relay catches up", r.Slot.Name))
	}
	if s := r.Slot; s.Failover != nil && *s.Failover && !r.Server.InRecovery &&
		(r.Server.SynchronizedStandbySlots == nil || *r.Server.SynchronizedStandbySlots == "") {
		w = append(w, fmt.Sprintf("slot %q is a failover slot but synchronized_standby_slots is empty: a standby "+
			"may be promoted with a synced slot that is behind what the relay confirmed (docs/guides/failover.md)", s.Name))
	}
	if n := r.Rows["failed"]; n > 0 {
		w = append(w, fmt.Sprintf("%d dead-lettered event%s (status failed)", n, plural(n)))
	}
	if n := r.ParkedAggregates; n > 0 {
		w = append(w, fmt.Sprintf("%d parked aggregate%s held back until `outbox-relay replay`", n, plural(n)))
	}
	w = append(w, r.pausedWarnings()...)
	return append(w, r.replayWarnings()...)
}

func plural(n int64) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// checkSchema fails unless the schema is the one this binary needs (schemacheck.Check), saying
// what to do, and returns the database clock and the schema it checked.
func checkSchema(ctx context.Context, db DB, name string) (time.Time, string, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, "", fmt.Errorf("read the database clock: %w", err)
	}
	s, err := schemacheck.Check(ctx, db, name)
	return now, s, err
}

func readServer(ctx context.Context, db DB) (Server, error) {
	var sv Server
	err := db.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int,
		pg_is_in_recovery(), current_setting('synchronized_standby_slots', true),
		current_setting('idle_replication_slot_timeout', true),
		(SELECT count(*) FROM pg_replication_slots), current_setting('max_replication_slots')::int,
		(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'walsender'), current_setting('max_wal_senders')::int`).
		Scan(&sv.Version, &sv.VersionNum, &sv.InRecovery, &sv.SynchronizedStandbySlots, &sv.IdleReplicationSlotTimeout,
			&sv.ReplicationSlots, &sv.MaxReplicationSlots, &sv.WALSenders, &sv.MaxWALSenders)
	if err != nil {
		return sv, fmt.Errorf("read server version: %w", err)
	}
	return sv, nil
}

// slotSQL reads the slot's row, selecting the columns newer servers added only where they exist
// (NULL elsewhere). On a standby the current position is the last replayed one.
func slotSQL(sv Server) string {
	cur := "pg_current_wal_lsn()"
	if sv.InRecovery {
		cur = "pg_last_wal_replay_lsn()"
	}
	v16, v17 := "NULL::bool", "NULL::text, NULL::timestamptz, NULL::bool, NULL::bool"
	if sv.VersionNum >= 160000 {
		v16 = "conflicting"
	}
	if sv.VersionNum >= 170000 {
		v17 = "invalidation_reason, inactive_since, failover, synced"
	}
	return `
SELECT coalesce(database, ''), coalesce(database = current_database(), false), coalesce(plugin, ''),
       active, active_pid, confirmed_flush_lsn::text, restart_lsn::text, wal_status, safe_wal_size,
       pg_wal_lsn_diff(` + cur + `, restart_lsn)::bigint,
       pg_wal_lsn_diff(` + cur + `, confirmed_flush_lsn)::bigint,
       temporary, ` + v16 + `, ` + v17 + `
FROM pg_replication_slots WHERE slot_name = $1`
}

func readSlot(ctx context.Context, db DB, sv Server, name string) (Slot, error) {
	s := Slot{Name: name}
	err := db.QueryRow(ctx, slotSQL(sv), name).Scan(&s.Database, &s.SameDatabase, &s.Plugin, &s.Active, &s.ActivePID,
		&s.ConfirmedFlushLSN, &s.RestartLSN, &s.WALStatus, &s.SafeWALSize, &s.RetainedWALBytes, &s.LagBytes,
		&s.Temporary, &s.Conflicting, &s.InvalidationReason, &s.InactiveSince, &s.Failover, &s.Synced)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return s, nil
	case err != nil:
		return s, fmt.Errorf("read slot %q: %w", name, err)
	}
	s.Exists = true
	return s, nil
}

// countRows counts exactly, which scans the whole table: fine for a command, not for a poller.
func countRows(ctx context.Context, db DB) (map[string]int64, error) {
	counts := map[string]int64{}
	for _, s := range statuses {
		counts[s] = 0
	}
	rows, err := db.Query(ctx, `SELECT status, count(*) FROM {outbox_events} GROUP BY status`)
	if err != nil {
		return nil, fmt.Errorf("count outbox rows: %w", err)
	}
	var status string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error { counts[status] = n; return nil })
	if err != nil {
		return nil, fmt.Errorf("count outbox rows: %w", err)
	}
	return counts, nil
}

func oldestPending(ctx context.Context, db DB) (*Pending, error) {
	var p Pending
	err := db.QueryRow(ctx, `
		SELECT id::text, created_at, extract(epoch FROM now() - created_at)::float8
		FROM {outbox_events} WHERE status = 'pending' ORDER BY created_at LIMIT 1`).Scan(&p.ID, &p.CreatedAt, &p.AgeSeconds)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("find oldest pending row: %w", err)
	}
	return &p, nil
}

// parkedSQL lists parked aggregates oldest first, each with the number of its events held.
// The count uses the status index, and only parked rows are visited.
const parkedSQL = `
SELECT p.aggregate_type, p.aggregate_id, p.first_event_id::text, p.reason, p.parked_at,
       (SELECT count(*) FROM {outbox_events} e
        WHERE e.status = 'parked' AND e.aggregate_type = p.aggregate_type AND e.aggregate_id = p.aggregate_id)
FROM {outbox_parked_aggregates} p
ORDER BY p.parked_at, p.aggregate_type, p.aggregate_id
LIMIT $1`

// readParked returns the number of parked aggregates and the topN oldest.
func readParked(ctx context.Context, db DB, topN int) (int64, []Parked, error) {
	list := []Parked{}
	var total int64
	if err := db.QueryRow(ctx, `SELECT count(*) FROM {outbox_parked_aggregates}`).Scan(&total); err != nil {
		return 0, list, fmt.Errorf("count parked aggregates: %w", err)
	}
	if topN <= 0 || total == 0 {
		return total, list, nil
	}
	rows, err := db.Query(ctx, parkedSQL, topN)
	if err != nil {
		return total, list, fmt.Errorf("list parked aggregates: %w", err)
	}
	var p Parked
	_, err = pgx.ForEachRow(rows, []any{&p.AggregateType, &p.AggregateID, &p.FirstEventID, &p.Reason, &p.ParkedAt,
		&p.ParkedEvents}, func() error { list = append(list, p); return nil })
	if err != nil {
		return total, list, fmt.Errorf("list parked aggregates: %w", err)
	}
	return total, list, nil
}
