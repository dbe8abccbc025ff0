package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

var fanoutHeader = []string{"Fan-out (issue 40)", "Deliveries", "Throughput", "Healthy p50 / p99 / max",
	"Relay CPU-s per 100k deliveries", "Relay peak RSS", "PostgreSQL CPU-s per 100k deliveries",
	"Slot's retained WAL max / end (unconfirmed at end)", "Rows written per delivery", "Notes"}

// fanoutAsked reports whether any fan-out row was asked for.
func (r *results) fanoutAsked() bool {
	if r.cfg.selected(rowFanoutCeiling) {
		return true
	}
	for _, c := range r.cfg.fanoutCases() {
		if r.cfg.selected(c.row()) {
			return true
		}
	}
	return false
}

// writeFanout prints the fan-out rows' table and what each wrote per delivery, if any was
// asked for.
func writeFanout(w io.Writer, r *results) {
	if !r.fanoutAsked() {
		return
	}
	var rows [][]string
	add := func(name string, ok bool, cells func() []string) {
		if !r.cfg.selected(name) {
			return
		}
		if !ok {
			why := "did not run"
			if err := r.errs[name]; err != nil {
				why = firstLine(err.Error())
			}
			rows = append(rows, []string{name, dash, "FAILED", dash, dash, dash, dash, dash, dash, why})
			return
		}
		rows = append(rows, append([]string{name}, cells()...))
	}
	add(rowFanoutCeiling, r.fanoutCeiling != nil, func() []string { return r.fanoutCeilingCells(r.fanoutCeiling) })
	cases := r.cfg.fanoutCases()
	for _, c := range cases {
		d := r.fanout[c.row()]
		add(c.row(), d != nil, func() []string { return r.fanoutCells(d) })
	}
	writeTable(w, fanoutHeader, rows)
	fmt.Fprintln(w)
	var written []string
	for _, c := range cases {
		if d := r.fanout[c.row()]; d != nil && d.Activity != nil {
			written = append(written, c.row()+": "+d.Activity.perDelivery(d.ActivityDeliveries))
		}
	}
	if len(written) > 0 {
		fmt.Fprintln(w, "Rows written per 1,000 accepted deliveries, by table and what each row is (pg_stat_user_tables, "+
			"read before the relay starts and after it stopped, so the rate rows' warm-up counts too, in the deliveries and "+
			"in the rows), and WAL written per delivery (pg_stat_wal, the whole cluster's):")
		for _, s := range written {
			fmt.Fprintln(w, "- "+s)
		}
		fmt.Fprintln(w)
	}
}

func (r *results) fanoutCeilingCells(c *ceilingResult) []string {
	notes := []string{fmt.Sprintf("the lean client, %d workers, posting to the healthy endpoints' /ep/<id> of the largest case, "+
		"with no database and no ordering", concurrency),
		fmt.Sprintf("receiver CPU-s per 100k %s, client %s", per100k(c.Load.Receiver, c.Requests), per100k(c.Load.Self, c.Requests))}
	notes = appendOther(notes, c.Load.OtherCPUs(0))
	return []string{thousands(float64(c.Requests)), thousands(c.Rate) + " requests/s", dash, dash, dash, dash, dash, dash,
		strings.Join(notes, "; ")}
}

func (r *results) fanoutCells(d *fanoutResult) []string {
	c, k := d.Case, d.Endpoints
	notes := []string{"one endpoint, every event to it"}
	if c.N > 1 {
		notes[0] = fmt.Sprintf("%s endpoints in %s tenant(s) of %d, each event to its tenant's %d",
			thousands(float64(c.N)), thousands(float64(c.tenants())), c.F, c.F)
	}
	if k[failing]+k[slow] == 0 {
		notes = append(notes, "no failing or slow endpoint")
	} else {
		notes = append(notes, fmt.Sprintf("%d failing (500), %d slow (%s answers)", k[failing], k[slow], slowAnswer))
	}
	notes = append(notes, fmt.Sprintf("routed %s to healthy, %s to slow, %s to failing endpoints",
		thousands(float64(d.Routed.ByKind[healthy])), thousands(float64(d.Routed.ByKind[slow])), thousands(float64(d.Routed.ByKind[failing]))))
	throughput := thousands(d.HealthyRate) + " healthy deliveries/s"
	latency := dash
	if c.Rate {
		throughput = fmt.Sprintf("%s deliveries/s (%s events/s)", thousands(d.Achieved*float64(c.F)), thousands(d.Achieved))
		latency = fmt.Sprintf("%s / %s / %s ms", msec(d.Latency.P50), msec(d.Latency.P99), msec(d.Latency.Max))
		if d.Achieved < 0.95*float64(d.EventRate) {
			notes = append(notes, fmt.Sprintf("**the writers managed only %s of the %s commits/s asked: the machine is saturated**",
				thousands(d.Achieved), thousands(float64(d.EventRate))))
		}
	} else {
		if x := r.fanoutCeiling; x != nil && x.Rate > 0 {
			notes = append(notes, fmt.Sprintf("healthy %.2f × the fan-out ceiling", d.HealthyRate/x.Rate))
		}
		notes = append(notes, fmt.Sprintf("all accepted %s/s", thousands(d.Rate)),
			fmt.Sprintf("first delivery %s after relay start", d.Startup.Round(time.Millisecond)))
	}
	notes = append(notes, "every healthy and slow endpoint got exactly what was routed to it", d.Account.note(),
		fmt.Sprintf("receiver CPU-s per 100k deliveries %s", per100k(d.Load.Receiver, d.accepted())))
	if d.Stats.Duplicates > 0 {
		notes = append(notes, fmt.Sprintf("%d duplicates", d.Stats.Duplicates))
	}
	notes = appendOther(notes, d.Load.OtherCPUs(d.Relay.CPU))
	rowsPer := dash
	if d.Activity != nil {
		var n int64
		for _, v := range d.Activity.Writes {
			n += v
		}
		rowsPer = fmt.Sprintf("%.3f", float64(n)/float64(max(d.ActivityDeliveries, 1)))
	}
	return []string{thousands(float64(d.Routed.total())), throughput, latency, per100k(d.Relay.CPU, d.accepted()), mb(d.Relay.PeakRSS),
		pgCell(d.Load.PG, d.accepted()), fmt.Sprintf("%s / %s (%s)", mb(d.WAL.Max), mb(d.WAL.End), mb(d.WAL.EndUnconfirmed)), rowsPer, strings.Join(notes, "; ")}
}

// note says where the failing endpoints' events are.
func (a failingAccount) note() string {
	if a.Routed == 0 {
		return "no event routed to a failing endpoint"
	}
	s := fmt.Sprintf("of the %s events routed to failing endpoints over the whole run, %s in their backlogs, %s after the slot's "+
		"confirmed position, %d lost; %s attempts answered 500, %s failed attempts in the delivery log",
		thousands(float64(a.Routed)), thousands(float64(a.InBacklog)), thousands(float64(a.Unconfirmed)), len(a.Lost),
		thousands(float64(a.Attempts)), thousands(float64(a.Logged)))
	if a.NoBacklog {
		s += " (no outbox_endpoint_backlog table)"
	}
	if a.NoLog {
		s += " (no outbox_delivery_attempts table)"
	}
	return s
}

// tableRoles says what a row written to a table is, by operation, for the tables a pipeline
// with endpoints writes. A table not named here is reported by its name alone.
var tableRoles = map[string][3]string{ // inserted, updated, deleted
	"outbox_events":            {"the events, by the rate rows' writers", "done marks", "pruned"},
	"outbox_deliveries":        {"the delivery log's successes, one row per endpoint and flush, the deliveries in arrays", "", "retention"},
	"outbox_delivery_attempts": {"the delivery log's failed attempts, one row each", "", "retention"},
	"outbox_endpoint_backlog":  {"events spilled to an endpoint's backlog, one row each", "", "backlog entries delivered"},
	"outbox_endpoint_status":   {"status reports (status --endpoints), per endpoint whose figures changed", "the same, updated", ""},
	"outbox_endpoint_versions": {"endpoint versions the pipeline applied, one per endpoint at start", "", "versions pruned"},
	"outbox_pipeline_events":   {"dead letters and parked events", "", "replayed or pruned"},
	"outbox_parked_aggregates": {"parked aggregates", "", "unparked"},
	"outbox_slots":             {"the slot's record", "the slot's record", ""},
}

// perDelivery describes the activity per 1,000 deliveries: transactions, then each table's
// rows by operation, most first, with what they are; then WAL bytes per delivery.
func (a dbActivity) perDelivery(deliveries int) string {
	type entry struct {
		table string
		op    int // 0 inserted, 1 updated, 2 deleted
		n     int64
	}
	var es []entry
	for op, m := range []map[string]int64{a.Inserted, a.Updated, a.Deleted} {
		for t, n := range m {
			if n != 0 {
				es = append(es, entry{t, op, n})
			}
		}
	}
	slices.SortFunc(es, func(x, y entry) int {
		if x.n != y.n {
			return int(max(min(y.n-x.n, 1), -1))
		}
		if c := strings.Compare(x.table, y.table); c != 0 {
			return c
		}
		return x.op - y.op
	})
	d := float64(max(deliveries, 1))
	per1k := func(n int64) string { return fmt.Sprintf("%.1f", float64(n)*1000/d) }
	parts := []string{per1k(a.Commits) + " transactions"}
	for _, e := range es {
		s := fmt.Sprintf("%s %s %s", e.table, per1k(e.n), [3]string{"inserted", "updated", "deleted"}[e.op])
		if role := tableRoles[e.table][e.op]; role != "" {
			s += " (" + role + ")"
		}
		parts = append(parts, s)
	}
	parts = append(parts, fmt.Sprintf("WAL %.0f bytes (%.2f records) per delivery", float64(a.WALBytes)/d, float64(a.WALRecords)/d))
	return strings.Join(parts, "; ")
}

// fanoutTargets states issue 40's targets as PASS or MISS, if any fan-out row was asked for.
func (r *results) fanoutTargets() []string {
	if !r.fanoutAsked() {
		return nil
	}
	cases := r.cfg.fanoutCases()
	top := cases[len(cases)-1] // the largest, at its rate without faults
	at := fmt.Sprintf("N=%s, F=%d", thousands(float64(top.N)), top.F)
	scale := ""
	if top.N != targetFanoutN || top.F != targetFanoutF {
		scale = fmt.Sprintf(" (the targets are for N=%s, F=%d: BENCH_FANOUT_N and BENCH_FANOUT_F include them by default)",
			thousands(targetFanoutN), targetFanoutF)
	}
	drain := r.fanout[fanoutCase{N: top.N, F: top.F}.row()]
	cleanDrain := r.fanout[fanoutCase{N: top.N, F: top.F, NoFaults: true}.row()]
	one := r.fanout[fanoutCase{N: 1, F: 1}.row()]
	rate := r.fanout[fanoutCase{N: top.N, F: top.F, Rate: true}.row()]
	clean := r.fanout[top.row()]
	relayCPU := func(d *fanoutResult) time.Duration { return d.Relay.CPU }
	pgCPU := func(d *fanoutResult) time.Duration { return d.Load.PG.Total }
	return []string{
		r.fanoutCeilingTarget(at, drain, cleanDrain) + scale,
		fanoutCPUTarget(fmt.Sprintf("relay CPU per delivery at %s ≤ %.1f × one endpoint's (issue 40)", at, targetFanoutRelayCPU),
			targetFanoutRelayCPU, drain, cleanDrain, one, relayCPU) + scale,
		fanoutCPUTarget(fmt.Sprintf("PostgreSQL CPU per delivery at %s ≤ %.1f × one endpoint's (issue 40)", at, targetFanoutPGCPU),
			targetFanoutPGCPU, drain, cleanDrain, one, pgCPU) + scale,
		fanoutRSSTarget(at, drain, rate, cleanDrain) + scale,
		fanoutP99Target(at, rate, clean) + scale,
	}
}

// withoutFaults is the same figure for the drain without failing or slow endpoints, if it ran.
func withoutFaults(clean *fanoutResult, f func(*fanoutResult) string) string {
	if clean == nil {
		return ""
	}
	return "; without failing or slow endpoints " + f(clean)
}

func (r *results) fanoutCeilingTarget(at string, drain, clean *fanoutResult) string {
	name := fmt.Sprintf("fan-out drain at %s ≥ %.1f × the HTTP ceiling, healthy deliveries/s (issue 40)", at, targetFanoutCeiling)
	c := r.fanoutCeiling
	if drain == nil || c == nil || c.Rate <= 0 {
		return "MISS " + name + ": no data"
	}
	ratio := func(d *fanoutResult) float64 { return d.HealthyRate / c.Rate }
	return fmt.Sprintf("%s %s: %.2f (%s vs %s requests/s%s)", verdict(ratio(drain) >= targetFanoutCeiling), name, ratio(drain),
		thousands(drain.HealthyRate), thousands(c.Rate),
		withoutFaults(clean, func(d *fanoutResult) string { return fmt.Sprintf("%.2f", ratio(d)) }))
}

// fanoutCPUTarget compares CPU per accepted delivery of the drain with the one-endpoint drain's.
func fanoutCPUTarget(name string, limit float64, drain, clean, one *fanoutResult, cpu func(*fanoutResult) time.Duration) string {
	if drain == nil || one == nil || cpu(one) <= 0 {
		return "MISS " + name + ": no data (the one-endpoint drain needs 1 in BENCH_FANOUT_N)"
	}
	per := func(d *fanoutResult) float64 { return cpu(d).Seconds() / float64(max(d.accepted(), 1)) }
	ratio := per(drain) / per(one)
	return fmt.Sprintf("%s %s: %.2f (%s vs %s CPU-s per 100k deliveries%s)", verdict(ratio <= limit), name, ratio,
		per100k(cpu(drain), drain.accepted()), per100k(cpu(one), one.accepted()),
		withoutFaults(clean, func(d *fanoutResult) string { return fmt.Sprintf("%.2f", per(d)/per(one)) }))
}

func fanoutRSSTarget(at string, drain, rate, clean *fanoutResult) string {
	name := fmt.Sprintf("relay peak RSS < %s at %s, drain and fixed rate (issue 40)", mb(targetFanoutRSS), at)
	if drain == nil || rate == nil {
		return "MISS " + name + ": no data"
	}
	peak := max(drain.Relay.PeakRSS, rate.Relay.PeakRSS)
	return fmt.Sprintf("%s %s: %s (drain %s, fixed rate %s%s)", verdict(peak < targetFanoutRSS), name, mb(peak),
		mb(drain.Relay.PeakRSS), mb(rate.Relay.PeakRSS),
		withoutFaults(clean, func(d *fanoutResult) string { return "drain " + mb(d.Relay.PeakRSS) }))
}

func fanoutP99Target(at string, rate, clean *fanoutResult) string {
	name := fmt.Sprintf("healthy endpoints' p99 at %s ≤ %.0f × the same rate with no failing or slow endpoint (issue 40)",
		at, targetFanoutP99)
	if rate == nil || clean == nil || clean.Latency.P99 <= 0 {
		return "MISS " + name + ": no data"
	}
	ratio := float64(rate.Latency.P99) / float64(clean.Latency.P99)
	return fmt.Sprintf("%s %s: %.2f (%s vs %s ms)", verdict(ratio <= targetFanoutP99), name, ratio,
		msec(rate.Latency.P99), msec(clean.Latency.P99))
}

// fanoutMethod is the fan-out rows' line in the report's method notes.
const fanoutMethod = "Fan-out rows: N endpoints made with plain SQL before the slot (endpoint i of tenant t<i / F>, every event " +
	"type), every event (aggregate n % 1024, tenant t<n % (N/F)>) going to the F endpoints of its tenant; endpoint i fails " +
	"every attempt (500, /fail/<id>) if i % 100 = 50 and answers after 1 s (/slow/<id>) if i % 100 = 99. Backlog rows drain " +
	"BENCH_EVENTS deliveries written while the relay is stopped; throughput is the healthy endpoints' deliveries from the " +
	"first to the last, against the fan-out ceiling (the lean client posting the same bodies to the healthy paths). " +
	"Rate rows commit BENCH_FANOUT_RATE/F events/s for BENCH_STEADY after a second's warm-up; latency is each healthy " +
	"delivery's arrival minus its INSERT's return. CPU covers the window until every healthy and slow endpoint has " +
	"everything and is per accepted delivery (healthy and slow); the slot's retained WAL (pg_current_wal_lsn() - " +
	"restart_lsn) is sampled every 500 ms. Once the relay has stopped, every event routed to a failing endpoint must be in " +
	"its backlog or after the slot's confirmed position (decoded from the slot with pg_logical_slot_peek_binary_changes), " +
	"and every other endpoint must have received exactly what was routed to it, or the row fails."
