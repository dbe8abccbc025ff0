package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The fan-out rows (issue 40, point 1): N endpoints (BENCH_FANOUT_N, default 1, 1,000 and
// 10,000), made with plain SQL as rows of outbox_endpoints, in N/F tenants of F endpoints each
// (BENCH_FANOUT_F, default 1 and 10), every event going to the F endpoints of its tenant. One
// endpoint in a hundred fails every attempt (500) and one in a hundred answers after 1 s, each
// a path of the bench's receiver (/fail/<id>, /slow/<id>; the healthy ones post to /ep/<id>).
// Each configuration runs twice on fresh databases: as a drain of a backlog of BENCH_EVENTS
// deliveries (BENCH_EVENTS/F events) written while the relay is stopped, and at a fixed rate of
// BENCH_FANOUT_RATE deliveries/s for BENCH_STEADY; the largest runs at that rate a third time
// with no failing or slow endpoint, which the p99 target compares with. A row of its
// own measures the HTTP ceiling in the same run, as the ceiling rows do, to the healthy paths.

const (
	rowFanoutCeiling = "Fanout ceiling"
	// fanoutAggregates: event g has aggregate g % 1024, so that the events of each tenant
	// spread over many aggregates (gcd(1024, tenants) of them share each one), and a slow
	// endpoint's 16 requests in flight are not held to one aggregate's order. Its steady
	// writers own an aggregate each, as 1024 is a multiple of steadyWriters.
	fanoutAggregates = 1024
	// An endpoint i fails every attempt if i % faultEvery == failingAt, and is slow if
	// i % faultEvery == slowAt: 1% each, spread over the tenants (with F = 10, every tenth
	// tenant has a failing endpoint and another tenth a slow one).
	faultEvery = 100
	failingAt  = 50
	slowAt     = 99
	// fanoutSample is how often the rows read the slot's retained WAL.
	fanoutSample = 500 * time.Millisecond
)

var (
	defaultFanoutN = []int{1, 1000, 10_000}
	defaultFanoutF = []int{1, 10}
)

// defaultFanoutRate is the fixed-rate rows' deliveries/s (BENCH_FANOUT_RATE): 2,000 events/s
// with F = 1, 200 with F = 10, well under what 2 cores drain, so the rows measure latency
// under load, not saturation.
const defaultFanoutRate = 2000

// Targets of issue 40, at N = 10,000 and F = 10 against one endpoint in the same run.
const (
	targetFanoutCeiling  = 0.7         // the drain's healthy deliveries/s over the fan-out ceiling
	targetFanoutRelayCPU = 1.2         // relay CPU per delivery over one endpoint's
	targetFanoutPGCPU    = 0.3         // PostgreSQL CPU per delivery over one endpoint's
	targetFanoutRSS      = 150_000_000 // relay peak RSS, bytes
	targetFanoutP99      = 2.0         // healthy p99 over the same rate with no failing or slow endpoint
	targetFanoutN        = 10_000
	targetFanoutF        = 10
)

// endpointKind is how an endpoint of a fan-out row answers.
type endpointKind int

const (
	healthy endpointKind = iota
	failing              // 500 to every attempt
	slow                 // 200 after slowAnswer
)

// fanoutCase is one fan-out row.
type fanoutCase struct {
	N, F int
	// Rate: at a fixed rate of deliveries/s, else a drain of a backlog.
	Rate bool
	// NoFaults: no failing or slow endpoint (the rate row the p99 target compares with).
	NoFaults bool
}

// row is the case's row name. It has no comma (BENCH_ONLY splits on them), ends each number
// with a space or the end (a number in BENCH_ONLY matches whole), and holds neither "drain"
// nor "steady", so BENCH_ONLY=drain and BENCH_ONLY=steady select what they did before.
func (c fanoutCase) row() string {
	mode := "backlog"
	if c.Rate {
		mode = "rate"
	}
	name := fmt.Sprintf("Fanout %s N=%d F=%d", mode, c.N, c.F)
	if c.NoFaults {
		name += " no faults"
	}
	return name
}

// prefix names the case's database.
func (c fanoutCase) prefix() string {
	p := fmt.Sprintf("fanout_%d_%d", c.N, c.F)
	if c.Rate {
		p += "_rate"
	}
	if c.NoFaults {
		p += "_nofaults"
	}
	return p
}

func (c fanoutCase) tenants() int { return c.N / c.F }

// kind is how endpoint i answers.
func (c fanoutCase) kind(i int) endpointKind {
	switch {
	case c.NoFaults:
		return healthy
	case i%faultEvery == failingAt:
		return failing
	case i%faultEvery == slowAt:
		return slow
	}
	return healthy
}

// kinds counts the endpoints of each kind.
func (c fanoutCase) kinds() (n [3]int) {
	for i := range c.N {
		n[c.kind(i)]++
	}
	return n
}

// tenantOf is the tenant index of event seq: its endpoints are tenantOf*F .. tenantOf*F+F-1.
func (c fanoutCase) tenantOf(seq int) int { return seq % c.tenants() }

// failingIDs are the ids of the failing endpoints.
func (c fanoutCase) failingIDs() []string {
	var ids []string
	for i := range c.N {
		if c.kind(i) == failing {
			ids = append(ids, endpointID(i))
		}
	}
	return ids
}

// fanoutCases are the rows the configuration asks for, in table order: the drains, then the
// fixed-rate rows, the largest of each last and followed by its run without faults (next to
// each other, so that the p99 target compares two runs minutes apart at most; the drain
// without faults is the setup of the figures issue 40 starts from). An (N, F) pair runs if F
// divides N: N/F tenants of F endpoints.
func (c config) fanoutCases() []fanoutCase {
	var pairs [][2]int
	for _, n := range c.fanoutN() {
		for _, f := range c.fanoutF() {
			if f <= n && n%f == 0 {
				pairs = append(pairs, [2]int{n, f})
			}
		}
	}
	slices.SortFunc(pairs, func(a, b [2]int) int {
		if a[0] != b[0] {
			return a[0] - b[0]
		}
		return a[1] - b[1]
	})
	if len(pairs) == 0 {
		return nil
	}
	var out []fanoutCase
	last := pairs[len(pairs)-1]
	for _, rate := range []bool{false, true} {
		for _, p := range pairs {
			out = append(out, fanoutCase{N: p[0], F: p[1], Rate: rate})
		}
		out = append(out, fanoutCase{N: last[0], F: last[1], Rate: rate, NoFaults: true})
	}
	return out
}

func (c config) fanoutN() []int {
	if len(c.FanoutN) > 0 {
		return c.FanoutN
	}
	return defaultFanoutN
}

func (c config) fanoutF() []int {
	if len(c.FanoutF) > 0 {
		return c.FanoutF
	}
	return defaultFanoutF
}

func (c config) fanoutRate() int {
	if c.FanoutRate > 0 {
		return c.FanoutRate
	}
	return defaultFanoutRate
}

// parseCounts reads a comma-separated list of whole numbers between lo and hi (BENCH_FANOUT_N,
// BENCH_FANOUT_F), sorted, each once.
func parseCounts(name, v string, lo, hi int) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		n, err := strconv.Atoi(strings.ReplaceAll(part, "_", ""))
		if err != nil || n < lo || n > hi {
			return nil, fmt.Errorf("%s=%q: %q is not a whole number from %d to %d; set a comma-separated list, e.g. %s=%s",
				name, v, part, lo, hi, name, exampleCounts(name))
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

func exampleCounts(name string) string {
	if name == "BENCH_FANOUT_F" {
		return "1,10"
	}
	return "1,1000,10000"
}

// fanoutEndpointsSQL creates endpoints ep0..ep<$3-1>: endpoint i of tenant 't' || i / $4,
// every event type, one x-signature secret $2, posting to $1 || kind || '/ep' || i where kind
// is fail or slow for 1% each (unless $5: no faults), as fanoutCase.kind says, else ep.
const fanoutEndpointsSQL = `
INSERT INTO outbox_endpoints (id, url, secrets, tenant_id, event_types)
SELECT 'ep' || i,
       $1 || CASE WHEN NOT $5 AND i % 100 = 50 THEN 'fail' WHEN NOT $5 AND i % 100 = 99 THEN 'slow' ELSE 'ep' END || '/ep' || i,
       jsonb_build_array(jsonb_build_object('secret', $2::text)), 't' || (i / $4), '{*}'
FROM generate_series(0, $3 - 1) i`

// createFanoutEndpoints inserts the case's endpoints, posting to the receiver at base.
func (db *benchDB) createFanoutEndpoints(ctx context.Context, c fanoutCase, base string) error {
	if _, err := db.conn.Exec(ctx, fanoutEndpointsSQL, base+"/", benchSecret, c.N, c.F, c.NoFaults); err != nil {
		return fmt.Errorf("create %d endpoints: %w", c.N, err)
	}
	return nil
}

// fanoutRateSQL is one event of the fixed-rate rows: seq $1, aggregate $1 % 1024, tenant
// 't' || $1 % $3, the backlog's payload.
const fanoutRateSQL = `
INSERT INTO outbox_events (aggregate_type, aggregate_id, event_type, tenant_id, payload)
VALUES ('order', ($1::bigint % 1024)::text, 'order.created', 't' || ($1::bigint % $3::bigint),
        jsonb_build_object('seq', $1::bigint, 'pad', repeat('x', $2)))
RETURNING id::text`

// routed is what the endpoints of a case are owed: per endpoint id, the deliveries routed to
// it, and the totals by kind.
type routed struct {
	PerEndpoint map[string]int64
	ByKind      [3]int64
}

// success is the deliveries the receiver must accept: to the healthy and the slow endpoints.
func (r routed) success() int64 { return r.ByKind[healthy] + r.ByKind[slow] }

func (r routed) total() int64 { return r.ByKind[healthy] + r.ByKind[slow] + r.ByKind[failing] }

// routeBacklog is what a backlog of rows lo..hi routes: row g to the endpoints of tenant
// g % tenants. Every endpoint is in PerEndpoint, a failing one with 0, as the receiver must
// accept nothing for it.
func (c fanoutCase) routeBacklog(lo, hi int) routed {
	r := routed{PerEndpoint: make(map[string]int64, c.N)}
	for i := range c.N {
		n := int64(countResidue(lo, hi, i/c.F, c.tenants()))
		k := c.kind(i)
		r.ByKind[k] += n
		if k == failing {
			n = 0
		}
		r.PerEndpoint[endpointID(i)] = n
	}
	return r
}

// routeSeqs is routeBacklog for the events of the given seqs.
func (c fanoutCase) routeSeqs(seqs []int) routed {
	perTenant := make([]int64, c.tenants())
	for _, s := range seqs {
		perTenant[c.tenantOf(s)]++
	}
	r := routed{PerEndpoint: make(map[string]int64, c.N)}
	for i := range c.N {
		n, k := perTenant[i/c.F], c.kind(i)
		r.ByKind[k] += n
		if k == failing {
			n = 0
		}
		r.PerEndpoint[endpointID(i)] = n
	}
	return r
}

// countResidue counts the g in [lo, hi] with g % m == t (0 ≤ t < m).
func countResidue(lo, hi, t, m int) int {
	if hi < lo {
		return 0
	}
	return floorDiv(hi-t, m) - floorDiv(lo-1-t, m)
}

func floorDiv(a, b int) int {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// endpointIndex is i of the endpoint id "ep<i>", or -1.
func endpointIndex(id string) int {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "ep"))
	if err != nil || !strings.HasPrefix(id, "ep") {
		return -1
	}
	return n
}

// fanoutRows are the fan-out rows for runSuite: the ceiling, then each case.
func (e *env) fanoutRows(res *results) []suiteRow {
	res.fanout = map[string]*fanoutResult{}
	cases := e.cfg.fanoutCases()
	rows := []suiteRow{{rowFanoutCeiling, func(ctx context.Context) error {
		c, err := e.fanoutCeiling(ctx, cases)
		res.fanoutCeiling = keep(c, err)
		return err
	}}}
	for _, c := range cases {
		rows = append(rows, suiteRow{c.row(), func(ctx context.Context) error {
			run := e.fanoutBacklog
			if c.Rate {
				run = e.fanoutRate
			}
			d, err := run(ctx, c)
			res.fanout[c.row()] = keep(d, err)
			return err
		}})
	}
	return rows
}
