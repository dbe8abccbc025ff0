package inbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/rs/zerolog"
)

// Defaults for PruneOptions and Config fields left zero.
const (
	DefaultPruneBatchSize = 1000
	// DefaultPruneEvery is the time between two background prunes of Config.Retention.
	DefaultPruneEvery = time.Hour
	// DefaultRetryHorizon is the shortest retention Prune accepts unless told otherwise: the
	// relay, with its default settings (--max-attempts 0 at --retry-max 10m), retries an event
	// for about a day, and a delivery it did not see acknowledged (an answer lost, a crash) is
	// retried within that day; twice that leaves a margin.
	DefaultRetryHorizon = 48 * time.Hour
)

// PruneOptions say what Prune deletes and how.
type PruneOptions struct {
	// OlderThan is required: done rows received longer ago than this are deleted.
	OlderThan time.Duration
	// RetryHorizon is how long after a first delivery the sender may still deliver the same
	// event again. An OlderThan below it is refused: a pruned event that is delivered again is
	// applied again. If zero, the default is DefaultRetryHorizon (48 hours). Lower it only for
	// a sender known to give up sooner (say a relay with a small --max-attempts). It cannot
	// cover `outbox-relay replay`, which re-sends the events the relay still keeps on request:
	// keep OlderThan above the relay's own retention (`run --retention`, `prune --older-than`)
	// too, or accept that a replay re-applies what was pruned here.
	RetryHorizon time.Duration
	// Schema is that of inbox_events, as Config.Schema; if empty, search_path finds the table.
	Schema string
	// BatchSize is the most rows one DELETE removes; if zero, DefaultPruneBatchSize.
	BatchSize int
}

// PruneResult is what a prune did.
type PruneResult struct {
	// Cutoff is the database's now() minus OlderThan, taken once at the start.
	Cutoff time.Time
	// Deleted counts the rows deleted.
	Deleted int64
	// Batches counts the DELETE statements run, the last of which deleted fewer than a batch.
	Batches int
}

func (o PruneOptions) check() error {
	horizon := o.RetryHorizon
	if horizon == 0 {
		horizon = DefaultRetryHorizon
	}
	switch {
	case o.OlderThan <= 0:
		return fmt.Errorf("prune: OlderThan must be positive, not %s", o.OlderThan)
	case o.RetryHorizon < 0:
		return fmt.Errorf("prune: negative RetryHorizon %s", o.RetryHorizon)
	case o.OlderThan < horizon:
		return fmt.Errorf("prune: OlderThan %s is inside the sender's retry horizon (%s): an event it delivers again "+
			"after its row is pruned is applied again. Keep rows longer, or set RetryHorizon to your sender's real horizon",
			o.OlderThan, horizon)
	}
	return nil
}

// The statements of a prune. Each batch takes the oldest done rows through the partial index
// idx_inbox_done_received (received_at WHERE handler_status = 'done', created by the inbox's
// migration 2), resumes at the last received_at it deleted, skips rows locked by a delivery or
// a concurrent prune, and deletes through the primary key.
const (
	pruneCutoffSQL = `SELECT now() - make_interval(secs => $1::float8)`
	pruneBatchSQL  = `
WITH batch AS (
    DELETE FROM %[1]s WHERE id = ANY(ARRAY(
        SELECT id FROM %[1]s
        WHERE handler_status = 'done' AND received_at < $1::timestamptz
          AND received_at >= coalesce($3::timestamptz, '-infinity')
        ORDER BY received_at
        LIMIT $2::int
        FOR UPDATE SKIP LOCKED))
    RETURNING received_at)
SELECT count(*), max(received_at) FROM batch`
)

// Prune deletes the inbox_events rows marked done that were received longer ago than
// opts.OlderThan, in batches of opts.BatchSize, each its own short transaction, until a batch
// deletes fewer than a full one. It never deletes a row of another status (a consumer that
// records events before processing them keeps those). It returns what it deleted so far even
// when it fails.
//
// What pruning costs: the inbox recognises a duplicate by its row, so an event delivered again
// after its row is gone is applied again. opts.RetryHorizon guards the sender's retries; a
// replay (`outbox-relay replay`) of events older than the inbox's retention is not guarded.
//
// db is a *pgxpool.Pool or a *sql.DB of any PostgreSQL driver.
func Prune[P Pool](ctx context.Context, db P, opts PruneOptions) (PruneResult, error) {
	s, err := poolStore(db)
	if err != nil {
		return PruneResult{}, err
	}
	if err := opts.check(); err != nil {
		return PruneResult{}, fmt.Errorf("inbox: %w", err)
	}
	return prune(ctx, s, opts)
}

func prune(ctx context.Context, s store, opts PruneOptions) (PruneResult, error) {
	var res PruneResult
	q := newQueries(opts.Schema)
	batch := opts.BatchSize
	if batch <= 0 {
		batch = DefaultPruneBatchSize
	}
	if err := inTx(ctx, s, func(tx txn) error {
		return tx.queryRow(ctx, q.pruneCutoff, opts.OlderThan.Seconds()).Scan(&res.Cutoff)
	}); err != nil {
		return res, pruneError(err, opts.Schema)
	}
	var after any // nil, then the last received_at deleted
	for {
		var n int64
		var last sql.NullTime
		if err := inTx(ctx, s, func(tx txn) error {
			return tx.queryRow(ctx, q.pruneBatch, res.Cutoff, batch, after).Scan(&n, &last)
		}); err != nil {
			return res, pruneError(err, opts.Schema)
		}
		res.Batches++
		res.Deleted += n
		if n < int64(batch) {
			return res, nil
		}
		after = last.Time
	}
}

// inTx runs f in a transaction of its own and commits it.
func inTx(ctx context.Context, s store, f func(txn) error) error {
	tx, err := s.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.rollback(ctx) }()
	if err := f(tx); err != nil {
		return err
	}
	return tx.commit(ctx)
}

func pruneError(err error, schema string) error {
	if sqlState(err) == pgerrcode.UndefinedTable {
		return fmt.Errorf("inbox: prune: %s: create it with inboxmigrate.Migrate or `outbox-relay migrate --inbox-only`: %w",
			missingTable(schema), err)
	}
	return fmt.Errorf("inbox: prune: %w", err)
}

// retention is the goroutine of Config.Retention; stop ends it and waits.
type retention struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startRetention prunes at once, then every DefaultPruneEvery, until stop.
func startRetention(s store, opts PruneOptions, log zerolog.Logger) *retention {
	ctx, cancel := context.WithCancel(context.Background())
	r := &retention{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(DefaultPruneEvery)
		defer t.Stop()
		for {
			res, err := prune(ctx, s, opts)
			if ctx.Err() != nil {
				return
			}
			logPrune(log, res, err, opts.OlderThan)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return r
}

func (r *retention) stop() {
	r.cancel()
	<-r.done
}

func logPrune(log zerolog.Logger, res PruneResult, err error, olderThan time.Duration) {
	switch {
	case err != nil:
		log.Error().Err(err).Int64("deleted", res.Deleted).Msg("inbox: retention prune failed; retrying at the next interval")
	case res.Deleted > 0:
		log.Info().Int64("deleted", res.Deleted).Int("batches", res.Batches).Time("cutoff", res.Cutoff).
			Dur("retention", olderThan).Msg("inbox: pruned inbox_events")
	}
}

// errNilDB is what Migrate and Prune answer to a nil pool.
var errNilDB = errors.New("inbox: no database (a nil pool)")
