package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/outbox"
)

// aggregateType is the type of every aggregate the writers write.
const aggregateType = "order"

// event is one outbox row a writer wrote.
type event struct {
	ID        string
	Aggregate string // "type/id", as the receiver records it
	Seq       int    // per aggregate, from 1, over committed events
	// In an endpoints run (TORTURE_ENDPOINTS): the event's tenant ("" for none), event type and
	// aggregate type, which route it.
	Tenant, EventType, AggType string
}

// aggregate is one aggregate a writer writes: its type, id and tenant ("" for none).
type aggregate struct{ Type, ID, Tenant string }

func (a aggregate) key() string { return a.Type + "/" + a.ID }

// txRecord is one committed transaction.
type txRecord struct {
	Writer int
	Events []event
	// Before is pg_current_wal_insert_lsn() read inside the transaction just before COMMIT: a
	// lower bound of its commit record's LSN. 0 if it was not read.
	Before pglogrepl.LSN
	// After is pg_current_wal_lsn() read once COMMIT had returned: an upper bound of the end of
	// its commit record, since a synchronous commit returns only after the WAL is written up to
	// that end, and the write position never goes back.
	After pglogrepl.LSN
	// Settled means COMMIT failed with the connection and the rows were found afterwards.
	Settled bool
	// At, in an endpoints run, is clock_timestamp() of the transaction's first INSERT, which
	// the server evaluated once the insert held its lock on outbox_events: it places the
	// transaction's commit before or after each endpoint change (endpoints.go).
	At time.Time
}

// ledger is what the writers wrote, shared by them.
type ledger struct {
	events atomic.Int64 // committed events so far

	mu            sync.Mutex
	txs           []txRecord
	rolledBack    []string // ids written by transactions rolled back on purpose
	rolledBackTxs int
	aborted       []string // ids written by transactions a fault cut off before they committed
	abortedTxs    int
	settled       int // COMMIT outcomes unknown at first, found committed (or not) by look-up
}

func (l *ledger) commit(rec txRecord) {
	l.mu.Lock()
	l.txs = append(l.txs, rec)
	if rec.Settled {
		l.settled++
	}
	l.mu.Unlock()
	l.events.Add(int64(len(rec.Events)))
}

func (l *ledger) rollBack(evs []event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rolledBackTxs++
	for _, e := range evs {
		l.rolledBack = append(l.rolledBack, e.ID)
	}
}

func (l *ledger) abort(evs []event, settled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.abortedTxs++
	if settled {
		l.settled++
	}
	for _, e := range evs {
		l.aborted = append(l.aborted, e.ID)
	}
}

// outcome is how one attempt at a transaction ended.
type outcome int

const (
	committed  outcome = iota
	rolledBack         // on purpose
	aborted            // cut off by a fault before it committed: retry
)

// writer commits transactions on one connection, over the aggregates it alone writes.
type writer struct {
	idx     int
	dsn     string
	aggs    []aggregate
	seq     map[string]int // committed events per aggregate
	rng     *rand.Rand
	cfg     config
	rate    float64 // events per second this writer aims for
	ledger  *ledger
	conn    *pgx.Conn
	appName string
}

func newWriter(idx int, dsn string, cfg config, l *ledger) *writer {
	w := &writer{idx: idx, dsn: dsn, seq: map[string]int{}, cfg: cfg, ledger: l,
		rng:     rand.New(rand.NewPCG(cfg.Seed, uint64(idx)+1)),
		rate:    float64(cfg.Events) / cfg.Duration.Seconds() / float64(cfg.Writers),
		appName: "torture-writer-" + strconv.Itoa(idx)}
	for a := idx; a < cfg.Aggregates; a += cfg.Writers {
		w.aggs = append(w.aggs, aggregateOf(a, cfg))
	}
	return w
}

// run writes until load ends or the ledger holds enough events. Transactions run under ctx,
// so one that started when load ends still finishes and is accounted for. It returns an error
// only when ctx ends or a transaction was found half committed.
func (w *writer) run(load, ctx context.Context) error {
	defer w.drop()
	start, mine := time.Now(), 0
	for load.Err() == nil && w.ledger.events.Load() < int64(w.cfg.Events) {
		// Paced to reach the target at the end of the load phase; after an outage the writer
		// catches up as fast as the server lets it, which makes bursts.
		due := start.Add(time.Duration(float64(mine) / w.rate * float64(time.Second)))
		if !sleep(load, time.Until(due)) {
			break
		}
		n, err := w.transaction(ctx, 1+w.rng.IntN(w.cfg.MaxTxSize), w.rng.Float64() < w.cfg.Rollback)
		if err != nil {
			return err
		}
		mine += n
	}
	return nil
}

// transaction writes one transaction of size events, retrying it with new ids until it commits
// (or rolls back, if asked to), and returns the events committed.
func (w *writer) transaction(ctx context.Context, size int, rollback bool) (int, error) {
	aggs := make([]aggregate, size)
	for i := range aggs {
		aggs[i] = w.aggs[w.rng.IntN(len(w.aggs))]
	}
	backoff := 50 * time.Millisecond
	for {
		rec, out, err := w.attempt(ctx, aggs, rollback)
		if err != nil {
			return 0, err
		}
		switch out {
		case committed:
			for _, e := range rec.Events {
				w.seq[e.Aggregate]++
			}
			w.ledger.commit(rec)
			return len(rec.Events), nil
		case rolledBack:
			w.ledger.rollBack(rec.Events)
			return 0, nil
		}
		w.ledger.abort(rec.Events, rec.Settled)
		if !sleep(ctx, backoff) {
			return 0, ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

// attempt runs the transaction once. A connection lost before COMMIT was sent means it did not
// commit; a COMMIT that fails any other way is settled by looking the rows up.
func (w *writer) attempt(ctx context.Context, aggs []aggregate, rollback bool) (txRecord, outcome, error) {
	rec := txRecord{Writer: w.idx}
	conn, err := w.connection(ctx)
	if err != nil {
		return rec, aborted, err
	}
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := conn.Begin(actx)
	if err != nil {
		return rec, w.cutOff(), ctx.Err()
	}
	next := map[string]int{}
	for i, agg := range aggs {
		key := agg.key()
		next[key]++
		seq := w.seq[key] + next[key]
		var e event
		var err error
		if w.cfg.Endpoints {
			var at time.Time
			e, at, err = w.insertRouted(actx, tx, agg, seq)
			if i == 0 {
				rec.At = at
			}
		} else {
			var id uuid.UUID
			id, err = outbox.Enqueue(actx, tx, outbox.Event{AggregateType: agg.Type, AggregateID: agg.ID,
				EventType: aggregateType + ".changed", Payload: map[string]int{"seq": seq, "writer": w.idx}})
			e = event{ID: id.String(), Aggregate: key, Seq: seq}
		}
		if err != nil {
			return rec, w.cutOff(), ctx.Err()
		}
		rec.Events = append(rec.Events, e)
	}
	if rollback {
		if err := tx.Rollback(actx); err != nil {
			w.drop() // whatever failed, COMMIT was never sent
		}
		return rec, rolledBack, nil
	}
	if rec.Before, err = readLSN(actx, conn, "pg_current_wal_insert_lsn()"); err != nil {
		return rec, w.cutOff(), ctx.Err()
	}
	if err := tx.Commit(actx); err != nil {
		w.drop()
		if pgconn.SafeToRetry(err) {
			return rec, aborted, nil // nothing reached the server
		}
		// The server may have committed and died before answering (an immediate shutdown
		// answers with a notice and a closed connection), so even an error reply is not proof.
		return w.settle(ctx, rec)
	}
	rec.After, err = w.walLSN(ctx)
	return rec, committed, err
}

// cutOff drops the connection after a failure before COMMIT: the transaction did not commit.
func (w *writer) cutOff() outcome {
	w.drop()
	return aborted
}

// walLSN reads pg_current_wal_lsn(), reconnecting if need be: read later, it is still an upper
// bound of what committed before.
func (w *writer) walLSN(ctx context.Context) (pglogrepl.LSN, error) {
	for {
		conn, err := w.connection(ctx)
		if err != nil {
			return 0, err
		}
		lsn, err := readLSN(ctx, conn, "pg_current_wal_lsn()")
		if err == nil {
			return lsn, nil
		}
		w.drop()
		if !sleep(ctx, 100*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// settle finds out whether a transaction whose COMMIT failed committed: once no backend of
// this writer is left (so none can still commit it), its rows exist iff it committed.
func (w *writer) settle(ctx context.Context, rec txRecord) (txRecord, outcome, error) {
	rec.Settled = true
	ids := make([]string, len(rec.Events))
	for i, e := range rec.Events {
		ids[i] = e.ID
	}
	for {
		conn, err := w.connection(ctx)
		if err != nil {
			return rec, aborted, err
		}
		n, err := w.lookUp(ctx, conn, ids)
		if err == nil {
			switch n {
			case len(ids):
				rec.After, err = w.walLSN(ctx)
				return rec, committed, err
			case 0:
				return rec, aborted, nil
			}
			return rec, aborted, fmt.Errorf("writer %d: %d of the %d rows of one transaction exist after a failed COMMIT: "+
				"atomicity is broken", w.idx, n, len(ids))
		}
		w.drop()
		if !sleep(ctx, 100*time.Millisecond) {
			return rec, aborted, ctx.Err()
		}
	}
}

// lookUp ends any older backend of this writer, waits for it to go, then counts the rows.
func (w *writer) lookUp(ctx context.Context, conn *pgx.Conn, ids []string) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = $1 AND pid <> pg_backend_pid()`, w.appName).Scan(&left)
		if err != nil {
			return 0, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, errors.New("an old backend of this writer does not go away")
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
	var n int
	err := conn.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE id = ANY($1::uuid[])`, ids).Scan(&n)
	return n, err
}

// connection returns the writer's connection, connecting (and retrying while the server is
// away) if it has none.
func (w *writer) connection(ctx context.Context) (*pgx.Conn, error) {
	if w.conn != nil && !w.conn.IsClosed() {
		return w.conn, nil
	}
	cfg, err := pgx.ParseConfig(w.dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["application_name"] = w.appName
	cfg.ConnectTimeout = 5 * time.Second
	backoff := 50 * time.Millisecond
	for {
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err == nil {
			w.conn = conn
			return conn, nil
		}
		if !sleep(ctx, backoff) {
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, time.Second)
	}
}

func (w *writer) drop() {
	if w.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = w.conn.Close(ctx)
		cancel()
		w.conn = nil
	}
}

// readLSN runs SELECT fn and parses the LSN it returns.
func readLSN(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, fn string) (pglogrepl.LSN, error) {
	var s string
	if err := q.QueryRow(ctx, "SELECT "+fn+"::text").Scan(&s); err != nil {
		return 0, err
	}
	return pglogrepl.ParseLSN(s)
}

// sleep waits d, or less if ctx ends first; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
