package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Defaults for PruneOptions and Retention fields left zero.
const (
	DefaultPruneBatchSize = 1000
	DefaultRetentionEvery = time.Hour
)

// PruneDB is what Prune needs. *pgxpool.Pool and *pgx.Conn satisfy it. Each batch is one
// statement, and so its own short transaction: pass a pool or a connection, not a pgx.Tx.
type PruneDB interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// PruneOptions say what Prune deletes and how.
type PruneOptions struct {
	// OlderThan is required: rows marked done longer ago than this are deleted.
	OlderThan time.Duration
	// BatchSize is the most rows one DELETE removes; if zero, DefaultPruneBatchSize.
	BatchSize int
	// Pause is slept between batches, to spread the load; if zero, none.
	Pause time.Duration
	// DryRun counts the rows Prune would delete and deletes nothing.
	DryRun bool
	// Schema is the PostgreSQL schema of the outbox tables. Empty: as the connection's
	// search_path resolves them.
	Schema string
}

// PruneResult is what a prune did.
type PruneResult struct {
	// Cutoff is the database's now() minus OlderThan, taken once at the start.
	Cutoff time.Time
	// Deleted counts the rows deleted, or with DryRun the rows that would be.
	Deleted int64
	// Batches counts the DELETE statements run, the last of which deleted fewer than a batch.
	Batches int
}

// The predicate uses the (status, available_at) index: every row the relay delivers was made
// available (inserted) before it was processed, so available_at < cutoff holds for all rows
// with processed_at < cutoff, and bounding it turns a scan of every done row per batch into a
// range scan of the old ones (measured on 2M done rows: 1.1 s and an 80 MB sort per batch,
// against 40 ms). Each batch resumes at the last available_at it deleted, so rows it skips
// (locked, or processed late) are not rescanned. The ids are collected into an array so that
// the DELETE always finds them through the primary key.
const (
	// pruneKeepSQL keeps a row that another pipeline dead-lettered or parked (in its own
	// state, outbox_pipeline_events): `outbox-relay replay` for that pipeline needs the row
	// though the status owner delivered it.
	pruneKeepSQL = `
          AND NOT EXISTS (SELECT 1 FROM {outbox_pipeline_events} pe
                          WHERE pe.event_id = outbox_events.id AND pe.status IN ('failed', 'parked'))`
	pruneCutoffSQL = `SELECT now() - make_interval(secs => $1)`
	pruneCountSQL  = `
SELECT count(*) FROM {outbox_events} WHERE status = 'done' AND available_at < $1 AND processed_at < $1` + pruneKeepSQL
	pruneBatchSQL = `
WITH batch AS (
    DELETE FROM {outbox_events} WHERE id = ANY(ARRAY(
        SELECT id FROM {outbox_events}
        WHERE status = 'done' AND available_at < $1 AND available_at >= coalesce($3::timestamptz, '-infinity')
          AND processed_at < $1` + pruneKeepSQL + `
        ORDER BY available_at
        LIMIT $2
        FOR UPDATE SKIP LOCKED))
    RETURNING available_at)
SELECT count(*), max(available_at) FROM batch`
)

// Prune deletes outbox rows with status 'done' whose processed_at is older than
// opts.OlderThan, in batches of opts.BatchSize, each in its own transaction, until a batch
// deletes fewer than a full batch. It never touches pending, failed or parked rows, nor a row
// that another pipeline dead-lettered or parked (a replay of that pipeline still needs it). Rows locked
// by another transaction are skipped, so concurrent prunes share the work. It returns what it
// deleted so far even when it fails.
//
// Deletes are not published to the relay: its publication publishes inserts only.
//
// A row whose available_at was set later than its processed_at (the relay never does this) is
// kept until available_at, too, is older than the cutoff.
func Prune(ctx context.Context, db PruneDB, opts PruneOptions) (PruneResult, error) {
	var res PruneResult
	if opts.OlderThan <= 0 {
		return res, errors.New("outbox: prune: OlderThan must be positive")
	}
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultPruneBatchSize
	}
	if err := db.QueryRow(ctx, pruneCutoffSQL, opts.OlderThan.Seconds()).Scan(&res.Cutoff); err != nil {
		return res, pruneError(opts.Schema, err)
	}
	if opts.DryRun {
		err := db.QueryRow(ctx, schema.SQL(opts.Schema, pruneCountSQL), res.Cutoff).Scan(&res.Deleted)
		return res, pruneError(opts.Schema, err)
	}
	batchSQL := schema.SQL(opts.Schema, pruneBatchSQL)
	var after *time.Time
	for {
		var n int64
		var last *time.Time
		if err := db.QueryRow(ctx, batchSQL, res.Cutoff, batch, after).Scan(&n, &last); err != nil {
			return res, pruneError(opts.Schema, err)
		}
		res.Batches++
		res.Deleted += n
		if n < int64(batch) {
			return res, nil
		}
		after = last
		if err := sleep(ctx, opts.Pause); err != nil {
			return res, err
		}
	}
}

// Retention prunes on an interval, for a process that runs for a long time (`outbox-relay run
// --retention`).
type Retention struct {
	// PruneOptions are passed to every Prune; OlderThan is required.
	PruneOptions
	// Every is the time between prunes; if zero, DefaultRetentionEvery.
	Every time.Duration
	// OnPrune, if set, receives the outcome of every prune, e.g. to log it. A failed prune does
	// not stop Run; the next one retries.
	OnPrune func(PruneResult, error)
}

// Run prunes at once and then every r.Every until ctx is done, and returns nil then. It
// returns an error only for invalid options.
func (r Retention) Run(ctx context.Context, db PruneDB) error {
	if r.OlderThan <= 0 {
		return errors.New("outbox: retention: OlderThan must be positive")
	}
	every := r.Every
	if every <= 0 {
		every = DefaultRetentionEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		res, err := Prune(ctx, db, r.PruneOptions)
		if ctx.Err() != nil {
			return nil
		}
		if r.OnPrune != nil {
			r.OnPrune(res, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func pruneError(s string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable && s != "":
		return fmt.Errorf("outbox: prune: table outbox_events does not exist in schema %s: run `outbox-relay migrate` "+
			"for that schema, or name the schema the relay's tables are in: %w", schema.Quote(s), err)
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
		return fmt.Errorf("outbox: prune: table outbox_events is not on the connection's search_path: run "+
			"`outbox-relay migrate`, or name the schema the relay's tables are in (--schema, PruneOptions.Schema): %w", err)
	}
	return fmt.Errorf("outbox: prune: %w", err)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
