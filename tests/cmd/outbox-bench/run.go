package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// Row names, in table order.
const (
	rowDrain       = "Backlog drain (relay)"
	rowCeilingLean = "HTTP ceiling, lean client"
	rowCeilingStd  = "HTTP ceiling, net/http client"
	rowRaw         = "pg_recvlogical raw decode"
	rowSteady1k    = "Steady 1,000 events/s"
	rowSteady5k    = "Steady 5,000 events/s"
	rowResources   = "Resources: 3× backlog"
	rowBatch       = "Backlog drain, batch 100"
	rowMarksOff    = "Backlog drain, --marks off"
	rowBatchOff    = "Backlog drain, batch 100, --marks off"
	rowSteadyBatch = "Steady 1,000 events/s, batch 100, linger 5ms"
	rowTwoPipes    = "Backlog drain, 2 pipelines"
)

// batchArgs are the relay flags of the batched rows.
var batchArgs = []string{"--batch-max-events", "100", "--batch-linger", "5ms"}

// sweepAggregates are the aggregate counts of the sweep rows (the drain row is 1,000).
var sweepAggregates = []int{1, 10, 100, 10_000}

func sweepRow(aggregates int) string {
	if aggregates == 1 {
		return "Sweep: 1 aggregate"
	}
	return "Sweep: " + thousands(float64(aggregates)) + " aggregates"
}

// results is everything one run measured. A nil pointer is a row that failed or never ran.
type results struct {
	machine   machine
	cfg       config
	drain     *drainResult
	raw       *rawResult
	lean, std *ceilingResult
	steady1k  *steadyResult
	steady5k  *steadyResult
	sweep     map[int]*drainResult
	resources *drainResult
	// variants are the drains with other delivery settings (batching, marks), by row name.
	variants    map[string]*drainResult
	steadyBatch *steadyResult
	brokers     map[string]*drainResult     // broker.go, by row name
	twoPipes    *drainResult                // the drain with a second pipeline that filters out every row
	shards      map[int]*drainResult        // the drains of the bench pipeline in N shards (shards.go)
	since       *sinceResult                // replay --since of half a large table (since.go)
	endpoints   map[string]*endpointsResult // the drains to outbox_endpoints (endpoints.go), by row name
	isolation   *isolationResult            // one endpoint blacked out among 100 (isolation.go)
	burst       *burstResult                // a burst into one hung endpoint among 100 (burst.go)
	api         *apiResult                  // GET /deliveries of the management API (api.go)
	portal      *portalResult               // the console's and an endpoint's pages (portal.go)
	errs        map[string]error            // row → why it failed
	errOrder    []string
	bodyAvg     float64

	// fanout are the fan-out rows (fanout.go) by row name, beside the HTTP ceiling they measure.
	fanout        map[string]*fanoutResult
	fanoutCeiling *ceilingResult

	// spans and spanRequests are what the OTLP receiver got with BENCH_OTEL=1 (otel.go).
	spans, spanRequests int
}

func (r *results) fail(row string, err error) {
	if r.errs == nil {
		r.errs = map[string]error{}
	}
	r.errs[row] = err
	r.errOrder = append(r.errOrder, row)
}

// Failed reports whether any row failed.
func (r *results) Failed() bool { return len(r.errs) > 0 }

// machine describes where the run happened.
type machine struct {
	CPUs     int
	Model    string
	Go       string
	Postgres string
	Durable  bool
	Relay    string // the relay's source revision
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// runSuite runs every row and returns what it measured. An error means nothing could run (no
// cluster, no relay binary, no receiver, or ctx ended); a failed row is recorded in the
// results and the run goes on.
func runSuite(ctx context.Context, cfg config, progress io.Writer) (*results, error) {
	res := &results{cfg: cfg, sweep: map[int]*drainResult{}, variants: map[string]*drainResult{}}
	res.machine = machine{CPUs: runtime.NumCPU(), Model: cpuModel(), Go: runtime.Version(), Durable: cfg.Durable}
	tmp, err := os.MkdirTemp("", "outbox-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	e := &env{cfg: cfg, progress: progress}
	e.logf("building the relay")
	if e.relayBin, err = buildRelay(ctx, tmp); err != nil {
		return nil, err
	}
	res.machine.Relay = relayRevision(ctx, e.relayBin)
	e.logf("starting PostgreSQL (durable: %v)", cfg.Durable)
	if e.cluster, err = pgtest.Start(ctx, pgtest.Options{Durable: cfg.Durable}); err != nil {
		return nil, err
	}
	defer e.cluster.Close()
	if res.machine.Postgres, err = serverVersion(ctx, e.cluster.DSN("postgres")); err != nil {
		return nil, err
	}
	if e.recv, err = startReceiver(ctx, benchSecret); err != nil {
		return nil, err
	}
	defer e.recv.Stop(5 * time.Second)
	otlp, stopOTLP, err := startTracing(cfg.OTel)
	if err != nil {
		return nil, err
	}
	defer stopOTLP()
	if otlp != nil {
		defer func() { res.spans, res.spanRequests = len(otlp.Spans()), otlp.Requests() }()
		e.logf("tracing on: every relay exports its spans to %s", otlp.URL)
	}
	for _, row := range e.rows(res) {
		if !cfg.selected(row.name) {
			continue
		}
		start := time.Now()
		err := row.run(ctx)
		e.logf("%s: %s", row.name, time.Since(start).Round(time.Millisecond))
		if err != nil {
			res.fail(row.name, err)
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			e.logf("%s FAILED: %v", row.name, err)
		}
	}
	return res, nil
}

type suiteRow struct {
	name string
	run  func(context.Context) error
}

// rows lists what runSuite runs, in order; each stores its result in res.
func (e *env) rows(res *results) []suiteRow {
	n := e.cfg.Events
	var reqs []request
	rows := []suiteRow{
		{rowDrain, func(ctx context.Context) error {
			d, err := e.drain(ctx, "drain", n, 1000, drainOpts{raw: true, keep: true})
			res.raw = d.Raw
			reqs = d.Requests
			if err == nil {
				d.Requests = nil
				res.drain = &d
				res.bodyAvg = float64(d.Stats.BodyBytes) / float64(max(d.Stats.Unique, 1))
			}
			return err
		}},
		{rowCeilingLean, func(ctx context.Context) error {
			e.logf("HTTP ceiling: %d requests, lean client", len(reqs))
			c, err := e.ceiling(ctx, reqs, e.leanPosters())
			res.lean = keep(c, err)
			return err
		}},
		{rowCeilingStd, func(ctx context.Context) error {
			e.logf("HTTP ceiling: %d requests, net/http client", len(reqs))
			c, err := e.ceiling(ctx, reqs, e.stdPosters())
			res.std = keep(c, err)
			return err
		}},
	}
	for _, v := range drainVariants {
		rows = append(rows, suiteRow{v.row, func(ctx context.Context) error {
			d, err := e.drain(ctx, v.prefix, n, 1000, drainOpts{args: v.args})
			res.variants[v.row] = keep(d, err)
			return err
		}})
	}
	rows = append(rows, []suiteRow{
		{rowSteady1k, func(ctx context.Context) error {
			s, err := e.steady(ctx, 1000)
			res.steady1k = keep(s, err)
			return err
		}},
		{rowSteady5k, func(ctx context.Context) error {
			s, err := e.steady(ctx, 5000)
			res.steady5k = keep(s, err)
			return err
		}},
		{rowSteadyBatch, func(ctx context.Context) error {
			s, err := e.steady(ctx, 1000, batchArgs...)
			res.steadyBatch = keep(s, err)
			return err
		}},
	}...)
	res.brokers = map[string]*drainResult{}
	for _, b := range brokerRows {
		start := func(context.Context) (brokerSink, error) { return startKafka() }
		if b.nats {
			start = func(ctx context.Context) (brokerSink, error) { return startNATS(ctx) }
		}
		rows = append(rows, suiteRow{b.row, func(ctx context.Context) error {
			d, err := e.brokerRow(ctx, b.prefix, start, b.args...)
			res.brokers[b.row] = keep(d, err)
			return err
		}})
	}
	for _, a := range sweepAggregates {
		rows = append(rows, suiteRow{sweepRow(a), func(ctx context.Context) error {
			d, err := e.drain(ctx, fmt.Sprintf("sweep_%d", a), max(n/5, 1), a, drainOpts{})
			res.sweep[a] = keep(d, err)
			return err
		}})
	}
	rows = append(rows, suiteRow{rowResources, func(ctx context.Context) error {
		d, err := e.drain(ctx, "resources", 3*n, 1000, drainOpts{})
		res.resources = keep(d, err)
		return err
	}})
	rows = append(rows, suiteRow{rowTwoPipes, func(ctx context.Context) error {
		d, err := e.drain(ctx, "two_pipelines", n, 1000, drainOpts{second: true})
		res.twoPipes = keep(d, err)
		return err
	}})
	res.shards = map[int]*drainResult{}
	for _, k := range benchShards {
		rows = append(rows, suiteRow{shardRow(k), func(ctx context.Context) error {
			d, err := e.drain(ctx, fmt.Sprintf("shards_%d", k), n, 1000, drainOpts{shards: k})
			res.shards[k] = keep(d, err)
			return err
		}})
	}
	rows = append(rows, e.endpointRows(res)...)
	rows = append(rows, e.isolationRow(res))
	rows = append(rows, e.burstRow(res))
	rows = append(rows, e.fanoutRows(res)...)
	rows = append(rows, e.apiRow(res))
	rows = append(rows, e.portalRow(res))
	rows = append(rows, suiteRow{sinceRow(sinceScale * n), func(ctx context.Context) error {
		s, err := e.since(ctx)
		res.since = keep(s, err)
		return err
	}})
	return rows
}

// drainVariants are the backlog drains with other delivery settings, in table order, each
// beside the single-request ceiling measured in the same run.
var drainVariants = []struct {
	row, prefix string
	args        []string
}{
	{rowBatch, "batch", batchArgs},
	{rowMarksOff, "marks_off", []string{"--marks", "off"}},
	{rowBatchOff, "batch_marks_off", append(append([]string(nil), batchArgs...), "--marks", "off")},
}

func keep[T any](v T, err error) *T {
	if err != nil {
		return nil
	}
	return &v
}
