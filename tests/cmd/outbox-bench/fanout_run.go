package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// fanoutResult is one fan-out row.
type fanoutResult struct {
	// drainResult holds the window's relay usage, CPU, receiver stats and, for a backlog, the
	// start-up; its Rate is every accepted delivery's, the slow endpoints' included.
	drainResult
	Case      fanoutCase
	Endpoints [3]int // by kind
	Routed    routed // the measured events' deliveries
	// HealthyRate is the healthy endpoints' deliveries/s at the receiver, first to last.
	HealthyRate float64
	// Latency is the healthy endpoints' commit-to-delivery (fixed-rate rows).
	Latency   summary
	Achieved  float64 // fixed-rate rows: commits/s the writers managed
	EventRate int     // fixed-rate rows: commits/s asked
	WAL       walFigures
	Activity  *dbActivity // nil if it could not be read
	// ActivityDeliveries is the accepted deliveries Activity covers: the window's, and in the
	// fixed-rate rows the warm-up's too.
	ActivityDeliveries int
	Account            failingAccount
}

// accepted is the deliveries the receiver accepted in the window: what CPU is divided by.
func (d *fanoutResult) accepted() int { return int(d.Routed.success()) }

// fanoutBacklog drains a backlog of BENCH_EVENTS deliveries: the endpoints and then the slot
// are made, BENCH_EVENTS/F events written over the tenants, then the relay started with
// --endpoints and measured until the healthy and slow endpoints have everything.
func (e *env) fanoutBacklog(ctx context.Context, c fanoutCase) (fanoutResult, error) {
	events := max(e.cfg.Events/c.F, 1)
	res := fanoutResult{Case: c, Endpoints: c.kinds(), Routed: c.routeBacklog(1, events),
		drainResult: drainResult{Events: events, Aggregates: fanoutAggregates}}
	res.ActivityDeliveries = res.accepted()
	db, err := e.fanoutDB(ctx, c)
	if err != nil {
		return res, err
	}
	defer db.drop()
	e.logf("%s: writing %d events over %d tenants", c.prefix(), events, c.tenants())
	if _, err := db.writeTenantBacklog(ctx, events, fanoutAggregates, c.tenants()); err != nil {
		return res, err
	}
	before, actErr := db.activity(ctx)
	e.logf("%s: relay draining %d deliveries (%d to healthy endpoints)", c.prefix(), res.Routed.total(), res.Routed.ByKind[healthy])
	start := func() (*relayProc, error) { return e.startEndpointsRelay(ctx, db) }
	var measureErr error
	res.WAL, err = whileSampling(ctx, db.dsn, func() {
		measureErr = e.measure(ctx, &res.drainResult, res.accepted(), start, nil)
	})
	if measureErr != nil {
		return res, measureErr
	}
	if err != nil {
		return res, err
	}
	res.Activity = e.activityAfter(ctx, db, before, actErr, c.prefix())
	arrivals, err := e.recv.Arrivals(ctx)
	if err != nil {
		return res, err
	}
	res.HealthyRate = healthyRate(c, arrivals)
	return res, e.fanoutCheck(ctx, db, &res, nil)
}

// fanoutRate runs the relay on an empty slot and commits BENCH_FANOUT_RATE/F events per
// second for BENCH_STEADY after a warm-up of a second's worth, measuring each healthy
// delivery's commit-to-delivery.
func (e *env) fanoutRate(ctx context.Context, c fanoutCase) (fanoutResult, error) {
	rate := max(e.cfg.fanoutRate()/c.F, 1)
	res := fanoutResult{Case: c, Endpoints: c.kinds(), EventRate: rate,
		drainResult: drainResult{Events: max(int(float64(rate)*e.cfg.steady().Seconds()), 2), Aggregates: fanoutAggregates}}
	db, err := e.fanoutDB(ctx, c)
	if err != nil {
		return res, err
	}
	defer db.drop()
	pool, err := steadyPool(ctx, db.dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	// The database's counters are read before the relay starts and after it stopped, so they
	// cover the warm-up too (the writers' backends publish theirs up to seconds late, so a
	// reading between the two would split nothing exactly); ActivityDeliveries counts it.
	actBefore, actErr := db.activity(ctx)
	r, err := e.startEndpointsRelay(ctx, db)
	if err != nil {
		return res, err
	}
	defer r.Stop(relayStopGrace)
	w := fanoutWriters{pool: pool, rate: rate, args: func(seq int) []any { return []any{seq, payloadPad, c.tenants()} }}
	warm, warmFails, err := e.fanoutWarmUp(ctx, c, w, r)
	if err != nil {
		return res, err
	}
	commits, err := e.fanoutWindow(ctx, db, w, r, len(warm), &res)
	pool.Close() // its sessions would keep the database's counters from settling
	if err != nil {
		return res, err
	}
	res.ActivityDeliveries = int(c.routeSeqs(seqsOf(append(warm, commits...))).success())
	arrivals, err := e.recv.Arrivals(ctx)
	if err != nil {
		return res, err
	}
	res.HealthyRate = healthyRate(c, arrivals)
	if res.Latency, err = healthyLatency(c, commits, arrivals); err != nil {
		return res, err
	}
	if err := stopRelay(r); err != nil {
		return res, err
	}
	res.Activity = e.activityAfter(ctx, db, actBefore, actErr, c.prefix())
	return res, e.fanoutCheck(ctx, db, &res, warmFails)
}

// fanoutWriters commit a rate row's events: rate per second, with args(seq) for fanoutRateSQL.
type fanoutWriters struct {
	pool *pgxpool.Pool
	rate int
	args func(seq int) []any
}

func (w fanoutWriters) produce(ctx context.Context, n, seq0 int) ([]commit, float64, error) {
	return produceSteadyArgs(ctx, w.pool, fanoutRateSQL, n, w.rate, seq0, w.args)
}

// fanoutWarmUp commits a second's worth of events, waits until every delivery
// the receiver must accept of them has arrived, so that none lands in the window (a slow
// endpoint's would, a second late), and resets the receiver. It returns the commits and what
// the failing endpoints were sent meanwhile, which their account covers too.
func (e *env) fanoutWarmUp(ctx context.Context, c fanoutCase, w fanoutWriters, r *relayProc) ([]commit, map[string]failures, error) {
	warm := max(w.rate, 1)
	e.logf("%s: warming up with %d events", c.prefix(), warm)
	if err := e.recv.Reset(ctx); err != nil {
		return nil, nil, err
	}
	wc, _, err := w.produce(ctx, warm, 0)
	if err != nil {
		return nil, nil, err
	}
	if _, err := e.recv.waitUnique(ctx, int(c.routeSeqs(seqsOf(wc)).success()), r.child, stallLimit); err != nil {
		return nil, nil, fmt.Errorf("warm-up: %w", err)
	}
	fails, err := e.recv.Failures(ctx)
	if err != nil {
		return nil, nil, err
	}
	return wc, fails, e.recv.Reset(ctx)
}

// fanoutWindow commits the row's events after seq0 while sampling the slot's WAL, waits until
// every delivery the receiver must accept has arrived, and fills res with what the window used.
func (e *env) fanoutWindow(ctx context.Context, db *benchDB, w fanoutWriters, r *relayProc, seq0 int, res *fanoutResult) ([]commit, error) {
	c := res.Case
	before, err := e.cpuSnapshot()
	if err != nil {
		return nil, err
	}
	relayBefore, err := r.usage()
	if err != nil {
		return nil, err
	}
	e.logf("%s: %d events at %d/s (%d deliveries/s)", c.prefix(), res.Events, w.rate, w.rate*c.F)
	var commits []commit
	var prodErr error
	res.WAL, err = whileSampling(ctx, db.dsn, func() {
		if commits, res.Achieved, prodErr = w.produce(ctx, res.Events, seq0); prodErr != nil {
			return
		}
		res.Routed = c.routeSeqs(seqsOf(commits))
		res.Stats, prodErr = e.recv.waitUnique(ctx, res.accepted(), r.child, stallLimit)
	})
	if prodErr != nil {
		return nil, prodErr
	}
	if err != nil {
		return nil, err
	}
	if res.Relay, err = r.usage(); err != nil {
		return nil, err
	}
	res.Relay.CPU -= relayBefore.CPU
	after, err := e.cpuSnapshot()
	if err != nil {
		return nil, err
	}
	res.Load = loadBetween(before, after)
	res.Rate = receiverRate(res.Stats)
	return commits, nil
}

// fanoutDB makes the case's database, its endpoints and then its slot (so the relay starts
// with every endpoint, as in the endpoint rows).
func (e *env) fanoutDB(ctx context.Context, c fanoutCase) (*benchDB, error) {
	db, err := newBenchDB(ctx, e.cluster, c.prefix())
	if err != nil {
		return nil, err
	}
	if err := db.createFanoutEndpoints(ctx, c, e.recv.base); err != nil {
		db.drop()
		return nil, err
	}
	if err := db.createSlot(ctx, relaySlot); err != nil {
		db.drop()
		return nil, err
	}
	return db, nil
}

// whileSampling runs f while sampling the slot's retained WAL, and sums the samples up.
func whileSampling(ctx context.Context, dsn string, f func()) (walFigures, error) {
	sampleCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var samples []walSample
	var err error
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		samples, err = sampleWAL(sampleCtx, dsn, start, fanoutSample)
	}()
	f()
	// One sample after f, so the figure at the end is taken after it.
	sleepUntil(ctx, time.Now().Add(fanoutSample))
	stop()
	wg.Wait()
	run := isolationRun{Samples: samples}
	return run.wal(0, time.Since(start)), err
}

// activityAfter waits until the relay's sessions are gone and returns the database's activity
// since before, or nil (logged) if it cannot be read.
func (e *env) activityAfter(ctx context.Context, db *benchDB, before dbActivity, err error, prefix string) *dbActivity {
	if err == nil {
		err = db.waitAlone(ctx, 5*time.Second)
	}
	if err == nil {
		var after dbActivity
		if after, err = db.activity(ctx); err == nil {
			a := after.minus(before)
			return &a
		}
	}
	e.logf("%s: no database activity in the report: %v", prefix, err)
	return nil
}

func seqsOf(cs []commit) []int {
	out := make([]int, len(cs))
	for i, c := range cs {
		out[i] = c.Seq
	}
	return out
}

// healthyRate is the healthy endpoints' deliveries/s, first to last arrival ("<endpoint>
// <event id>" keys).
func healthyRate(c fanoutCase, arrivals map[string]int64) float64 {
	var n int
	var first, last int64
	for key, at := range arrivals {
		ep, _, _ := strings.Cut(key, " ")
		if i := endpointIndex(ep); i < 0 || c.kind(i) != healthy {
			continue
		}
		if n == 0 || at < first {
			first = at
		}
		last = max(last, at)
		n++
	}
	if n < 2 || last <= first {
		return 0
	}
	return float64(n-1) / time.Duration(last-first).Seconds()
}

// healthyLatency is commit-to-delivery of every healthy delivery of the commits; one that did
// not arrive is an error.
func healthyLatency(c fanoutCase, commits []commit, arrivals map[string]int64) (summary, error) {
	var lat []time.Duration
	for _, cm := range commits {
		first := c.tenantOf(cm.Seq) * c.F
		for i := first; i < first+c.F; i++ {
			if c.kind(i) != healthy {
				continue
			}
			at, ok := arrivals[endpointID(i)+" "+cm.ID]
			if !ok {
				return summary{}, fmt.Errorf("event %s committed for %s but never arrived", cm.ID, endpointID(i))
			}
			lat = append(lat, time.Duration(at-cm.At))
		}
	}
	return summarize(lat), nil
}

// fanoutCheck fails the row unless every healthy and slow endpoint received exactly what was
// routed to it and nothing else arrived, and every event routed to a failing endpoint is
// accounted for (failingAccount). earlier is what the failing endpoints were sent before the
// receiver's last reset.
func (e *env) fanoutCheck(ctx context.Context, db *benchDB, res *fanoutResult, earlier map[string]failures) error {
	got, err := e.recv.PerEndpoint(ctx)
	if err != nil {
		return err
	}
	if err := checkPerEndpoint(got, res.Routed.PerEndpoint, res.Stats.Unique); err != nil {
		return err
	}
	fails, err := e.recv.Failures(ctx)
	if err != nil {
		return err
	}
	if res.Account, err = db.accountFailing(ctx, res.Case); err != nil {
		return err
	}
	for _, m := range []map[string]failures{earlier, fails} {
		for _, f := range m {
			res.Account.Attempts += f.Attempts
		}
	}
	if err := res.Account.check(); err != nil {
		return err
	}
	return checkStats(res.Stats, true)
}

// fanoutCeiling posts BENCH_EVENTS signed requests to the healthy endpoints' paths of the
// largest case (/ep/<id>, round robin) from this process, as the ceiling rows do: the lean
// client, 64 workers, no database, no ordering. The bodies are the backlog's, as jsonb prints
// them.
func (e *env) fanoutCeiling(ctx context.Context, cases []fanoutCase) (ceilingResult, error) {
	if len(cases) == 0 {
		return ceilingResult{}, fmt.Errorf("no fan-out case: BENCH_FANOUT_N and BENCH_FANOUT_F give no N that F divides")
	}
	c := cases[len(cases)-1]
	var paths []string
	for i := range c.N {
		if c.kind(i) == healthy {
			paths = append(paths, "/ep/"+endpointID(i))
		}
	}
	reqs := fanoutRequests(e.cfg.Events, paths)
	e.logf("fan-out HTTP ceiling: %d requests to %d endpoints, lean client", len(reqs), len(paths))
	return e.ceiling(ctx, reqs, e.leanPosters())
}

// fanoutRequests builds n requests, request g (from 1) posting to paths[g % len(paths)] the
// body a backlog row g has.
func fanoutRequests(n int, paths []string) []request {
	pad := strings.Repeat("x", payloadPad)
	reqs := make([]request, n)
	for k := range reqs {
		g := k + 1
		reqs[k] = request{ID: uuid.NewString(), AggregateType: "order", AggregateID: fmt.Sprint(g % fanoutAggregates),
			EventType: "order.created", Body: fmt.Appendf(nil, `{"pad": "%s", "seq": %d}`, pad, g), Path: paths[g%len(paths)]}
	}
	return reqs
}
