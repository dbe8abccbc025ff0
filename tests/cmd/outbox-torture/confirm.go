package main

import (
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// The confirm invariant: the slot's confirmed position never passes a transaction before every
// event of it was delivered. If it did, a relay crash at that moment would lose the
// transaction, since the server resends only what follows the confirmed position (it skips a
// transaction whose commit record starts before it).
//
// The sampler reads confirmed_flush_lsn every 100 ms and, once the query has returned, takes
// the receiver's mark: the length of its delivery log. A violation is a sample whose position
// is above After(tx) while some event of tx has its first delivery at or past the mark.
//
// Why that is sound (no false alarm): After(tx), pg_current_wal_lsn() read once COMMIT
// returned, is at or above the end of tx's commit record, and a position above it is above
// the commit record's start, so the server would skip tx. A correct relay confirms past tx
// only after a 2xx for each of its events; the receiver appends a delivery to its log before
// it answers 2xx; the position was read before the query returned, and the mark is taken after.
// So every event of a transaction the sampled position passed is in the log below the mark. A
// position sampled before tx committed cannot be above After(tx) either: a correct relay
// confirms only positions the server has sent it, and until tx commits those are below its
// commit end.
//
// A crash restart of PostgreSQL can move the slot back to its last persisted position;
// that is allowed (it only causes resends), so only the forward direction is checked.
//
// The cross-check uses the commit LSN each delivery carries in X-Event-Sequence instead of
// After(tx): a position above it with an event of tx undelivered is just as much a violation,
// and it is tighter, since After(tx) can be well past the commit (other writers' WAL). It
// relies on the relay's own header, hence both, and the header itself is checked against
// Before(tx) <= commit LSN < After(tx).

// sample is one reading of the slot.
type sample struct {
	LSN  pglogrepl.LSN // confirmed_flush_lsn
	Mark int           // receiver log length right after the reading returned
	At   time.Time
	// An endpoints run's sample also reads the endpoints' backlogs, in a statement after the
	// slot's: Backlog holds the (endpoint, event) pairs found there (ids of backlogIndex,
	// sorted), and BacklogMark is the receiver's mark taken after that statement returned.
	// A pair the slot had passed at the reading was either delivered before it or in the
	// backlog then (a relay writes an entry before it settles the pair, and deletes it only
	// after the delivery); so by BacklogMark it is delivered below the mark or still in the
	// backlog. epcheck.go holds the relay to that.
	Backlog     []int32
	BacklogMark int
}

// backlogIndex numbers the (endpoint, event) pairs seen in backlogs, so that the samples keep
// small ids instead of a set of strings each.
type backlogIndex struct {
	ids map[string]int32
}

func (b *backlogIndex) id(key string) int32 {
	n, ok := b.ids[key]
	if !ok {
		n = int32(len(b.ids))
		b.ids[key] = n
	}
	return n
}

// has reports whether sample s found the pair key in a backlog.
func (b *backlogIndex) has(s sample, key string) bool {
	n, ok := b.ids[key]
	if !ok {
		return false
	}
	_, found := slices.BinarySearch(s.Backlog, n)
	return found
}

// readBacklog reads every backlog's (endpoint, event) pairs into ids, sorted.
func readBacklog(ctx context.Context, conn *pgx.Conn, b *backlogIndex) ([]int32, error) {
	rows, err := conn.Query(ctx, `SELECT endpoint_id, event_id::text FROM outbox_endpoint_backlog`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int32
	for rows.Next() {
		var ep, id string
		if err := rows.Scan(&ep, &id); err != nil {
			return nil, err
		}
		out = append(out, b.id(pairKey(ep, id)))
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// sampleSlot reads the slot's confirmed position every interval until ctx ends, reconnecting
// while the server is away, and returns the readings. With bl (an endpoints run) each reading
// is followed by one of the backlogs; a reading whose backlog read fails is dropped.
func sampleSlot(ctx context.Context, dsn, slot string, recv *receiver, every time.Duration, bl *backlogIndex) []sample {
	var out []sample
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
	}()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
		if conn == nil || conn.IsClosed() {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := pgx.Connect(cctx, dsn)
			cancel()
			if err != nil {
				continue
			}
			conn = c
		}
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		var lsn *string
		err := conn.QueryRow(qctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
			slot).Scan(&lsn)
		cancel()
		mark := recv.mark()
		if err != nil || lsn == nil {
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				_ = conn.Close(context.Background())
				conn = nil
			}
			continue
		}
		if mark < 0 {
			continue // a broker run whose bridge could not catch up: no sound mark
		}
		pos, err := pglogrepl.ParseLSN(*lsn)
		if err != nil {
			continue
		}
		s := sample{LSN: pos, Mark: mark, At: time.Now(), BacklogMark: mark}
		if bl != nil {
			qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			s.Backlog, err = readBacklog(qctx, conn, bl)
			cancel()
			s.BacklogMark = recv.mark()
			if err != nil {
				_ = conn.Close(context.Background())
				conn = nil
				continue
			}
		}
		out = append(out, s)
	}
}

// confirmViolation is a transaction the slot passed before it was delivered.
type confirmViolation struct {
	Tx     int           // index in the ledger
	Sample int           // the first sample that passed it
	Bound  pglogrepl.LSN // After(tx), or the commit LSN for the cross-check
	Pair   string        // an endpoints run's pair that held tx (pairKey), for the description
}

// confirmViolations returns, per transaction, the first sample whose position is above
// bound(tx) while tx was not fully delivered below the sample's mark. done[i] is the log index
// at which tx i became fully delivered (the largest first-delivery index of its events), or
// math.MaxInt if it never did; bound[i] of 0 means unknown, and that transaction is skipped.
// after[i] is After(tx): a sample of a slot created again (an epoch) is not held against a
// transaction that committed before that slot existed, which the backfill carries instead.
func confirmViolations(samples []sample, bound, after []pglogrepl.LSN, done []int, epochs []slotEpoch) []confirmViolation {
	var out []confirmViolation
	for i := range bound {
		if bound[i] == 0 {
			continue
		}
		for j, s := range samples {
			if after[i] != 0 && after[i] <= epochFor(epochs, s) {
				continue
			}
			if s.LSN > bound[i] && done[i] >= s.Mark {
				out = append(out, confirmViolation{Tx: i, Sample: j, Bound: bound[i]})
				break
			}
		}
	}
	return out
}

// fullyDelivered returns, per transaction, the log index at which its last event was first
// delivered, or math.MaxInt if some event never was.
func fullyDelivered(txs []txRecord, first map[string]int) []int {
	done := make([]int, len(txs))
	for i, tx := range txs {
		for _, e := range tx.Events {
			idx, ok := first[e.ID]
			if !ok {
				idx = math.MaxInt
			}
			done[i] = max(done[i], idx)
		}
	}
	return done
}
