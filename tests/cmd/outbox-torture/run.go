package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/migrations"
)

const (
	secret     = "torture-secret"
	slotName   = "torture"
	sampleTick = 100 * time.Millisecond
	// catchUpLimit is how long the slot may take, once everything is delivered, to confirm the
	// last delivered transaction.
	catchUpLimit = 30 * time.Second
	// readRetryLimit is how long the final reads wait for a server that a fault restarted.
	readRetryLimit = 30 * time.Second
)

// result is one run's outcome.
type result struct {
	Seed   uint64
	Config config
	LogDir string // relay and server logs; kept when the run fails
	// Evidence is the file with each violation's interleaving (evidence.go); "" if none.
	Evidence string

	Load, Drain, Total time.Duration
	Drained            bool // every committed event delivered within the drain timeout

	CommittedTxs, RolledBackEvents, RolledBackTxs, AbortedEvents, AbortedTxs, Settled int

	Faults        faultStats
	Requests      int64
	Faulted       [modeCount]int64 // requests answered by each receiver mode
	BadSignatures int64
	InboxRefusals int64 // non-2xx answers from the inbox handler (database away, client gone)
	RelaysStarted int

	Verdict      verdict
	DupSources   []string      // the faults most duplicates followed
	InboxDups    uint64        // deliveries the inbox absorbed as already applied
	CaughtUp     time.Duration // everything delivered → slot confirmed the last commit
	CaughtUpOK   bool
	Crashes      []string // relay exits we did not cause
	Shutdown     []string // relays that did not exit 0 on SIGTERM
	WriterErrors []string
	Second       *secondResult // the second pipeline's check, with TORTURE_PIPELINES=2
	// An endpoints run's checks and endpoint changes (TORTURE_ENDPOINTS=1); its Verdict stays
	// empty.
	Endpoints *epVerdict
	Changes   changeStats
	// Pending counts the rows of outbox_events an endpoints run left `pending` once drained
	// (-1: could not read them) that no relay's death explains; PendingRows describes the oldest
	// few (pendingListed).
	Pending     int
	PendingRows []pendingRow
	// PendingAfterKill counts the rows left pending that a relay's death explains (their
	// done-marks dropped: advisory marks, pending.go); they are not violations.
	PendingAfterKill int
	UnknownRequests  int64 // requests to a path that names no endpoint
	// Blackouts started (endpoints.go), requests answered 503 by them, and how often the
	// relays' logs say an endpoint spilled to its backlog and caught up with it again.
	Blackouts       int
	BlackedOut      int64
	GoneAnswers     int64 // requests answered 410 Gone by the 410 fault (gone.go)
	Spills, Rejoins int
}

// OK reports whether every invariant held and every fault healed.
func (r *result) OK() bool {
	return r.Verdict.invariantsOK() && r.Drained && r.CaughtUpOK && r.BadSignatures == 0 &&
		len(r.Faults.Failures)+len(r.Crashes)+len(r.Shutdown)+len(r.WriterErrors) == 0 &&
		(r.Second == nil || r.Second.ok()) && (r.Endpoints == nil || r.Endpoints.ok() && len(r.Changes.Failures) == 0 && r.Pending == 0)
}

// harness is the state of one torture run.
type harness struct {
	cfg      config
	logMu    sync.Mutex
	progress io.Writer
	start    time.Time
	cluster  *pgtest.Cluster
	outDSN   string
	proxy    *relaytest.Proxy // between the relays and PostgreSQL, for the partition fault
	recv     *receiver
	recv2    *relaytest.Receiver // the second pipeline's, with TORTURE_PIPELINES=2
	fleet    *fleet
	ledger   ledger
	faults   faultStats
	epochs   []slotEpoch   // slots created again by the slot-drop fault
	broker   broker        // a broker run's sink (broker.go), else nil
	eps      *epManager    // an endpoints run's manager of outbox_endpoints, else nil
	backlog  *backlogIndex // an endpoints run's pairs seen in backlogs by the samples, else nil

	drainedAt time.Time
}

func (t *harness) logf(format string, args ...any) {
	t.logMu.Lock()
	defer t.logMu.Unlock()
	fmt.Fprintf(t.progress, "[%6.1fs] %s\n", time.Since(t.start).Seconds(), fmt.Sprintf(format, args...))
}

// torture runs everything and returns the result. An error means the run could not be carried
// out (no PostgreSQL, no relay build, interrupted); failed invariants are in the result.
func torture(ctx context.Context, cfg config, progress io.Writer) (res *result, err error) {
	t := &harness{cfg: cfg, progress: progress, start: time.Now()}
	t.logf("seed %d (TORTURE_SEED=%d reproduces the workload and fault schedule); %d events within %s, %d writers",
		cfg.Seed, cfg.Seed, cfg.Events, cfg.Duration, cfg.Writers)
	logDir, err := os.MkdirTemp("", "outbox-torture-")
	if err != nil {
		return nil, err
	}
	keep := false
	defer func() {
		if !keep {
			_ = os.RemoveAll(logDir)
		}
	}()
	bin := cfg.Relay
	if bin == "" {
		binDir, err := os.MkdirTemp("", "outbox-torture-bin-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(binDir)
		t.logf("building the relay")
		if bin, err = buildRelay(ctx, binDir); err != nil {
			return nil, err
		}
	}
	t.logf("starting PostgreSQL")
	if t.cluster, err = pgtest.Start(ctx, pgtest.Options{}); err != nil {
		return nil, err
	}
	defer func() {
		if keep {
			_ = copyFile(filepath.Join(t.cluster.Dir, "server.log"), filepath.Join(logDir, "postgres.log"))
		}
		_ = t.cluster.Close()
	}()
	if err := t.producerDB(ctx); err != nil {
		return nil, err
	}
	var inPool *pgxpool.Pool
	if cfg.Endpoints {
		t.recv, err = startEndpointReceiver()
	} else {
		if inPool, err = t.consumerDB(ctx); err != nil {
			return nil, err
		}
		defer inPool.Close()
		t.recv, err = startReceiver(inPool, secret)
	}
	if err != nil {
		return nil, err
	}
	defer t.recv.Close()
	if t.proxy, err = relaytest.NewProxyFor(t.outDSN); err != nil {
		return nil, err
	}
	defer t.proxy.Close()
	relayDSN, err := t.proxy.DSN(t.outDSN)
	if err != nil {
		return nil, err
	}
	args := relayArgs(relayDSN, t.recv.URL, secret, slotName)
	if cfg.Sink != "" && cfg.Pipelines == 2 {
		return nil, fmt.Errorf("TORTURE_SINK and TORTURE_PIPELINES=2 together are not supported: run them one at a time")
	}
	if cfg.Sink != "" {
		t.logf("starting the %s broker and its bridge to the receiver", cfg.Sink)
		br, stopBroker, err := t.startBroker(ctx)
		if err != nil {
			return nil, err
		}
		defer stopBroker()
		t.broker = br
		args = brokerArgs(args, br.relayArgs())
	}
	if cfg.Endpoints {
		args = endpointArgs(relayDSN, slotName, cfg.SpillAfter)
		t.eps = newEpManager(cfg, t.outDSN, bin, t.recv, t.logf)
		defer t.eps.drop()
		t.logf("endpoints: creating %d over %d tenants before the first relay starts", cfg.EndpointCount, cfg.Tenants)
		if err := t.eps.setup(ctx); err != nil {
			return nil, err
		}
	}
	if cfg.Batch > 1 {
		args = append(args, "--batch-max-events", strconv.Itoa(cfg.Batch), "--batch-linger", "2ms")
	}
	if cfg.Pipelines == 2 {
		t.recv2 = relaytest.NewReceiver(secret)
		defer t.recv2.Close()
		if args, err = configArgs(logDir, relayDSN, t.recv.URL, t.recv2.URL); err != nil {
			return nil, err
		}
		t.logf("two pipelines: the second (filter %s) on slot %s", secondFilter, secondSlot)
	}
	t.fleet = newFleet(bin, logDir, args)
	defer t.fleet.killAll()
	if cfg.Endpoints {
		pids := t.fleet.pids
		t.recv.relayPIDs.Store(&pids)
	}

	res, err = t.execute(ctx, inPool)
	if res != nil {
		res.LogDir = logDir
	}
	keep = err != nil && !errors.Is(err, context.Canceled) || res != nil && (!res.OK() || cfg.KeepLogs)
	if keep {
		t.logf("relay and server logs kept in %s", logDir)
		if res != nil && res.Endpoints != nil {
			t.dumpEndpoints(logDir, res)
			if p := t.writeEvidence(logDir, res); p != "" {
				res.Evidence = p
				t.logf("the interleaving evidence of each violation is in %s", p)
			}
		}
	}
	return res, err
}

// dumpEndpoints writes an endpoints run's every failure and the endpoints' timeline into dir,
// for analysis beside the relays' logs.
func (t *harness) dumpEndpoints(dir string, res *result) {
	tl, _ := t.eps.snapshot()
	var b strings.Builder
	v := res.Endpoints
	for _, l := range []struct {
		name  string
		items []string
	}{{"lost", v.Lost}, {"outside rule 4", v.Outside}, {"while paused", v.WhilePaused}, {"order", v.OrderViolations},
		{"confirm", v.ConfirmViolations}, {"confirm by commit LSN", v.ConfirmSeqViolations}, {"sequence", v.SequenceErrors},
		{"unknown endpoint", v.UnknownEndpoint}, {"ordering (clock method against the WAL)", v.OrderingErrors}} {
		fmt.Fprintf(&b, "## %s (%d)\n", l.name, len(l.items))
		for _, it := range l.items {
			fmt.Fprintf(&b, "- %s\n", it)
		}
	}
	ids := make([]string, 0, len(tl))
	for id := range tl {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	b.WriteString("## timeline\n")
	for _, id := range ids {
		for _, ver := range tl[id] {
			fmt.Fprintf(&b, "%s %s %s state=%s tenant=%q event_types=%v aggregate_types=%v exists=%v commit=[%s,%s) lo=%s\n", id,
				ver.At.Format(stamp), ver.Op, ver.State, ver.Tenant, ver.EventTypes, ver.AggTypes, ver.Exists, ver.Before, ver.After, ver.Lo)
		}
	}
	// Every delivery, in the receiver's order, to follow an order or confirm failure's pair
	// through the relays' logs.
	b.WriteString("## deliveries (receiver time, endpoint, event, aggregate, seq, X-Event-Sequence, attempt, relay process; 0: unknown)\n")
	for _, d := range t.recv.deliveries() {
		fmt.Fprintf(&b, "%s %s %s %s %d %s %d %d\n", d.At.Format(stamp), d.Endpoint, d.ID, d.Aggregate, d.Seq, d.Sequence, d.Attempt, d.Relay)
	}
	if err := os.WriteFile(filepath.Join(dir, "endpoints.txt"), []byte(b.String()), 0o644); err == nil {
		t.logf("the endpoints run's failures and timeline are in %s", filepath.Join(dir, "endpoints.txt"))
	}
}

// producerDB creates and migrates the producer's database, where the outbox and the slot live.
func (t *harness) producerDB(ctx context.Context) error {
	name, err := t.cluster.CreateDatabase(ctx, "torture_outbox")
	if err != nil {
		return err
	}
	t.outDSN = t.cluster.DSN(name)
	if _, err := migrations.Up(ctx, t.outDSN); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	return nil
}

// consumerDB creates the consumer's database: the migrations (for inbox_events) and applied.
func (t *harness) consumerDB(ctx context.Context) (*pgxpool.Pool, error) {
	name, err := t.cluster.CreateDatabase(ctx, "torture_inbox")
	if err != nil {
		return nil, err
	}
	dsn := t.cluster.DSN(name)
	if _, err := migrations.Up(ctx, dsn); err != nil {
		return nil, fmt.Errorf("migrate %s: %w", name, err)
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE applied (event_id uuid PRIMARY KEY, n int NOT NULL)`); err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// execute runs the load with faults, drains, stops the relays and checks.
func (t *harness) execute(ctx context.Context, inPool *pgxpool.Pool) (*result, error) {
	res := &result{Seed: t.cfg.Seed, Config: t.cfg}
	// The slot must exist before the first event is written, or that event is not in it.
	if _, err := t.fleet.start(); err != nil {
		return nil, err
	}
	if _, err := t.fleet.waitLeader(ctx, 60*time.Second); err != nil {
		return nil, fmt.Errorf("first relay: %w; its log ends:\n%s", err, t.fleetLogTail())
	}
	bg, stopBG := context.WithCancel(ctx)
	var samples []sample
	var wg sync.WaitGroup
	wg.Add(3)
	if t.eps != nil {
		t.backlog = &backlogIndex{ids: map[string]int32{}}
	}
	go func() { defer wg.Done(); samples = sampleSlot(bg, t.outDSN, slotName, t.recv, sampleTick, t.backlog) }()
	go func() { defer wg.Done(); t.supervise(bg) }()
	go func() { defer wg.Done(); t.status(bg) }()
	defer func() { stopBG(); wg.Wait() }()

	t.load(ctx, res)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	res.Drained = t.drain(ctx, res)
	if res.Drained {
		res.CaughtUp, res.CaughtUpOK = t.catchUp(ctx)
		if t.eps != nil {
			n, rows := t.waitSettled(ctx)
			afterKill, violations := t.sortPending(rows)
			res.Pending, res.PendingAfterKill, res.PendingRows = n, len(afterKill), violations[:min(len(violations), pendingListed)]
			if n > len(rows) { // past pendingMax: unsorted, violations
				res.Pending = n - len(afterKill)
			} else if n >= 0 {
				res.Pending = len(violations)
			}
			t.logPendingAfterKill(afterKill)
		}
	}
	if t.recv2 != nil {
		res.Second = t.checkSecond(ctx)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	stopBG()
	wg.Wait()
	res.Shutdown = t.fleet.stop(15 * time.Second)
	res.Crashes = t.fleet.crashList()
	res.RelaysStarted = t.fleet.started()

	if t.eps != nil {
		t.checkEndpoints(res, samples)
	} else {
		rec, err := t.collect(ctx, inPool, samples)
		if err != nil {
			return nil, err
		}
		res.Verdict = check(rec)
		res.DupSources = blame(t.faults.Log, rec.Deliveries, 3)
	}
	t.fill(res)
	res.Total = time.Since(t.start)
	return res, nil
}

// load runs the writers and the fault schedule until the writers are done.
func (t *harness) load(ctx context.Context, res *result) {
	loadCtx, stopLoad := context.WithTimeout(ctx, t.cfg.Duration)
	defer stopLoad()
	start := time.Now()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < t.cfg.Writers; i++ {
		w := newWriter(i, t.outDSN, t.cfg, &t.ledger)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := w.run(loadCtx, ctx); err != nil && ctx.Err() == nil {
				mu.Lock()
				res.WriterErrors = append(res.WriterErrors, err.Error())
				mu.Unlock()
			}
		}()
	}
	faultsDone := make(chan struct{})
	go func() { defer close(faultsDone); t.schedule(loadCtx, ctx) }()
	changesDone, blackoutsDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(changesDone)
		if t.eps != nil {
			t.eps.run(loadCtx, ctx)
		}
	}()
	go func() {
		defer close(blackoutsDone)
		if t.eps != nil {
			res.Blackouts = t.eps.blackouts(loadCtx)
		}
	}()
	gonesDone := make(chan struct{})
	go func() {
		defer close(gonesDone)
		if t.eps != nil {
			t.eps.gones(loadCtx, ctx)
		}
	}()
	wg.Wait()
	stopLoad()
	<-faultsDone
	<-changesDone
	<-blackoutsDone
	<-gonesDone
	t.recv.heal()
	if t.eps != nil {
		t.eps.finish(ctx)
	}
	res.Load = time.Since(start)
	t.logf("load done: %d events committed in %s", t.ledger.events.Load(), res.Load.Round(time.Millisecond))
}

// schedule injects faults from the plan until load ends; a fault in progress finishes under
// ctx.
func (t *harness) schedule(load, ctx context.Context) {
	p := newPlan(t.cfg.Seed, t.cfg.GapMin, t.cfg.GapMax)
	if t.cfg.Endpoints {
		p.withoutKinds(endpointsSkip...)
	}
	for n := 1; ; n++ {
		f := p.next()
		if !sleep(load, f.Gap) {
			return
		}
		t.logf("fault %d: %s", n, f)
		t.inject(ctx, f)
	}
}

// supervise keeps at least one relay running, and notes any that exits on its own.
func (t *harness) supervise(ctx context.Context) {
	for sleep(ctx, 250*time.Millisecond) {
		before := len(t.fleet.crashList())
		if t.fleet.reap() == 0 {
			if _, err := t.fleet.start(); err != nil {
				t.logf("supervisor: %v", err)
			}
		}
		if crashes := t.fleet.crashList(); len(crashes) > before {
			t.logf("a relay exited on its own:\n%s", crashes[len(crashes)-1])
		}
	}
}

// status prints progress every 5 seconds.
func (t *harness) status(ctx context.Context) {
	for sleep(ctx, 5*time.Second) {
		t.logf("committed %d events; receiver %d answered 2xx, %d requests; relays running %d",
			t.ledger.events.Load(), t.recv.recorded(), t.recv.requests.Load(), len(t.fleet.alive()))
	}
}

// drain waits until every committed event is delivered, or the drain timeout passes.
func (t *harness) drain(ctx context.Context, res *result) bool {
	start := time.Now()
	defer func() { res.Drain = time.Since(start) }()
	t.ledger.mu.Lock()
	var ids []string
	if t.eps != nil {
		tl, _ := t.eps.snapshot()
		ids = requiredPairs(t.ledger.txs, t.recv.deliveries(), tl) // (event, endpoint) pairs
	} else {
		for _, tx := range t.ledger.txs {
			for _, e := range tx.Events {
				ids = append(ids, e.ID)
			}
		}
	}
	t.ledger.mu.Unlock()
	deadline := time.Now().Add(t.cfg.Drain)
	for {
		missing := t.recv.missing(ids)
		if missing == 0 {
			t.drainedAt = time.Now()
			t.logf("all %d committed events (or required pairs) delivered", len(ids))
			return true
		}
		if time.Now().After(deadline) {
			t.logf("drain timeout: %d of %d committed events (or required pairs) still undelivered after %s", missing, len(ids), t.cfg.Drain)
			return false
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return false
		}
	}
}

// catchUp waits until the slot confirms past the last delivered commit: a relay that delivers
// but never confirms would make the server keep WAL forever.
func (t *harness) catchUp(ctx context.Context) (time.Duration, bool) {
	var target pglogrepl.LSN
	for _, d := range t.recv.deliveries() {
		if lsn, _, err := parseSequence(d.Sequence); err == nil {
			target = max(target, lsn)
		}
	}
	start := time.Now()
	for time.Since(start) < catchUpLimit {
		if lsn, err := confirmedLSN(ctx, t.outDSN, slotName); err == nil && lsn > target {
			t.logf("slot confirmed %s, past the last commit %s", lsn, target)
			return time.Since(t.drainedAt), true
		}
		if !sleep(ctx, sampleTick) {
			break
		}
	}
	t.logf("the slot did not confirm past the last delivered commit %s within %s", target, catchUpLimit)
	return time.Since(t.drainedAt), false
}

// collect gathers what the checks need: the ledger, the receiver's log and the consumer's
// tables. The schedule's last fault may have restarted the server moments before, leaving the
// pool's idle connections dead; the reads are retried while the server comes back.
func (t *harness) collect(ctx context.Context, inPool *pgxpool.Pool, samples []sample) (record, error) {
	t.ledger.mu.Lock()
	rec := record{Txs: t.ledger.txs, RolledBack: t.ledger.rolledBack, Aborted: t.ledger.aborted,
		Deliveries: t.recv.deliveries(), Samples: samples, Epochs: t.epochs}
	t.ledger.mu.Unlock()
	err := readRetrying(ctx, func() error {
		rec.Applied = map[string]int{}
		rows, err := inPool.Query(ctx, `SELECT event_id::text, n FROM applied`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				rows.Close()
				return err
			}
			rec.Applied[id] = n
		}
		return rows.Err()
	})
	if err != nil {
		return rec, fmt.Errorf("read applied: %w", err)
	}
	err = readRetrying(ctx, func() error {
		rec.InboxIDs = nil
		rows, err := inPool.Query(ctx, `SELECT id::text FROM inbox_events`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			rec.InboxIDs = append(rec.InboxIDs, id)
		}
		return rows.Err()
	})
	if err != nil {
		return rec, fmt.Errorf("read inbox_events: %w", err)
	}
	return rec, nil
}

// readRetrying runs read until it succeeds, fails with an error from the server that is not
// about the connection (a wrong query stays wrong), or readRetryLimit passes.
func readRetrying(ctx context.Context, read func() error) error {
	deadline := time.Now().Add(readRetryLimit)
	for {
		err := read()
		var pgErr *pgconn.PgError
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) ||
			(errors.As(err, &pgErr) && pgErr.Code[:2] != "57" && pgErr.Code[:2] != "08") {
			return err
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return err
		}
	}
}

// fill copies the counters of the writers, the faults and the receiver into res.
func (t *harness) fill(res *result) {
	l := &t.ledger
	l.mu.Lock()
	res.CommittedTxs, res.RolledBackEvents, res.RolledBackTxs = len(l.txs), len(l.rolledBack), l.rolledBackTxs
	res.AbortedEvents, res.AbortedTxs, res.Settled = len(l.aborted), l.abortedTxs, l.settled
	l.mu.Unlock()
	res.Faults = t.faults
	res.Requests, res.BadSignatures, res.InboxRefusals = t.recv.requests.Load(), t.recv.badSignatures.Load(),
		t.recv.inboxRefusals.Load()
	if t.recv.inbox != nil {
		res.InboxDups = t.recv.inbox.Stats().Duplicates
	}
	res.UnknownRequests = t.recv.unknownEndpoint.Load()
	res.BlackedOut = t.recv.blackedOut.Load()
	res.GoneAnswers = t.recv.goneAnswers.Load()
	if t.eps != nil {
		res.Spills, res.Rejoins = countSpills(t.fleet.dir)
	}
	for m := range res.Faulted {
		res.Faulted[m] = t.recv.faulted[m].Load()
	}
}

func (t *harness) fleetLogTail() string {
	var out string
	for _, p := range t.fleet.alive() {
		out += fmt.Sprintf("relay-%d:\n%s\n", p.id, tail(p.logPath, 10))
	}
	return out
}

// confirmedLSN reads the slot's confirmed position on a connection of its own.
func confirmedLSN(ctx context.Context, dsn, slot string) (pglogrepl.LSN, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var s *string
	if err := conn.QueryRow(cctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&s); err != nil {
		return 0, err
	}
	if s == nil {
		return 0, errors.New("slot has no confirmed position")
	}
	return pglogrepl.ParseLSN(*s)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

// checkEndpoints runs an endpoints run's checks into res.
func (t *harness) checkEndpoints(res *result, samples []sample) {
	tl, stats := t.eps.snapshot()
	t.ledger.mu.Lock()
	rec := epRecord{Txs: t.ledger.txs, RolledBack: t.ledger.rolledBack, Aborted: t.ledger.aborted,
		Deliveries: t.recv.deliveries(), Samples: samples, Timeline: tl, Backlog: t.backlog}
	t.ledger.mu.Unlock()
	v := checkEndpoints(rec)
	res.Endpoints, res.Changes = &v, stats
	res.DupSources = blame(t.faults.Log, rec.Deliveries, 3)
}

// countSpills counts, over every relay log in dir, the lines that say an endpoint spilled to
// its backlog and that one caught up with it.
func countSpills(dir string) (spills, rejoins int) {
	logs, _ := filepath.Glob(filepath.Join(dir, "relay-*.log"))
	for _, p := range logs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		spills += bytes.Count(b, []byte("endpoint spills to its backlog"))
		rejoins += bytes.Count(b, []byte("endpoint caught up with its backlog"))
	}
	return spills, rejoins
}
