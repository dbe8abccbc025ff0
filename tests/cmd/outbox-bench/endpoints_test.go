package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/pgtest"
)

// TestEndpointRowsSelectOneEach checks that BENCH_ONLY can name each endpoint row alone: the
// row names hold no commas and a number in BENCH_ONLY matches a whole number.
func TestEndpointRowsSelectOneEach(t *testing.T) {
	for only, want := range map[string][]string{
		"endpoints 1":    {"Endpoints 1"},
		"endpoints 10":   {"Endpoints 10"},
		"Endpoints 100":  {"Endpoints 100"},
		"endpoints 1000": {"Endpoints 1000"},
		"fan-out":        {"Endpoints fan-out 10"},
		"endpoints":      {"Endpoints 1", "Endpoints 10", "Endpoints 100", "Endpoints 1000", "Endpoints fan-out 10"},
	} {
		c := config{Only: []string{only}}
		var got []string
		for _, ec := range endpointCases {
			if strings.Contains(ec.row, ",") {
				t.Errorf("row %q has a comma, which BENCH_ONLY splits on", ec.row)
			}
			if c.selected(ec.row) {
				got = append(got, ec.row)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("BENCH_ONLY=%q selects %q, want %q", only, got, want)
		}
	}
	// The existing selections keep working: a part that ends in a letter still matches a prefix.
	for only, row := range map[string]string{"shard": shardRow(2), "steady 1": rowSteady1k, "(relay)": rowDrain} {
		if !(config{Only: []string{only}}).selected(row) {
			t.Errorf("BENCH_ONLY=%q no longer selects %q", only, row)
		}
	}
}

// TestEndpointExpected checks the per-endpoint counts against counting the backlog's rows.
func TestEndpointExpected(t *testing.T) {
	for _, c := range append(endpointCases, endpointCase{"odd", 7, false}) {
		for _, events := range []int{1, 5, 999, 1000, 2001} {
			want := map[string]int64{}
			for g := 1; g <= events; g++ {
				if c.fanout {
					for i := range c.endpoints {
						want[endpointID(i)]++
					}
					continue
				}
				want[endpointID(g%c.tenants())]++
			}
			got := c.expected(events)
			for i := range c.endpoints {
				id := endpointID(i)
				if got[id] != want[id] {
					t.Errorf("%s, %d events: %s expects %d, the backlog gives it %d", c.row, events, id, got[id], want[id])
				}
			}
		}
	}
}

// TestReceiverCountsPerEndpoint checks that the receiver counts a delivery per (endpoint, event)
// and checks order per endpoint: the same event at two endpoints is no duplicate, and one
// endpoint's order does not depend on another's.
func TestReceiverCountsPerEndpoint(t *testing.T) {
	recv := newReceiver(benchSecret)
	srv := httptest.NewServer(recv.handler())
	defer srv.Close()
	s := signer{keys: [][]byte{[]byte(benchSecret)}}
	ev := func(id string, seq int) request {
		return request{ID: id, AggregateType: "order", AggregateID: "1", EventType: "e", Body: []byte(fmt.Sprintf(`{"seq": %d}`, seq))}
	}
	post := func(ep string, reqs ...request) {
		t.Helper()
		p := &stdPoster{url: srv.URL + "/ep/" + ep, client: newStdClient(1), signer: s}
		if _, err := runCeiling(context.Background(), reqs, 1, func() (poster, error) { return p, nil }); err != nil {
			t.Fatal(err)
		}
	}
	post("ep0", ev("a", 5), ev("b", 6))
	post("ep1", ev("c", 3), ev("a", 5)) // 3 < ep0's 6, but ep1 has not seen 6
	if st := recv.snapshot(); st.Unique != 4 || st.Duplicates != 0 || st.OrderViolations != 0 {
		t.Fatalf("after 2 events to each of 2 endpoints: %+v, want 4 distinct deliveries, no duplicate, no order violation", st)
	}
	post("ep0", ev("b", 6), ev("d", 4)) // a duplicate, then a seq below ep0's 6
	st := recv.snapshot()
	if st.Unique != 5 || st.Duplicates != 1 || st.OrderViolations != 1 {
		t.Fatalf("stats %+v, want 5 distinct deliveries, 1 duplicate, 1 order violation", st)
	}
	recv.mu.Lock()
	got := fmt.Sprint(recv.perEndpoint)
	recv.mu.Unlock()
	if got != "map[ep0:3 ep1:2]" {
		t.Fatalf("per endpoint %s, want map[ep0:3 ep1:2]", got)
	}
}

// TestActivityNote checks the per-1k figures and the order of the tables (most written first).
func TestActivityNote(t *testing.T) {
	b := dbActivity{Commits: 20, Writes: map[string]int64{"outbox_events": 1000, "outbox_endpoint_status": 5, "outbox_endpoints": 0}}
	a := dbActivity{Commits: 120, Writes: map[string]int64{"outbox_events": 2000, "outbox_endpoint_status": 5, "outbox_endpoints": 3,
		"outbox_endpoint_versions": 3}}
	got := a.minus(b).note(1000) // unchanged tables left out; equal counts by name
	want := "per 1k events, PostgreSQL committed 100.0 transactions and wrote rows of outbox_events 1000.0, outbox_endpoint_versions 3.0, outbox_endpoints 3.0"
	if got != want {
		t.Fatalf("note = %q\nwant   %q", got, want)
	}
}

// TestCheckPerEndpoint checks that a row fails on any delivery missing, misplaced or extra.
func TestCheckPerEndpoint(t *testing.T) {
	want := map[string]int64{"ep0": 2, "ep1": 3}
	for _, tc := range []struct {
		name   string
		got    map[string]int64
		unique int
		fail   string // "" passes
	}{
		{"exact", map[string]int64{"ep0": 2, "ep1": 3}, 5, ""},
		{"one missing", map[string]int64{"ep0": 2, "ep1": 2}, 4, "ep1 got 2, want 3"},
		{"misrouted", map[string]int64{"ep0": 3, "ep1": 2}, 5, "ep0 got 3, want 2"},
		{"unknown endpoint", map[string]int64{"ep0": 2, "ep1": 3, "ep9": 1}, 6, "ep9 (no such endpoint) got 1"},
		{"to /hook", map[string]int64{"ep0": 2, "ep1": 3}, 7, "2 deliveries outside the endpoints"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkPerEndpoint(tc.got, want, tc.unique)
			switch {
			case tc.fail == "" && err != nil:
				t.Fatalf("want no error, got %v", err)
			case tc.fail != "" && (err == nil || !strings.Contains(err.Error(), tc.fail)):
				t.Fatalf("want an error naming %q, got %v", tc.fail, err)
			}
		})
	}
}

// TestEndpointSetup runs each row's setup on a real cluster (the relay not involved): the
// endpoints pass migration 13's checks, and routing by tenant as issue 24 defines it (an
// endpoint without a tenant takes every tenant's events) gives each endpoint what the row
// will require of the receiver.
func TestEndpointSetup(t *testing.T) {
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
	const events = 2500
	for _, c := range endpointCases {
		t.Run(c.row, func(t *testing.T) {
			db, err := newBenchDB(ctx, cluster, "setup", relaySlot)
			if err != nil {
				t.Fatal(err)
			}
			defer db.drop()
			if err := db.createEndpoints(ctx, c, "http://127.0.0.1:1/ep/"); err != nil {
				t.Fatal(err)
			}
			if err := db.waitAlone(ctx, 10*time.Second); err != nil { // the migration's backend exited: its counters are in
				t.Fatal(err)
			}
			before, err := db.activity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := db.writeTenantBacklog(ctx, events, 1000, c.tenants()); err != nil {
				t.Fatal(err)
			}
			after, err := db.activity(ctx)
			if err != nil {
				t.Fatal(err)
			}
			// The backlog is 1 statement here (2,500 rows); pgx prepares each new statement
			// (a transaction of its own too), and the readings' own statements count.
			if a := after.minus(before); a.Writes["outbox_events"] != events || a.Commits < 1 || a.Commits > 12 {
				t.Errorf("activity while writing the backlog: %+v, want %d rows of outbox_events in 1 to 12 transactions", a, events)
			}
			rows, err := db.conn.Query(ctx, `SELECT e.id, e.url, count(ev.id)
				FROM outbox_endpoints e LEFT JOIN outbox_events ev ON e.tenant_id IS NULL OR e.tenant_id = ev.tenant_id
				GROUP BY e.id, e.url`)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]int64{}
			for rows.Next() {
				var id, url string
				var n int64
				if err := rows.Scan(&id, &url, &n); err != nil {
					t.Fatal(err)
				}
				if url != "http://127.0.0.1:1/ep/"+id {
					t.Fatalf("endpoint %s posts to %s, want the receiver's /ep/%s", id, url, id)
				}
				got[id] = n
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			if err := checkPerEndpoint(got, c.expected(events), events*c.routes()); err != nil {
				t.Fatalf("routing the backlog by tenant: %v", err)
			}
		})
	}
}
