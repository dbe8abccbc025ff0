package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Steady latency: writers commit single-event transactions on a fixed schedule while the relay
// runs; each commit's wall time is taken as the INSERT returns, each arrival's by the receiver
// as the request comes in (same machine, same clock). Latency is arrival − commit.

const (
	steadyWriters    = 8 // divides steadyAggregates, so each aggregate has one writer
	steadyAggregates = 1000
)

// steadySQL is one autocommit INSERT: a single-event transaction in one round trip, with the
// backlog's payload shape.
const steadySQL = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, payload)
VALUES ('order', $1, 'order.created', jsonb_build_object('seq', $2::bigint, 'pad', repeat('x', $3)))
RETURNING id::text`

// commit is an event whose INSERT returned at unix nanos At; Seq is its seq (its aggregate is
// Seq % steadyAggregates).
type commit struct {
	ID  string
	At  int64
	Seq int
}

// produceSteady commits n events at rate per second, event k due at start + k/rate, spread
// over steadyWriters connections. Event k goes to aggregate (seq0+k) % steadyAggregates with
// seq seq0+k. A writer that falls behind catches up without sleeping. It returns the commits
// and the achieved rate.
func produceSteady(ctx context.Context, pool *pgxpool.Pool, n, rate, seq0 int) ([]commit, float64, error) {
	return produceSteadySQL(ctx, pool, steadySQL, n, rate, seq0)
}

// produceSteadySQL is produceSteady with another INSERT of the same parameters (aggregate id,
// seq, pad), e.g. one that sets a tenant.
func produceSteadySQL(ctx context.Context, pool *pgxpool.Pool, sql string, n, rate, seq0 int) ([]commit, float64, error) {
	return produceSteadyArgs(ctx, pool, sql, n, rate, seq0, func(seq int) []any {
		return []any{fmt.Sprint(seq % steadyAggregates), seq, payloadPad}
	})
}

// produceSteadyArgs is produceSteadySQL with the INSERT's arguments for each seq given by args.
// The aggregate args puts seq in must have one writer: one whose number is seq % steadyWriters.
func produceSteadyArgs(ctx context.Context, pool *pgxpool.Pool, sql string, n, rate, seq0 int, args func(seq int) []any) ([]commit, float64, error) {
	interval := time.Second / time.Duration(rate)
	start := time.Now().Add(5 * time.Millisecond)
	per := make([][]commit, steadyWriters)
	errs := make([]error, steadyWriters)
	var wg sync.WaitGroup
	for w := 0; w < steadyWriters; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for k := w; k < n && ctx.Err() == nil; k += steadyWriters {
				if d := time.Until(start.Add(time.Duration(k) * interval)); d > 0 {
					time.Sleep(d)
				}
				seq := seq0 + k
				var id string
				if err := pool.QueryRow(ctx, sql, args(seq)...).Scan(&id); err != nil {
					errs[w] = fmt.Errorf("steady insert: %w", err)
					return
				}
				per[w] = append(per[w], commit{ID: id, At: time.Now().UnixNano(), Seq: seq})
			}
		}(w)
	}
	wg.Wait()
	var all []commit
	for w := range per {
		if errs[w] != nil {
			return nil, 0, errs[w]
		}
		all = append(all, per[w]...)
	}
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	return all, achievedRate(all), nil
}

func achievedRate(cs []commit) float64 {
	if len(cs) < 2 {
		return 0
	}
	lo, hi := cs[0].At, cs[0].At
	for _, c := range cs {
		lo, hi = min(lo, c.At), max(hi, c.At)
	}
	return float64(len(cs)-1) / time.Duration(hi-lo).Seconds()
}

// latencies pairs commits with arrivals; a commit with no arrival is an error.
func latencies(cs []commit, arrivals map[string]int64) ([]time.Duration, error) {
	out := make([]time.Duration, 0, len(cs))
	for _, c := range cs {
		at, ok := arrivals[c.ID]
		if !ok {
			return nil, fmt.Errorf("event %s committed but never arrived", c.ID)
		}
		out = append(out, time.Duration(at-c.At))
	}
	return out, nil
}

// summary is the p50, p99 and max of a sample.
type summary struct {
	P50, P99, Max time.Duration
	N             int
}

// summarize uses the nearest-rank percentile: the smallest value with at least p of the
// sample at or below it.
func summarize(ds []time.Duration) summary {
	if len(ds) == 0 {
		return summary{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return summary{P50: rank(0.50), P99: rank(0.99), Max: s[len(s)-1], N: len(s)}
}

// steadyResult is commit-to-receipt latency at a fixed commit rate.
type steadyResult struct {
	Rate     int // asked
	Events   int
	Achieved float64 // commits per second the writers managed
	Latency  summary
	Relay    usage // CPU over the measured events; RSS peak of the whole run
	Load     load  // Self is the writers; PostgreSQL includes their INSERTs
	Stats    receiverStats
}

// steady runs the relay on an empty slot, warms it up, then commits rate events per second
// for the configured time and measures each one's commit-to-receipt latency.
func (e *env) steady(ctx context.Context, rate int, args ...string) (steadyResult, error) {
	res := steadyResult{Rate: rate, Events: int(float64(rate) * e.cfg.steady().Seconds())}
	db, err := newBenchDB(ctx, e.cluster, fmt.Sprintf("steady_%d", rate), relaySlot)
	if err != nil {
		return res, err
	}
	defer db.drop()
	pool, err := steadyPool(ctx, db.dsn)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	r, err := e.startRelay(ctx, db, args...)
	if err != nil {
		return res, err
	}
	defer r.Stop(relayStopGrace)
	warm := max(rate/5, 50)
	e.logf("steady %d/s: warming up with %d events", rate, warm)
	if err := e.recv.Reset(ctx); err != nil {
		return res, err
	}
	if _, _, err := produceSteady(ctx, pool, warm, rate, 0); err != nil {
		return res, err
	}
	if _, err := e.recv.waitUnique(ctx, warm, r.child, stallLimit); err != nil {
		return res, err
	}
	if err := e.recv.Reset(ctx); err != nil {
		return res, err
	}
	before, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	relayBefore, err := r.usage()
	if err != nil {
		return res, err
	}
	e.logf("steady %d/s: %d events over %s", rate, res.Events, e.cfg.steady())
	commits, achieved, err := produceSteady(ctx, pool, res.Events, rate, warm)
	if err != nil {
		return res, err
	}
	if res.Stats, err = e.recv.waitUnique(ctx, len(commits), r.child, stallLimit); err != nil {
		return res, err
	}
	if res.Relay, err = r.usage(); err != nil {
		return res, err
	}
	res.Relay.CPU -= relayBefore.CPU
	after, err := e.cpuSnapshot()
	if err != nil {
		return res, err
	}
	res.Load = loadBetween(before, after)
	arrivals, err := e.recv.Arrivals(ctx)
	if err != nil {
		return res, err
	}
	lat, err := latencies(commits, arrivals)
	if err != nil {
		return res, err
	}
	res.Achieved, res.Latency = achieved, summarize(lat)
	if err := stopRelay(r); err != nil {
		return res, err
	}
	return res, checkStats(res.Stats, true)
}

func steadyPool(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns, cfg.MinConns = steadyWriters, steadyWriters
	return pgxpool.NewWithConfig(ctx, cfg)
}

// window is the time the measured commits spanned.
func (s *steadyResult) window() string {
	if s.Achieved <= 0 {
		return dash
	}
	return (time.Duration(float64(s.Events-1) / s.Achieved * float64(time.Second))).Round(10 * time.Millisecond).String()
}
