package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

func TestParseCounts(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
		fail string // "" parses
	}{
		{"1,1000,10000", []int{1, 1000, 10000}, ""},
		{" 10000, 1 ,1000,1", []int{1, 1000, 10000}, ""},
		{"10_000", []int{10000}, ""},
		{"", nil, `"" is not a whole number`},
		{"1,,2", nil, `"" is not a whole number`},
		{"0", nil, `"0" is not a whole number from 1 to 100000`},
		{"100001", nil, `"100001"`},
		{"ten", nil, `"ten"`},
	} {
		got, err := parseCounts("BENCH_FANOUT_N", tc.in, 1, 100_000)
		switch {
		case tc.fail == "" && (err != nil || !slices.Equal(got, tc.want)):
			t.Errorf("%q: got %v, %v; want %v", tc.in, got, err, tc.want)
		case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail) ||
			!strings.Contains(err.Error(), "e.g. BENCH_FANOUT_N=1,1000,10000")):
			t.Errorf("%q: got %v, %v; want an error naming %s and an example", tc.in, got, err, tc.fail)
		}
	}
}

// TestFanoutFromEnv checks the knobs as a user sets them, and that a combination without any
// case is refused with what to change.
func TestFanoutFromEnv(t *testing.T) {
	t.Setenv("BENCH_FANOUT_N", "1,100")
	t.Setenv("BENCH_FANOUT_F", "10,1")
	t.Setenv("BENCH_FANOUT_RATE", "500")
	cfg, err := configFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cfg.FanoutN, []int{1, 100}) || !slices.Equal(cfg.FanoutF, []int{1, 10}) || cfg.fanoutRate() != 500 {
		t.Fatalf("config %+v, want N 1,100, F 1,10, rate 500", cfg)
	}
	t.Setenv("BENCH_FANOUT_N", "5")
	t.Setenv("BENCH_FANOUT_F", "10")
	if _, err := configFromEnv(); err == nil || !strings.Contains(err.Error(), "include 1 in BENCH_FANOUT_F") {
		t.Fatalf("N=5, F=10: err %v, want the fix named", err)
	}
	t.Setenv("BENCH_FANOUT_F", "1")
	t.Setenv("BENCH_FANOUT_RATE", "5")
	if _, err := configFromEnv(); err == nil || !strings.Contains(err.Error(), "at least 10") {
		t.Fatalf("rate 5: err %v, want it refused", err)
	}
}

// TestFanoutCases checks the rows the defaults run, their order, and that BENCH_ONLY can name
// each alone without selecting them through the words other rows' users type.
func TestFanoutCases(t *testing.T) {
	var got []string
	for _, c := range (config{}).fanoutCases() {
		got = append(got, c.row())
	}
	want := []string{
		"Fanout backlog N=1 F=1", "Fanout backlog N=1000 F=1", "Fanout backlog N=1000 F=10",
		"Fanout backlog N=10000 F=1", "Fanout backlog N=10000 F=10", "Fanout backlog N=10000 F=10 no faults",
		"Fanout rate N=1 F=1", "Fanout rate N=1000 F=1", "Fanout rate N=1000 F=10",
		"Fanout rate N=10000 F=1", "Fanout rate N=10000 F=10", "Fanout rate N=10000 F=10 no faults",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows\n%q\nwant\n%q", got, want)
	}
	all := append([]string{rowFanoutCeiling}, got...)
	for _, only := range []string{"drain", "steady", "fan-out", "endpoints"} {
		for _, row := range all {
			if (config{Only: []string{only}}).selected(row) {
				t.Errorf("BENCH_ONLY=%q selects %q", only, row)
			}
		}
	}
	for _, row := range all {
		if strings.Contains(row, ",") {
			t.Errorf("row %q has a comma, which BENCH_ONLY splits on", row)
		}
		var sel []string
		for _, other := range all {
			if (config{Only: []string{strings.ToLower(row)}}).selected(other) {
				sel = append(sel, other)
			}
		}
		wantSel := []string{row}
		if strings.HasSuffix(row, "N=10000 F=10") { // a prefix of its run without faults
			wantSel = append(wantSel, row+" no faults")
		}
		if !slices.Equal(sel, wantSel) {
			t.Errorf("BENCH_ONLY=%q selects %q", strings.ToLower(row), sel)
		}
		if !(config{Only: []string{"fanout"}}).selected(row) {
			t.Errorf("BENCH_ONLY=fanout does not select %q", row)
		}
	}
	var one []string
	for _, row := range all {
		if (config{Only: []string{"fanout backlog n=1"}}).selected(row) {
			one = append(one, row)
		}
	}
	if !slices.Equal(one, []string{"Fanout backlog N=1 F=1"}) {
		t.Errorf(`BENCH_ONLY="fanout backlog n=1" selects %q, want the one-endpoint drain alone`, one)
	}
	small := config{FanoutN: []int{1, 5, 100}, FanoutF: []int{1, 10}}.fanoutCases()
	if n := len(small); n != 10 || small[4] != (fanoutCase{N: 100, F: 10, NoFaults: true}) ||
		small[n-1] != (fanoutCase{N: 100, F: 10, Rate: true, NoFaults: true}) {
		t.Fatalf("N 1,5,100 × F 1,10: %+v, want (1,1) (5,1) (100,1) (100,10), then (100,10) without faults, as drains, then at a rate", small)
	}
}

// TestFanoutKinds checks 1% failing and 1% slow, spread over the tenants, and none without faults.
func TestFanoutKinds(t *testing.T) {
	for _, tc := range []struct {
		c                   fanoutCase
		failing, slow, tens int // tens: tenants with a failing endpoint
	}{
		{fanoutCase{N: 1, F: 1}, 0, 0, 0},
		{fanoutCase{N: 100, F: 10}, 1, 1, 1},
		{fanoutCase{N: 1000, F: 1}, 10, 10, 10},
		{fanoutCase{N: 10000, F: 10}, 100, 100, 100},
		{fanoutCase{N: 10000, F: 10, NoFaults: true}, 0, 0, 0},
	} {
		k := tc.c.kinds()
		tenants := map[int]bool{}
		for _, id := range tc.c.failingIDs() {
			tenants[endpointIndex(id)/tc.c.F] = true
		}
		if k[failing] != tc.failing || k[slow] != tc.slow || k[healthy] != tc.c.N-tc.failing-tc.slow || len(tenants) != tc.tens {
			t.Errorf("%+v: kinds %v over %d tenants, want %d failing, %d slow over %d tenants", tc.c, k, len(tenants), tc.failing, tc.slow, tc.tens)
		}
	}
}

// TestFanoutRoute checks the deliveries owed against routing each event by hand.
func TestFanoutRoute(t *testing.T) {
	brute := func(c fanoutCase, seqs []int) routed {
		r := routed{PerEndpoint: map[string]int64{}}
		for i := range c.N {
			r.PerEndpoint[endpointID(i)] = 0
		}
		for _, s := range seqs {
			for i := range c.N {
				if i/c.F == s%c.tenants() { // endpoint i has tenant t<i/F>, event s tenant t<s % tenants>
					k := c.kind(i)
					r.ByKind[k]++
					if k != failing {
						r.PerEndpoint[endpointID(i)]++
					}
				}
			}
		}
		return r
	}
	for _, c := range []fanoutCase{{N: 1, F: 1}, {N: 100, F: 1}, {N: 100, F: 10}, {N: 200, F: 10, NoFaults: true}} {
		for _, span := range [][2]int{{1, 1}, {1, 999}, {1, 1000}, {37, 2001}, {5, 4}} {
			var seqs []int
			for g := span[0]; g <= span[1]; g++ {
				seqs = append(seqs, g)
			}
			want := brute(c, seqs)
			for name, got := range map[string]routed{"backlog": c.routeBacklog(span[0], span[1]), "seqs": c.routeSeqs(seqs)} {
				if got.ByKind != want.ByKind || fmt.Sprint(got.PerEndpoint) != fmt.Sprint(want.PerEndpoint) {
					t.Errorf("%+v rows %v, %s: %v %v, want %v %v", c, span, name, got.ByKind, got.PerEndpoint, want.ByKind, want.PerEndpoint)
				}
			}
		}
	}
}

// TestHealthyRateAndLatency checks that only the healthy endpoints' deliveries count, and that
// a healthy delivery that never arrived fails the row.
func TestHealthyRateAndLatency(t *testing.T) {
	c := fanoutCase{N: 100, F: 10} // ep50 fails, ep99 slow; tenant t0 is ep0..ep9
	arrivals := map[string]int64{"ep1 a": 1e9, "ep2 a": 2e9, "ep3 a": 3e9, "ep99 b": 100e9, "ep50 b": 50e9, "bogus": 0}
	if r := healthyRate(c, arrivals); r != 1 {
		t.Fatalf("healthy rate %v, want 1/s (3 healthy deliveries over 2 s)", r)
	}
	commits := []commit{{ID: "a", At: 0, Seq: 10}} // tenant 0: ep0..ep9, all healthy
	for i := range 10 {
		arrivals[fmt.Sprintf("ep%d a", i)] = int64(i+1) * int64(time.Millisecond)
	}
	s, err := healthyLatency(c, commits, arrivals)
	if err != nil || s.N != 10 || s.Max != 10*time.Millisecond || s.P50 != 5*time.Millisecond {
		t.Fatalf("latency %+v, %v; want 10 deliveries, p50 5ms, max 10ms", s, err)
	}
	// Tenant 5 holds ep50 (failing, not waited for) and ep59; ep59 missing fails.
	commits = append(commits, commit{ID: "b", At: 0, Seq: 5})
	for i := 51; i < 59; i++ {
		arrivals[fmt.Sprintf("ep%d b", i)] = 1
	}
	if _, err := healthyLatency(c, commits, arrivals); err == nil || !strings.Contains(err.Error(), "ep59") {
		t.Fatalf("ep59 missing: err %v, want it named", err)
	}
	arrivals["ep59 b"] = 1
	if _, err := healthyLatency(c, commits, arrivals); err != nil {
		t.Fatalf("with ep59: %v", err)
	}
}

// TestActivityPerDelivery checks the rows written per 1,000 deliveries by table and operation,
// most first, with what each is, and WAL per delivery.
func TestActivityPerDelivery(t *testing.T) {
	a := dbActivity{Commits: 30,
		Inserted: map[string]int64{"outbox_deliveries": 5, "outbox_new_table": 7},
		Updated:  map[string]int64{"outbox_events": 1000},
		Deleted:  map[string]int64{"outbox_endpoint_backlog": 0},
		WALBytes: 1_500_000, WALRecords: 10_000}
	got := a.perDelivery(10_000)
	want := "3.0 transactions; outbox_events 100.0 updated (done marks); outbox_new_table 0.7 inserted; " +
		"outbox_deliveries 0.5 inserted (the delivery log's successes, one row per endpoint and flush, the deliveries in arrays); " +
		"WAL 150 bytes (1.00 records) per delivery"
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

// TestFailingAccount checks that an event of a failing endpoint in neither place fails the row.
func TestFailingAccount(t *testing.T) {
	ok := failingAccount{Routed: 3, InBacklog: 1, Unconfirmed: 2, Attempts: 12, Logged: 12}
	if err := ok.check(); err != nil {
		t.Fatal(err)
	}
	if n := ok.note(); !strings.Contains(n, "1 in their backlogs, 2 after the slot's confirmed position, 0 lost") {
		t.Fatalf("note %q", n)
	}
	lost := failingAccount{Routed: 3, InBacklog: 1, Lost: []string{"ep50 x", "ep50 y"}}
	if err := lost.check(); err == nil || !strings.Contains(err.Error(), "2 of 3") || !strings.Contains(err.Error(), "ep50 x") {
		t.Fatalf("lost: err %v, want 2 of 3 lost, with an example", err)
	}
}

// TestFanoutTargets checks each target's verdict on both sides of its limit.
func TestFanoutTargets(t *testing.T) {
	cfg := config{FanoutN: []int{1, 100}, FanoutF: []int{1, 10}}
	mk := func(c fanoutCase, relayCPU, pgCPU time.Duration, rss int64, p99 time.Duration, healthyRate float64) *fanoutResult {
		d := &fanoutResult{Case: c, HealthyRate: healthyRate, Latency: summary{P99: p99}}
		d.Routed.ByKind[healthy] = 100_000
		d.Relay = usage{CPU: relayCPU, PeakRSS: rss}
		d.Load.PG.Total = pgCPU
		return d
	}
	build := func(good bool) *results {
		f := 1.0
		if !good {
			f = 2
		}
		one, top := fanoutCase{N: 1, F: 1}, fanoutCase{N: 100, F: 10}
		rate, clean := fanoutCase{N: 100, F: 10, Rate: true}, fanoutCase{N: 100, F: 10, Rate: true, NoFaults: true}
		cleanDrain := fanoutCase{N: 100, F: 10, NoFaults: true}
		r := &results{cfg: cfg, fanoutCeiling: &ceilingResult{Rate: 10_000}, fanout: map[string]*fanoutResult{
			one.row(): mk(one, 3*time.Second, 3*time.Second, 100e6, 0, 10_000),
			// at the limits when good (1.1 ×, 0.25 ×, 149 MB, 1.9 ×, 0.75), past them when not
			top.row():   mk(top, time.Duration(f*3.3*float64(time.Second)), time.Duration(f*0.75*float64(time.Second)), 140e6, 0, 7_500/f),
			rate.row():  mk(rate, 0, 0, int64(f*149e6), time.Duration(f*1.9*float64(time.Millisecond)), 0),
			clean.row(): mk(clean, 0, 0, 100e6, time.Millisecond, 0),
			// without faults it passes all three, whatever the faulted run does
			cleanDrain.row(): mk(cleanDrain, 3*time.Second, 0, 120e6, 0, 9_000),
		}}
		return r
	}
	for _, good := range []bool{true, false} {
		lines := build(good).fanoutTargets()
		if len(lines) != 5 {
			t.Fatalf("%d target lines, want 5: %q", len(lines), lines)
		}
		for _, l := range lines {
			if want := verdict(good); !strings.HasPrefix(l, want+" ") || !strings.Contains(l, "(issue 40)") ||
				!strings.Contains(l, "N=100, F=10") || !strings.Contains(l, "the targets are for N=10,000, F=10") {
				t.Errorf("good=%v: %q, want %s at N=100, F=10 with the scale noted", good, l, want)
			}
			if !strings.Contains(l, "p99") && !strings.Contains(l, "without failing or slow endpoints") {
				t.Errorf("good=%v: %q does not give the drain without faults", good, l)
			}
		}
	}
	none := (&results{cfg: cfg}).fanoutTargets()
	for _, l := range none {
		if !strings.HasPrefix(l, "MISS ") || !strings.Contains(l, "no data") {
			t.Errorf("no results: %q, want MISS with no data", l)
		}
	}
	if got := (&results{cfg: config{Only: []string{"steady"}}}).fanoutTargets(); got != nil {
		t.Errorf("fan-out rows not asked for: targets %q, want none", got)
	}
}

// TestReceiverFailingAndSlowEndpoints checks what the fan-out rows rely on: /fail answers 500
// and counts the attempt and the event, never a delivery; /slow answers after slowAnswer and
// counts a delivery of its endpoint; both refuse a bad signature.
func TestReceiverFailingAndSlowEndpoints(t *testing.T) {
	recv := newReceiver(benchSecret)
	srv := httptest.NewServer(recv.handler())
	defer srv.Close()
	post := func(path string, s signer, reqs ...request) error {
		p := &stdPoster{url: srv.URL + path, client: newStdClient(1), signer: s}
		_, err := runCeiling(context.Background(), reqs, 1, func() (poster, error) { return p, nil })
		return err
	}
	good, bad := signer{keys: [][]byte{[]byte(benchSecret)}}, signer{keys: [][]byte{[]byte("not-the-secret-at-all")}}
	ev := func(id string) request {
		return request{ID: id, AggregateType: "order", AggregateID: "1", EventType: "e", Body: []byte(`{"seq": 1}`)}
	}
	if err := post("/fail/ep50", good, ev("a")); err == nil || !strings.Contains(err.Error(), "500") {
		t.Fatalf("/fail: err %v, want a 500", err)
	}
	_ = post("/fail/ep50", good, ev("a"))
	_ = post("/fail/ep50", good, ev("b"))
	if err := post("/fail/ep50", bad, ev("c")); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("/fail with a bad signature: err %v, want a 401", err)
	}
	start := time.Now()
	if err := post("/slow/ep99", good, ev("a")); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < slowAnswer {
		t.Fatalf("/slow answered after %s, want at least %s", took, slowAnswer)
	}
	st := recv.snapshot()
	recv.mu.Lock()
	f, per := recv.failures["ep50"], fmt.Sprint(recv.perEndpoint)
	recv.mu.Unlock()
	if f == nil || f.Attempts != 3 || f.Events != 2 || per != "map[ep99:1]" || st.Unique != 1 || st.BadSignatures != 1 {
		t.Fatalf("failures %+v, per endpoint %s, stats %+v; want ep50 3 attempts of 2 events, ep99 1 delivery, 1 bad signature", f, per, st)
	}
}

// TestFanoutSetup runs a fan-out row's setup and accounting on a real cluster, the relay not
// involved: the endpoints' URLs say what fanoutCase.kind says, routing by tenant as the relay
// does gives what the rows require of the receiver, and the failing endpoints' account finds
// events in a backlog and after the slot's confirmed position, and calls the rest lost.
func TestFanoutSetup(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL: skipped with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pgtest.Start(ctx, pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	const events = 300
	for _, c := range []fanoutCase{{N: 1, F: 1}, {N: 100, F: 1}, {N: 100, F: 10}, {N: 100, F: 10, NoFaults: true}} {
		t.Run(c.row(), func(t *testing.T) {
			db, err := newBenchDB(ctx, cluster, "fanout_setup")
			if err != nil {
				t.Fatal(err)
			}
			defer db.drop()
			if err := db.createFanoutEndpoints(ctx, c, "http://127.0.0.1:1"); err != nil {
				t.Fatal(err)
			}
			if err := db.createSlot(ctx, relaySlot); err != nil {
				t.Fatal(err)
			}
			first, err := db.writeTenantBacklog(ctx, events, fanoutAggregates, c.tenants())
			if err != nil {
				t.Fatal(err)
			}
			for seq := events + 1; seq <= events+10; seq++ { // as the rate rows write them
				if _, err := db.conn.Exec(ctx, fanoutRateSQL, seq, payloadPad, c.tenants()); err != nil {
					t.Fatal(err)
				}
			}
			checkFanoutRouting(ctx, t, db, c, events+10)
			checkFailingAccount(ctx, t, db, c, first)
		})
	}
}

// checkFanoutRouting compares what SQL routes by tenant with routeBacklog, and each URL with
// the endpoint's kind.
func checkFanoutRouting(ctx context.Context, t *testing.T, db *benchDB, c fanoutCase, events int) {
	t.Helper()
	rows, err := db.conn.Query(ctx, `SELECT e.id, e.url, count(ev.id) FROM outbox_endpoints e
		LEFT JOIN outbox_events ev ON ev.tenant_id = e.tenant_id GROUP BY e.id, e.url`)
	if err != nil {
		t.Fatal(err)
	}
	got, byKind := map[string]int64{}, [3]int64{}
	for rows.Next() {
		var id, url string
		var n int64
		if err := rows.Scan(&id, &url, &n); err != nil {
			t.Fatal(err)
		}
		k := c.kind(endpointIndex(id))
		if want := "http://127.0.0.1:1/" + [3]string{"ep", "fail", "slow"}[k] + "/" + id; url != want {
			t.Fatalf("endpoint %s posts to %s, want %s", id, url, want)
		}
		byKind[k] += n
		if k == failing {
			n = 0
		}
		got[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := c.routeBacklog(1, events)
	if err := checkPerEndpoint(got, want.PerEndpoint, int(want.success())); err != nil || byKind != want.ByKind {
		t.Fatalf("routing by tenant: %v; by kind %v, want %v", err, byKind, want.ByKind)
	}
}

// checkFailingAccount spills part of the failing endpoints' events into their backlog, then
// checks the account with the slot unconfirmed (nothing lost), and after advancing the slot
// past the backlog's transaction (its events neither spilled nor after the slot: lost).
func checkFailingAccount(ctx context.Context, t *testing.T, db *benchDB, c fanoutCase, first string) {
	t.Helper()
	ids := c.failingIDs()
	if _, err := db.conn.Exec(ctx, `INSERT INTO outbox_endpoint_backlog (pipeline, endpoint_id, lsn, idx, event_id)
		SELECT 'default', e.id, '0/1', row_number() OVER (), ev.id FROM outbox_endpoints e
		JOIN outbox_events ev ON ev.tenant_id = e.tenant_id WHERE e.id = ANY($1) AND (ev.payload->>'seq')::int <= 100`, ids); err != nil {
		t.Fatal(err)
	}
	a, err := db.accountFailing(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	routed := c.routeBacklog(1, 310).ByKind[failing]
	spilled := c.routeBacklog(1, 100).ByKind[failing]
	if int64(a.Routed) != routed || int64(a.InBacklog) != spilled || int64(a.Unconfirmed) != routed-spilled || a.check() != nil {
		t.Fatalf("slot unconfirmed: %+v, want %d routed, %d in backlogs, the rest unconfirmed, none lost", a, routed, spilled)
	}
	if _, err := db.conn.Exec(ctx, `SELECT pg_replication_slot_advance($1, $2::pg_lsn)`, relaySlot, first); err != nil {
		t.Fatal(err)
	}
	a, err = db.accountFailing(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	after := c.routeSeqs([]int{301, 302, 303, 304, 305, 306, 307, 308, 309, 310}).ByKind[failing]
	if int64(a.Unconfirmed) != after || int64(len(a.Lost)) != routed-spilled-after || (routed > spilled+after) != (a.check() != nil) {
		t.Fatalf("slot past the backlog: %+v, want %d unconfirmed and %d lost", a, after, routed-spilled-after)
	}
	unconfirmed, err := db.unconfirmedEventIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(unconfirmed) != 10 {
		t.Fatalf("%d events after the slot's confirmed position, want the 10 written after the backlog", len(unconfirmed))
	}
}
