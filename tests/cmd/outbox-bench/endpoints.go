package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The endpoint rows (issue 24, rule 3): one pipeline run with --endpoints drains the backlog to
// the rows of outbox_endpoints, with 1, 10, 100 and 1,000 endpoints, the events spread over as
// many tenants so that each goes to exactly one endpoint, and with each event fanned out to 10
// endpoints. One walsender decodes the WAL whatever the number of endpoints, so PostgreSQL's
// CPU per event should not grow with it; the relay's CPU per delivery and its peak RSS show
// what the lanes cost.

// endpointCase is one endpoint row.
type endpointCase struct {
	row       string
	endpoints int
	// fanout: every endpoint has no tenant, so each event goes to all of them; otherwise
	// endpoint i belongs to tenant 't<i>' and receives that tenant's events only.
	fanout bool
}

// endpointCases are the endpoint rows, in table order. The names have no commas (BENCH_ONLY
// splits on them) and select one row each ("endpoints 10" does not select "Endpoints 100").
var endpointCases = []endpointCase{
	{"Endpoints 1", 1, false},
	{"Endpoints 10", 10, false},
	{"Endpoints 100", 100, false},
	{"Endpoints 1000", 1000, false},
	{"Endpoints fan-out 10", 10, true},
}

// Limits of issue 24: PostgreSQL's CPU per event at most 15% above the 1-endpoint row's, and
// the relay under 200 MB at 1,000 endpoints.
const (
	targetEndpointsPG  = 1.15
	targetEndpointsRSS = 200_000_000
	endpointsRSSAt     = 1000
)

// routes is how many endpoints each event goes to.
func (c endpointCase) routes() int {
	if c.fanout {
		return c.endpoints
	}
	return 1
}

// tenants is how many tenants the events are spread over: one per endpoint (the fan-out row
// too, whose endpoints take every tenant's events).
func (c endpointCase) tenants() int { return c.endpoints }

func endpointID(i int) string { return fmt.Sprintf("ep%d", i) }

// expected is the distinct deliveries each endpoint must receive of a backlog of rows
// 1..events, row g belonging to tenant g % tenants().
func (c endpointCase) expected(events int) map[string]int64 {
	m := make(map[string]int64, c.endpoints)
	for i := range c.endpoints {
		switch {
		case c.fanout:
			m[endpointID(i)] = int64(events)
		case i == 0:
			m[endpointID(i)] = int64(events / c.endpoints)
		case i <= events:
			m[endpointID(i)] = int64((events-i)/c.endpoints + 1)
		}
	}
	return m
}

// endpointsSQL creates endpoints ep0..ep<$4-1>: URL $1 || id, one x-signature secret $2, tenant
// 't' || i unless $3 (fan-out: no tenant), every event type.
const endpointsSQL = `
INSERT INTO outbox_endpoints (id, url, secrets, tenant_id, event_types)
SELECT 'ep' || i, $1 || 'ep' || i, jsonb_build_array(jsonb_build_object('secret', $2::text)),
       CASE WHEN $3 THEN NULL ELSE 't' || i END, '{*}'
FROM generate_series(0, $4 - 1) i`

// createEndpoints inserts the case's endpoints, all posting to the receiver's /ep/<id>.
func (db *benchDB) createEndpoints(ctx context.Context, c endpointCase, urlPrefix string) error {
	if _, err := db.conn.Exec(ctx, endpointsSQL, urlPrefix, benchSecret, c.fanout, c.endpoints); err != nil {
		return fmt.Errorf("create %d endpoints: %w", c.endpoints, err)
	}
	return nil
}

// endpointsResult is one endpoint row: a drain whose deliveries are (endpoint, event) pairs.
type endpointsResult struct {
	drainResult
	Endpoints  int
	Fanout     bool
	Deliveries int // events × routes
	// Activity is what the database counted while the relay ran (nil if it could not be read).
	Activity *dbActivity
}

// endpointsDrain creates the case's endpoints, then the slot, writes the backlog over the
// tenants, then drains it with `outbox-relay run --endpoints` and checks what each endpoint
// received. The endpoints exist before the slot, so the relay starts with them all (one
// bootstrap statement) and the window measures the drain, not the endpoints' creation: through
// the stream, each of 1,000 creations costs the relay a statement of its own to record the
// version (PGEndpointStore.Record), which is a cost per endpoint change, not per event.
func (e *env) endpointsDrain(ctx context.Context, prefix string, c endpointCase, events, aggregates int) (endpointsResult, error) {
	res := endpointsResult{drainResult: drainResult{Events: events, Aggregates: aggregates},
		Endpoints: c.endpoints, Fanout: c.fanout, Deliveries: events * c.routes()}
	db, err := newBenchDB(ctx, e.cluster, prefix)
	if err != nil {
		return res, err
	}
	defer db.drop()
	if err := db.createEndpoints(ctx, c, e.recv.endpointURL()); err != nil {
		return res, err
	}
	if err := db.createSlot(ctx, relaySlot); err != nil {
		return res, err
	}
	e.logf("%s: writing %d events over %d aggregates and %d tenants", prefix, events, aggregates, c.tenants())
	if _, err := db.writeTenantBacklog(ctx, events, aggregates, c.tenants()); err != nil {
		return res, err
	}
	e.logf("%s: relay draining to %d endpoints (%d deliveries)", prefix, c.endpoints, res.Deliveries)
	start := func() (*relayProc, error) { return e.startEndpointsRelay(ctx, db) }
	before, actErr := db.activity(ctx)
	if err := e.measure(ctx, &res.drainResult, res.Deliveries, start, nil); err != nil {
		return res, err
	}
	if actErr == nil {
		actErr = db.waitAlone(ctx, 5*time.Second)
	}
	if actErr == nil {
		var after dbActivity
		if after, actErr = db.activity(ctx); actErr == nil {
			a := after.minus(before)
			res.Activity = &a
		}
	}
	if actErr != nil {
		e.logf("%s: no database activity in the report: %v", prefix, actErr)
	}
	got, err := e.recv.PerEndpoint(ctx)
	if err != nil {
		return res, err
	}
	if err := checkPerEndpoint(got, c.expected(events), res.Stats.Unique); err != nil {
		return res, err
	}
	return res, checkStats(res.Stats, true)
}

// startEndpointsRelay runs the bench pipeline with --endpoints: no webhook URL or secret, the
// destinations are the rows of outbox_endpoints.
func (e *env) startEndpointsRelay(ctx context.Context, db *benchDB) (*relayProc, error) {
	return startRelay(ctx, e.relayBin, relayTarget{DSN: db.dsn, Slot: relaySlot, Publication: benchPublication,
		DestArgs: []string{"--endpoints"}})
}

// checkPerEndpoint fails unless each endpoint received exactly its expected deliveries and
// nothing else arrived (unique is every distinct delivery the receiver accepted, /hook too).
func checkPerEndpoint(got, want map[string]int64, unique int) error {
	var wrong []string
	var total, wantTotal int64
	for id, n := range want {
		wantTotal += n
		if got[id] != n {
			wrong = append(wrong, fmt.Sprintf("%s got %d, want %d", id, got[id], n))
		}
	}
	for id, n := range got {
		total += n
		if _, ok := want[id]; !ok {
			wrong = append(wrong, fmt.Sprintf("%s (no such endpoint) got %d", id, n))
		}
	}
	if int64(unique) != total {
		wrong = append(wrong, fmt.Sprintf("%d deliveries outside the endpoints", int64(unique)-total))
	}
	if len(wrong) == 0 {
		return nil
	}
	slices.Sort(wrong)
	if len(wrong) > 5 {
		wrong = append(wrong[:5], fmt.Sprintf("and %d more", len(wrong)-5))
	}
	return fmt.Errorf("endpoints received %d deliveries, want %d: %s", total, wantTotal, strings.Join(wrong, "; "))
}

// endpointRows are the endpoint rows for runSuite.
func (e *env) endpointRows(res *results) []suiteRow {
	res.endpoints = map[string]*endpointsResult{}
	var rows []suiteRow
	for _, c := range endpointCases {
		rows = append(rows, suiteRow{c.row, func(ctx context.Context) error {
			prefix := fmt.Sprintf("endpoints_%d", c.endpoints)
			if c.fanout {
				prefix = fmt.Sprintf("fanout_%d", c.endpoints)
			}
			d, err := e.endpointsDrain(ctx, prefix, c, e.cfg.Events, 1000)
			res.endpoints[c.row] = keep(d, err)
			return err
		}})
	}
	return rows
}

// endpointBase is the 1-endpoint row, which the others' PostgreSQL CPU is compared with.
func (r *results) endpointBase() *endpointsResult { return r.endpoints[endpointCases[0].row] }

// pgPerEvent is PostgreSQL's CPU-seconds per event of a row.
func pgPerEvent(d *endpointsResult) float64 { return d.Load.PG.Total.Seconds() / float64(d.Events) }

// pgRelative is a row's PostgreSQL CPU per event over the 1-endpoint row's; false if there is
// no base to compare with.
func (r *results) pgRelative(d *endpointsResult) (float64, bool) {
	base := r.endpointBase()
	if base == nil || pgPerEvent(base) <= 0 {
		return 0, false
	}
	return pgPerEvent(d) / pgPerEvent(base), true
}

// endpointCells reports an endpoint row: relay and receiver CPU per 100k deliveries,
// PostgreSQL's per 100k events and relative to the 1-endpoint row.
func (r *results) endpointCells(c endpointCase, d *endpointsResult) []string {
	spread := fmt.Sprintf("%d endpoint(s) over %d tenant(s), each event to one endpoint", c.endpoints, c.tenants())
	if c.fanout {
		spread = fmt.Sprintf("%d endpoints without a tenant, each event to all %d: %s deliveries",
			c.endpoints, c.endpoints, thousands(float64(d.Deliveries)))
	}
	notes := []string{spread, "relay and receiver CPU-s per 100k deliveries"}
	if rel, ok := r.pgRelative(d); ok && d != r.endpointBase() {
		notes = append(notes, fmt.Sprintf("PostgreSQL %.2f × the 1-endpoint row's", rel))
	}
	if d.Activity != nil {
		notes = append(notes, d.Activity.note(d.Events))
	}
	notes = append(notes, r.ceilingNote(&d.drainResult),
		fmt.Sprintf("first delivery %s after relay start", d.Startup.Round(time.Millisecond)))
	if d.Stats.Duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicates", d.Stats.Duplicates))
	}
	notes = appendOther(notes, d.Load.OtherCPUs(d.Relay.CPU))
	return []string{thousands(float64(d.Events)), thousands(float64(d.Aggregates)), thousands(d.Rate) + " deliveries/s",
		dash, per100k(d.Relay.CPU, d.Deliveries), mb(d.Relay.PeakRSS), per100k(d.Load.Receiver, d.Deliveries),
		pgCell(d.Load.PG, d.Events), strings.Join(notes, "; ")}
}

// endpointTargets states issue 24's limits as PASS or MISS, if any endpoint row was asked for.
func (r *results) endpointTargets() []string {
	var asked bool
	for _, c := range endpointCases {
		asked = asked || r.cfg.selected(c.row)
	}
	if !asked {
		return nil
	}
	return []string{r.endpointPGTarget(), r.endpointRSSTarget()}
}

func (r *results) endpointPGTarget() string {
	name := fmt.Sprintf("PostgreSQL CPU-s per 100k events ≤ %.2f × the 1-endpoint row's (issue 24)", targetEndpointsPG)
	if r.endpointBase() == nil {
		return "MISS " + name + ": no 1-endpoint row"
	}
	ok := true
	var figs []string
	for _, c := range endpointCases[1:] {
		d := r.endpoints[c.row]
		if d == nil {
			ok = false
			figs = append(figs, c.row+" no data")
			continue
		}
		rel, _ := r.pgRelative(d)
		ok = ok && rel <= targetEndpointsPG
		figs = append(figs, fmt.Sprintf("%s %.2f (%s)", strings.TrimPrefix(c.row, "Endpoints "), rel, per100k(d.Load.PG.Total, d.Events)))
	}
	return fmt.Sprintf("%s %s: 1 endpoint %s; %s", verdict(ok), name, per100k(r.endpointBase().Load.PG.Total, r.endpointBase().Events),
		strings.Join(figs, ", "))
}

func (r *results) endpointRSSTarget() string {
	name := fmt.Sprintf("relay peak RSS < %s at %s endpoints (issue 24)", mb(targetEndpointsRSS), thousands(endpointsRSSAt))
	for _, c := range endpointCases {
		if d := r.endpoints[c.row]; c.endpoints == endpointsRSSAt && !c.fanout && d != nil {
			return fmt.Sprintf("%s %s: %s", verdict(d.Relay.PeakRSS < targetEndpointsRSS), name, mb(d.Relay.PeakRSS))
		}
	}
	return "MISS " + name + ": no data"
}
