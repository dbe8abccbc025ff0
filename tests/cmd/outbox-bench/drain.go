package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgcluster"
	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

const (
	// benchSecret signs every row's webhooks; an endpoint's secret (x-signature) must be at least
	// 16 characters (migration 13).
	benchSecret = "bench-secret-0123456789"
	// stallLimit fails a row whose receiver count stops moving this long.
	stallLimit = 60 * time.Second
	// settle lets the relay's status marker flush its last batch before CPU is read, so the
	// PostgreSQL backend's share of marking rows done is counted.
	settle = 300 * time.Millisecond
	// relayStopGrace bounds the relay's shutdown after SIGTERM.
	relayStopGrace = 20 * time.Second
)

// env is what every row shares: one cluster, one relay binary, one receiver process.
type env struct {
	cfg      config
	cluster  *pgtest.Cluster
	relayBin string
	recv     *receiverProc
	progress io.Writer
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.progress, "bench: "+format+"\n", args...)
}

// drainResult is one backlog drained by the relay.
type drainResult struct {
	Events, Aggregates int
	Rate               float64       // new events per second at the receiver, first to last
	Startup            time.Duration // relay process start → first delivery
	Relay              usage
	Load               load // from just before the relay started to the last delivery (+ settle)
	Stats              receiverStats
	Raw                *rawResult // pg_recvlogical on the same backlog, if asked
	Requests           []request  // the rows as requests, if asked (for the ceiling)
}

type drainOpts struct {
	raw    bool     // also decode the backlog with pg_recvlogical from a second slot
	keep   bool     // return the rows as requests
	args   []string // extra relay flags
	second bool     // run a second pipeline (secondSlot) whose filter passes nothing, and wait for it too
	shards int      // if positive: run the bench pipeline in this many shards (shards.go)
}

// drain writes a backlog with the relay stopped (its slot already exists), then starts the
// relay and measures until the receiver has every event.
func (e *env) drain(ctx context.Context, prefix string, events, aggregates int, o drainOpts) (drainResult, error) {
	res := drainResult{Events: events, Aggregates: aggregates}
	slots := []string{relaySlot}
	if o.raw {
		slots = append(slots, rawSlot)
	}
	if o.second {
		slots = append(slots, secondSlot)
	}
	if o.shards > 0 {
		slots = nil // createShards makes them
	}
	db, err := newBenchDB(ctx, e.cluster, prefix, slots...)
	if err != nil {
		return res, err
	}
	defer db.drop()
	if o.shards > 0 {
		if err := db.createShards(ctx, o.shards); err != nil {
			return res, err
		}
	}
	e.logf("%s: writing %d events over %d aggregates", prefix, events, aggregates)
	endLSN, err := db.writeBacklog(ctx, events, aggregates)
	if err != nil {
		return res, err
	}
	if o.raw {
		e.logf("%s: pg_recvlogical up to %s", prefix, endLSN)
		raw, err := e.recvlogical(ctx, db, endLSN, events)
		if err != nil {
			return res, err
		}
		res.Raw = &raw
	}
	if o.keep {
		if res.Requests, err = db.loadRequests(ctx); err != nil {
			return res, fmt.Errorf("read back the backlog: %w", err)
		}
	}
	e.logf("%s: relay draining", prefix)
	// One relay per row: a plain one started beside a configured one would hold the slot.
	start := func() (*relayProc, error) {
		switch {
		case o.second:
			return e.startTwoPipelines(ctx, db)
		case o.shards > 0:
			return e.startShards(ctx, db, o.shards)
		}
		return e.startRelay(ctx, db, o.args...)
	}
	var done func() error
	if o.second {
		done = func() error { return db.waitConfirmed(ctx, secondSlot, endLSN, stallLimit) }
	}
	if err := e.measure(ctx, &res, events, start, done); err != nil {
		return res, err
	}
	return res, checkStats(res.Stats, true)
}

// measure starts a relay with start and measures until the receiver has want distinct
// deliveries and done (if not nil) returns, then stops the relay, which must exit cleanly. It
// fills res's Rate, Startup, Relay, Load and Stats.
func (e *env) measure(ctx context.Context, res *drainResult, want int, start func() (*relayProc, error), done func() error) error {
	if err := e.recv.Reset(ctx); err != nil {
		return err
	}
	before, err := e.cpuSnapshot()
	if err != nil {
		return err
	}
	r, err := start()
	if err != nil {
		return err
	}
	defer r.Stop(relayStopGrace)
	if res.Stats, err = e.recv.waitUnique(ctx, want, r.child, stallLimit); err != nil {
		return err
	}
	if done != nil {
		if err := done(); err != nil {
			return err
		}
	}
	time.Sleep(settle)
	if res.Relay, err = r.usage(); err != nil {
		return err
	}
	after, err := e.cpuSnapshot()
	if err != nil {
		return err
	}
	res.Load = loadBetween(before, after)
	res.Rate = receiverRate(res.Stats)
	res.Startup = time.Unix(0, res.Stats.FirstNanos).Sub(r.started)
	return stopRelay(r)
}

func (e *env) startRelay(ctx context.Context, db *benchDB, args ...string) (*relayProc, error) {
	return startRelay(ctx, e.relayBin, relayTarget{DSN: db.dsn, Slot: relaySlot, Publication: benchPublication,
		URL: e.recv.hookURL(), Secret: benchSecret, Args: args})
}

// startTwoPipelines runs the relay with --config: the bench pipeline, and a second one on
// secondSlot whose filter passes no row.
func (e *env) startTwoPipelines(ctx context.Context, db *benchDB) (*relayProc, error) {
	dir, err := os.MkdirTemp("", "outbox-bench-config-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir) // the relay reads it at start, before startRelay returns
	path := filepath.Join(dir, "pipelines.yaml")
	conf := fmt.Sprintf(`pipelines:
  - name: bench
    slot: %[1]s
    publication: %[2]s
    webhook: {url: "%[5]s", secret: "%[6]s"}
    max_in_flight: %[7]d
  - name: second
    slot: %[3]s
    publication: %[4]s
    filter: "%[8]s"
    webhook: {url: "%[5]s", secret: "%[6]s"}
    max_in_flight: %[7]d
`, relaySlot, benchPublication, secondSlot, secondPublication, e.recv.hookURL(), benchSecret, concurrency, secondFilter)
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	return startRelay(ctx, e.relayBin, relayTarget{DSN: db.dsn, Config: path})
}

// waitConfirmed waits until slot has confirmed lsn, failing after limit.
func (db *benchDB) waitConfirmed(ctx context.Context, slot, lsn string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var done bool
		err := db.conn.QueryRow(ctx, `SELECT coalesce(confirmed_flush_lsn >= $2::pg_lsn, false)
			FROM pg_replication_slots WHERE slot_name = $1`, slot, lsn).Scan(&done)
		if err != nil {
			return fmt.Errorf("read slot %s: %w", slot, err)
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("slot %s did not confirm %s within %s", slot, lsn, limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// stopRelay sends SIGTERM and requires a clean exit.
func stopRelay(r *relayProc) error {
	if err := r.Stop(relayStopGrace); err != nil {
		return err
	}
	if r.err != nil {
		return fmt.Errorf("relay exited with %v after SIGTERM; its stderr ends:\n%s", r.err, r.stderr)
	}
	return nil
}

// checkStats fails a row whose deliveries were not all good.
func checkStats(s receiverStats, ordered bool) error {
	switch {
	case s.BadSignatures > 0:
		return fmt.Errorf("receiver rejected %d requests with bad signatures", s.BadSignatures)
	case ordered && s.OrderViolations > 0:
		return fmt.Errorf("receiver saw %d per-aggregate order violations", s.OrderViolations)
	}
	return nil
}

// receiverRate is new events per second from the first to the last accepted.
func receiverRate(s receiverStats) float64 {
	window := time.Duration(s.LastNanos - s.FirstNanos)
	if s.Unique < 2 || window <= 0 {
		return 0
	}
	return float64(s.Unique-1) / window.Seconds()
}

// rawResult is pg_recvlogical decoding a backlog to /dev/null.
type rawResult struct {
	Rows int
	Wall time.Duration // process start to exit, connecting included
	Rate float64
	CPU  time.Duration // pg_recvlogical's own
	Load load          // PostgreSQL's share is mostly the walsender, which has exited by then
}

func (e *env) recvlogical(ctx context.Context, db *benchDB, endLSN string, rows int) (rawResult, error) {
	res := rawResult{Rows: rows}
	before, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	cmd := exec.CommandContext(ctx, recvlogicalPath(e.cluster.BinDir), "-d", db.dsn,
		"--slot", rawSlot, "--start", "--endpos", endLSN, "--no-loop", "-f", "/dev/null",
		"-o", "proto_version=1", "-o", "publication_names="+benchPublication)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	res.Wall = time.Since(start)
	if err != nil {
		return res, fmt.Errorf("pg_recvlogical: %w\n%s", err, out)
	}
	after, err := e.settledSnapshot(ctx, before)
	if err != nil {
		return res, err
	}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		res.CPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	res.Load = loadBetween(before, after)
	res.Rate = float64(rows) / res.Wall.Seconds()
	return res, nil
}

// recvlogicalPath finds pg_recvlogical (see pgcluster.ClientTool).
func recvlogicalPath(binDir string) string { return pgcluster.ClientTool(binDir, "pg_recvlogical") }
