package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// The replay --since row: a table of 10 × BENCH_EVENTS delivered rows (1M by default), of
// which `outbox-relay replay --since` re-sends the newer half, as a consumer that lost the last
// days of a retention would ask. It measures the request (the CLI, which counts the range),
// the time from the request to the first and to the last re-sent event, the relay's peak RSS,
// and how the relay read the table: sequential scans and the rows they read, index scans and
// the rows they fetched (pg_stat_user_tables), per re-sent event.

// sinceScale is the table size of the since row in BENCH_EVENTS.
const sinceScale = 10

// sinceChunk is the rows per INSERT when writing the since row's table.
const sinceChunk = 50_000

// pgstatIdle is how long an idle backend may keep its table statistics before flushing them
// (PostgreSQL's PGSTAT_IDLE_INTERVAL, 10 s, and a margin).
const pgstatIdle = 11 * time.Second

func sinceRow(events int) string {
	return fmt.Sprintf("Replay --since, %s-row table", thousands(float64(events)))
}

// sinceResult is one replay --since of the newer half of a table of delivered rows.
type sinceResult struct {
	Table, Events, Aggregates int
	Request                   time.Duration // the replay command, counts included, to its exit
	First, Total              time.Duration // request → first and → last re-sent event
	Rate                      float64
	Relay                     usage
	Load                      load
	Stats                     receiverStats
	RequestReads, Reads       tableReads // by the request (the replay command), by the relay's replay
}

// tableReads are outbox_events' access counters from pg_stat_user_tables.
type tableReads struct {
	SeqScans, SeqRows, IdxScans, IdxRows int64
}

func (a tableReads) minus(b tableReads) tableReads {
	return tableReads{a.SeqScans - b.SeqScans, a.SeqRows - b.SeqRows, a.IdxScans - b.IdxScans, a.IdxRows - b.IdxRows}
}

func (db *benchDB) tableReads(ctx context.Context) (tableReads, error) {
	var r tableReads
	err := db.conn.QueryRow(ctx, `SELECT seq_scan, seq_tup_read, coalesce(idx_scan, 0), coalesce(idx_tup_fetch, 0)
		FROM pg_stat_user_tables WHERE relname = 'outbox_events'`).Scan(&r.SeqScans, &r.SeqRows, &r.IdxScans, &r.IdxRows)
	return r, err
}

// sinceTableSQL writes rows lo..hi as delivered long ago: created 1 ms apart from $5 on, with
// a stream position (X-Event-Sequence) rising with g, as the relay records it when it marks a
// row done; the payload's seq rises per aggregate, so the receiver checks the replay's order.
const sinceTableSQL = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload, status, created_at, available_at,
                           processed_at, event_sequence)
SELECT 'order', (g % $3)::text, 'order.created', jsonb_build_object('seq', g, 'pad', repeat('x', $4)), 'done',
       $5::timestamptz + g * interval '1 millisecond', $5::timestamptz + g * interval '1 millisecond',
       $5::timestamptz + g * interval '1 millisecond' + interval '1 second',
       upper(lpad(to_hex(g::bigint * 256), 16, '0')) || '-00000000'
FROM generate_series($1::int, $2::int) g`

// writeDelivered writes the since row's table and vacuums it, as autovacuum would have, and
// returns the created_at of the row that starts the newer half.
func (db *benchDB) writeDelivered(ctx context.Context, rows, aggregates int) (time.Time, error) {
	var base time.Time
	if err := db.conn.QueryRow(ctx, `SELECT date_trunc('second', now()) - make_interval(secs => $1::float8 / 1000 + 3600)`,
		rows).Scan(&base); err != nil {
		return base, err
	}
	for lo := 1; lo <= rows; lo += sinceChunk {
		hi := min(lo+sinceChunk-1, rows)
		if _, err := db.conn.Exec(ctx, sinceTableSQL, lo, hi, aggregates, payloadPad, base); err != nil {
			return base, fmt.Errorf("write delivered rows %d..%d: %w", lo, hi, err)
		}
	}
	if _, err := db.conn.Exec(ctx, "VACUUM (ANALYZE) outbox_events"); err != nil {
		return base, err
	}
	return base.Add(time.Duration(rows/2+1) * time.Millisecond), nil
}

// since runs the replay --since row.
func (e *env) since(ctx context.Context) (sinceResult, error) {
	res := sinceResult{Table: sinceScale * e.cfg.Events, Aggregates: 1000}
	res.Events = res.Table - res.Table/2
	db, err := newBenchDB(ctx, e.cluster, "since")
	if err != nil {
		return res, err
	}
	defer db.drop()
	e.logf("since: writing %d delivered rows", res.Table)
	from, err := db.writeDelivered(ctx, res.Table, res.Aggregates)
	if err != nil {
		return res, err
	}
	r, err := e.startRelay(ctx, db) // creates the slot; nothing is pending, so nothing to backfill
	if err != nil {
		return res, err
	}
	defer r.Stop(relayStopGrace)
	if err := e.recv.Reset(ctx); err != nil {
		return res, err
	}
	sleepCtx(ctx, pgstatIdle) // the relay's start-up reads are counted before the replay's
	reads, err := db.tableReads(ctx)
	if err != nil {
		return res, err
	}
	before, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	e.logf("since: replay --since %s (%d of %d rows)", from.Format(time.RFC3339Nano), res.Events, res.Table)
	replay := func(args ...string) ([]byte, error) {
		return exec.CommandContext(ctx, e.relayBin, append([]string{"replay", "--dsn", db.dsn, "--since",
			from.Format(time.RFC3339Nano)}, args...)...).CombinedOutput()
	}
	// A dry run first, with nothing else reading: it counts what the request counts, so its
	// reads are the request's, and the rest are the replay's.
	if out, err := replay("--dry-run"); err != nil {
		return res, fmt.Errorf("replay --since --dry-run: %w\n%s", err, out)
	}
	sleepCtx(ctx, time.Second) // its backend flushes its statistics as it exits
	dryReads, err := db.tableReads(ctx)
	if err != nil {
		return res, err
	}
	res.RequestReads = dryReads.minus(reads)
	start := time.Now()
	out, err := replay()
	if err != nil {
		return res, fmt.Errorf("replay --since: %w\n%s", err, out)
	}
	requested := time.Now()
	res.Request = requested.Sub(start)
	if !strings.Contains(string(out), fmt.Sprintf(": %d events", res.Events)) {
		return res, fmt.Errorf("replay --since did not request %d events:\n%s", res.Events, out)
	}
	if res.Stats, err = e.recv.waitUnique(ctx, res.Events, r.child, stallLimit); err != nil {
		return res, err
	}
	if res.Relay, err = r.usage(); err != nil {
		return res, err
	}
	after, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	if err := stopRelay(r); err != nil { // its backends flush their statistics as they exit
		return res, err
	}
	sleepCtx(ctx, time.Second)
	readsAfter, err := db.tableReads(ctx)
	if err != nil {
		return res, err
	}
	res.Reads = readsAfter.minus(dryReads).minus(res.RequestReads)
	res.Load = loadBetween(before, after)
	res.First = time.Unix(0, res.Stats.FirstNanos).Sub(requested)
	res.Total = time.Unix(0, res.Stats.LastNanos).Sub(requested)
	res.Rate = receiverRate(res.Stats)
	return res, checkStats(res.Stats, true)
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func (r *results) sinceCells(s *sinceResult) []string {
	per := func(n int64) string { return fmt.Sprintf("%.2f", float64(n)/float64(max(s.Events, 1))) }
	notes := []string{
		fmt.Sprintf("newest half of a %s-row table of delivered rows", thousands(float64(s.Table))),
		fmt.Sprintf("request %s; first event %s, all %s after it", s.Request.Round(time.Millisecond),
			s.First.Round(time.Millisecond), s.Total.Round(time.Millisecond)),
		fmt.Sprintf("the request read the table in %d sequential scans (%s rows per event), the replay in %d (%s rows "+
			"per event) and %d index scans (%s rows per event)", s.RequestReads.SeqScans, per(s.RequestReads.SeqRows),
			s.Reads.SeqScans, per(s.Reads.SeqRows), s.Reads.IdxScans, per(s.Reads.IdxRows)),
	}
	if s.Stats.Duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicates", s.Stats.Duplicates))
	}
	notes = appendOther(notes, s.Load.OtherCPUs(s.Relay.CPU))
	return []string{thousands(float64(s.Events)), thousands(float64(s.Aggregates)), thousands(s.Rate) + " events/s",
		dash, per100k(s.Relay.CPU, s.Events), mb(s.Relay.PeakRSS), per100k(s.Load.Receiver, s.Events),
		pgCell(s.Load.PG, s.Events), strings.Join(notes, "; ")}
}
