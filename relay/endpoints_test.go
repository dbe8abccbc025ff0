package relay

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
	"github.com/outbox-relay/outbox-relay/signature"
)

// partner is one endpoint of a test: its receiver checks every request's signature with the
// endpoint's own secret (a request signed with another's is refused, never counted).
type partner struct {
	id   string
	recv *relaytest.Receiver
	sub  func(tenant, aggType, evType string) bool // the test's own reading of its subscription
	want relaytest.Result                          // what it must receive
}

func newPartner(t *testing.T, id string, sub func(tenant, aggType, evType string) bool) *partner {
	recv := relaytest.NewReceiver("secret-of-" + id + "-0123456789")
	t.Cleanup(recv.Close)
	return &partner{id: id, recv: recv, sub: sub}
}

func (e *env) addPartner(p *partner, ep endpoints.Endpoint) {
	e.t.Helper()
	ep.ID, ep.URL, ep.Secret = p.id, p.recv.URL, "secret-of-"+p.id+"-0123456789"
	if _, err := (endpoints.Store{}).Add(context.Background(), e.pool, ep); err != nil {
		e.t.Fatal(err)
	}
}

// endpointsConfig runs the default pipeline with endpoints.
func endpointsConfig(cfg *Config) {
	cfg.Endpoints, cfg.WebhookURL, cfg.Secrets = true, "", nil
}

// tenantEvent is what the test writes: events of fresh aggregates, one transaction per event,
// each aggregate with one tenant, aggregate type and event type, seq 1, 2, ... per aggregate.
type tenantEvents struct {
	tenant, aggType, evType  string
	aggregates, perAggregate int
}

// write commits the events, the aggregates' events interleaved, and adds each to the want of
// every partner subscribed to it now (live: those that exist and are not removed).
func (e *env) write(prefix string, w tenantEvents, live []*partner) {
	e.t.Helper()
	e.writeSeqs(prefix, w, 0, live, true)
}

// writeSeqs commits seq from+1 to from+w.perAggregate of each aggregate, interleaved, and adds
// each event to the want of every partner of live (subscribed only: those live subscribes to
// it now).
func (e *env) writeSeqs(prefix string, w tenantEvents, from int, live []*partner, subscribed bool) {
	e.t.Helper()
	ctx := context.Background()
	for s := from + 1; s <= from+w.perAggregate; s++ {
		for a := 0; a < w.aggregates; a++ {
			agg := fmt.Sprintf("%s-%d", prefix, a)
			id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: w.aggType, AggregateID: agg, EventType: w.evType,
				TenantID: w.tenant, Payload: map[string]int{"seq": s}})
			if err != nil {
				e.t.Fatal(err)
			}
			c := relaytest.Committed{ID: id.String(), Aggregate: w.aggType + "/" + agg, Seq: s}
			for _, p := range live {
				if !subscribed || p.sub(w.tenant, w.aggType, w.evType) {
					p.want.Committed = append(p.want.Committed, c)
				}
			}
		}
	}
}

// waitPartners waits until every partner got what it must, then checks that it got nothing
// else (a phantom is an event outside its subscription, or from before it existed) and in
// order per aggregate.
func waitPartners(t *testing.T, ps ...*partner) {
	t.Helper()
	for _, p := range ps {
		rep := waitAll(t, p.recv, p.want, time.Minute)
		if !rep.OK() {
			t.Fatalf("endpoint %s: %s (lost %v, phantoms %v, order %v)", p.id, rep, first(rep.Lost), first(rep.Phantoms),
				first(rep.OrderViolations))
		}
	}
}

func first(s []string) []string { return s[:min(len(s), 3)] }

// Endpoints on one slot: each event goes to exactly the endpoints subscribed to it at its
// commit (tenant, event-type patterns, aggregate types), signed with each endpoint's own secret,
// in order per aggregate per endpoint. An endpoint added later gets nothing committed before it;
// a paused one gets nothing until it resumes, then everything in order; a removed one gets
// nothing committed after its removal; all of it without restarting the relay, and with one
// walsender.
func TestEndpointsRouteEachEventAsSubscribedAtItsCommit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newPartner(t, "acme", func(tenant, _, ev string) bool { return tenant == "t1" && strings.HasPrefix(ev, "order.") })
	b := newPartner(t, "all", func(string, string, string) bool { return true })
	c := newPartner(t, "t2-invoices", func(tenant, agg, _ string) bool { return tenant == "t2" && agg == "invoice" })
	e.addPartner(a, endpoints.Endpoint{TenantID: "t1", EventTypes: []string{"order.*"}})
	e.addPartner(b, endpoints.Endpoint{})
	e.addPartner(c, endpoints.Endpoint{TenantID: "t2", AggregateTypes: []string{"invoice"}})
	e.start(endpointsConfig)
	live := []*partner{a, b, c}
	mix := func(prefix string) {
		e.write(prefix+"-o1", tenantEvents{"t1", "order", "order.created", 5, 4}, live)
		e.write(prefix+"-i1", tenantEvents{"t1", "invoice", "invoice.paid", 5, 4}, live)
		e.write(prefix+"-i2", tenantEvents{"t2", "invoice", "invoice.paid", 5, 4}, live)
		e.write(prefix+"-o2", tenantEvents{"t2", "order", "order.created", 5, 4}, live)
		e.write(prefix+"-none", tenantEvents{"", "order", "order.created", 5, 4}, live)
	}
	mix("r1")
	waitPartners(t, a, b, c)

	// A new endpoint: nothing committed before it.
	d := newPartner(t, "late", func(string, string, string) bool { return true })
	e.addPartner(d, endpoints.Endpoint{})
	live = append(live, d)
	mix("r2")
	waitPartners(t, a, b, c, d)

	// Paused: held, then delivered in order on resume.
	if _, err := (endpoints.Store{}).Pause(context.Background(), e.pool, b.id, "maintenance"); err != nil {
		t.Fatal(err)
	}
	held := len(b.recv.Deliveries())
	mix("r3")
	waitPartners(t, a, c, d)
	time.Sleep(300 * time.Millisecond)
	if n := len(b.recv.Deliveries()); n != held {
		t.Fatalf("the paused endpoint received %d events", n-held)
	}
	if _, err := (endpoints.Store{}).Resume(context.Background(), e.pool, b.id); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, b)

	// Removed: nothing committed after its removal.
	if err := (endpoints.Store{}).Remove(context.Background(), e.pool, a.id); err != nil {
		t.Fatal(err)
	}
	live = slices.DeleteFunc(live, func(p *partner) bool { return p == a })
	mix("r4")
	waitPartners(t, a, b, c, d)

	var senders int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_activity a USING (pid)
		WHERE a.datname = current_database() AND r.application_name <> 'walreceiver'`).
		Scan(&senders); err != nil {
		t.Fatal(err)
	}
	if senders != 1 {
		t.Fatalf("%d walsenders serve the endpoints, want 1", senders)
	}
	for _, p := range []*partner{a, b, c, d} {
		if n := p.recv.BadSignatures(); n != 0 {
			t.Fatalf("endpoint %s: %d requests signed with another secret", p.id, n)
		}
	}
}

// A failing endpoint delays no other: while one endpoint answers 500 to everything, the others
// get every event; the slot is not confirmed past the first event the failing one owes; once it
// recovers it gets everything, in order. An endpoint that answers 410 Gone is disabled (its row
// says why) and gets nothing more, while the others go on.
func TestEndpointFailingOrGoneHoldsNoOther(t *testing.T) {
	// Not parallel: compares the slot's confirmed position with the cluster's WAL position, which other tests move while they run.
	e := newEnv(t)
	ok := newPartner(t, "healthy", func(string, string, string) bool { return true })
	bad := newPartner(t, "failing", func(string, string, string) bool { return true })
	gone := newPartner(t, "gone", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	e.addPartner(bad, endpoints.Endpoint{})
	e.addPartner(gone, endpoints.Endpoint{})
	var failing, isGone atomic.Bool
	failing.Store(true)
	bad.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusInternalServerError
		}
		return 0
	})
	gone.recv.SetFail(func(*http.Request) int {
		if isGone.Load() {
			return http.StatusGone
		}
		return 0
	})
	// No spill within the test: the failing endpoint holds the slot (spill_test.go covers the spill).
	e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = time.Hour, 1<<30 })
	live := []*partner{ok, bad, gone}
	e.write("a", tenantEvents{"", "order", "order.created", 10, 5}, live)
	waitPartners(t, ok, gone)
	firstOwed := e.currentLSN()
	isGone.Store(true)
	e.write("b", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok)
	waitFor(t, 30*time.Second, "the gone endpoint disabled", func() bool {
		got, err := endpoints.Store{}.Get(context.Background(), e.pool, gone.id)
		return err == nil && got.State == endpoints.Disabled && strings.Contains(got.DisabledReason, "410")
	})
	sent := len(gone.recv.Deliveries())
	e.write("c", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok)
	var confirmed int64
	if err := e.pool.QueryRow(context.Background(), `SELECT pg_wal_lsn_diff(confirmed_flush_lsn, '0/0')::bigint
		FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if confirmed > firstOwed {
		t.Fatalf("slot confirmed at %d, past %d, while the failing endpoint still owes events from before it", confirmed, firstOwed)
	}
	failing.Store(false)
	waitPartners(t, ok, bad)
	if n := len(gone.recv.Deliveries()); n != sent {
		t.Fatalf("the disabled endpoint received %d more events", n-sent)
	}
	ids := map[string]bool{}
	for _, c := range gone.want.Committed {
		ids[c.ID] = true
	}
	var extra []string
	for _, d := range gone.recv.Deliveries() {
		if !ids[d.ID] {
			extra = append(extra, d.ID)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Fatalf("the gone endpoint received events committed after its 410: %v", first(extra))
	}
}

// Changes apply at their commit across restarts too. While the relay is stopped, events are
// committed before and after an endpoint is added; and while a failing endpoint holds the slot
// back, an endpoint is added and more events follow, then the relay stops. The next relay is
// sent all of it again from the slot's position: the new endpoint gets exactly the events
// committed after it (the versions log, not the table as it is now, says what was subscribed
// when), and the endpoint that failed gets everything, in order.
func TestEndpointChangesApplyAtTheirCommitAcrossRestarts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := newPartner(t, "all", func(string, string, string) bool { return true })
	held := newPartner(t, "held", func(string, string, string) bool { return true })
	e.addPartner(all, endpoints.Endpoint{})
	e.addPartner(held, endpoints.Endpoint{})
	var failing atomic.Bool
	held.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	r := e.start(endpointsConfig)
	live := []*partner{all, held}
	e.write("a", tenantEvents{"", "order", "order.created", 5, 3}, live)
	waitPartners(t, all, held)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}

	// Relay down: before and after a new endpoint.
	e.write("b", tenantEvents{"", "order", "order.created", 5, 3}, live)
	late := newPartner(t, "late", func(string, string, string) bool { return true })
	e.addPartner(late, endpoints.Endpoint{})
	live = append(live, late)
	e.write("c", tenantEvents{"", "order", "order.created", 5, 3}, live)
	failing.Store(true)
	r = e.start(endpointsConfig)
	waitPartners(t, all, late)

	// Relay up, slot held back by the failing endpoint: another new endpoint, then a restart.
	later := newPartner(t, "later", func(string, string, string) bool { return true })
	e.addPartner(later, endpoints.Endpoint{})
	live = append(live, later)
	e.write("d", tenantEvents{"", "order", "order.created", 5, 3}, live)
	waitPartners(t, all, late, later)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	e.start(endpointsConfig)
	e.write("e", tenantEvents{"", "order", "order.created", 5, 3}, live)
	waitPartners(t, all, held, late, later)
}

// A dead letter parks its aggregate for that endpoint alone: the other endpoint gets every
// event of the aggregate; the rejecting endpoint gets the aggregate's later events only after
// a replay names it (pipeline "default/<endpoint>"), then all of them in order.
func TestEndpointDeadLetterParksForThatEndpointOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fine := newPartner(t, "fine", func(string, string, string) bool { return true })
	picky := newPartner(t, "picky", func(string, string, string) bool { return true })
	e.addPartner(fine, endpoints.Endpoint{})
	e.addPartner(picky, endpoints.Endpoint{})
	var reject atomic.Bool
	reject.Store(true)
	picky.recv.SetFailEvents(func(ds []relaytest.Delivery) int {
		if reject.Load() && ds[0].Aggregate == "order/x-0" {
			return http.StatusUnprocessableEntity
		}
		return 0
	})
	limits := func(cfg *Config) { endpointsConfig(cfg); cfg.MaxAttempts = 2 }
	r := e.start(limits)
	live := []*partner{fine, picky}
	e.write("x", tenantEvents{"", "order", "order.created", 3, 4}, live)
	waitPartners(t, fine)
	waitFor(t, 30*time.Second, "the aggregate parked for picky", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_parked_aggregates
			WHERE pipeline = 'default/picky' AND aggregate_id = 'x-0'`).Scan(&n)
		return n == 1
	})
	// Parked across a restart: the aggregate's next events wait for the replay too.
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.start(limits)
	ctx := context.Background()
	for s := 5; s <= 6; s++ {
		id, err := outbox.Enqueue(ctx, e.pool, outbox.Event{AggregateType: "order", AggregateID: "x-0", EventType: "order.created",
			Payload: map[string]int{"seq": s}})
		if err != nil {
			t.Fatal(err)
		}
		c := relaytest.Committed{ID: id.String(), Aggregate: "order/x-0", Seq: s}
		fine.want.Committed = append(fine.want.Committed, c)
		picky.want.Committed = append(picky.want.Committed, c)
	}
	waitPartners(t, fine)
	for _, d := range picky.recv.Deliveries() {
		if d.Aggregate == "order/x-0" {
			t.Fatalf("picky got %s of the parked aggregate before any replay", d.ID)
		}
	}
	var parkedFine int
	_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_parked_aggregates WHERE pipeline <> 'default/picky'`).
		Scan(&parkedFine)
	if parkedFine != 0 {
		t.Fatalf("%d aggregates parked elsewhere", parkedFine)
	}
	reject.Store(false)
	e.replay(control.ReplaySelection{All: true, Pipeline: "default/picky"})
	waitPartners(t, fine, picky)
}

// An endpoint's rate limit bounds the requests it gets in any one second, and its in-flight cap
// the requests under way at once; another endpoint meanwhile gets its events at full speed.
func TestEndpointRateLimitAndInFlightCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	slow := newPartner(t, "limited", func(string, string, string) bool { return true })
	capped := newPartner(t, "capped", func(string, string, string) bool { return true })
	e.addPartner(slow, endpoints.Endpoint{RateLimit: 20})
	e.addPartner(capped, endpoints.Endpoint{MaxInFlight: 2})
	var now, most atomic.Int32
	capped.recv.SetFail(func(*http.Request) int {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(5 * time.Millisecond)
		now.Add(-1)
		return 0
	})
	e.start(endpointsConfig)
	e.write("r", tenantEvents{"", "order", "order.created", 30, 2}, []*partner{slow, capped})
	waitPartners(t, capped)
	if m := most.Load(); m > 2 || m < 1 {
		t.Fatalf("the capped endpoint had %d requests under way at once, want at most 2", m)
	}
	if n := len(slow.recv.Deliveries()); n > 45 {
		t.Fatalf("the rate-limited endpoint (20/s) already got %d of 60 events", n)
	}
	waitPartners(t, slow)
	// The limit bounds the starts of attempts; the receiver sees them a little later, each by
	// its own delay, so its windows are taken 100ms short of a second.
	ds := slow.recv.Deliveries()
	for i := range ds {
		j := i
		for j < len(ds) && ds[j].At.Sub(ds[i].At) < 900*time.Millisecond {
			j++
		}
		if j-i > 20 {
			t.Fatalf("%d requests within one second at %s, rate limit 20", j-i, ds[i].At)
		}
	}
}

// Series stay bounded: with 40 endpoints of which 30 fail, the per-endpoint series cover at most
// --endpoint-metrics-max troubled endpoints plus the ones asked for by name; the aggregate
// series count all of them.
func TestEndpointSeriesStayBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	recv := relaytest.NewReceiver("shared-secret-0123456789")
	t.Cleanup(recv.Close)
	recv.SetFail(func(r *http.Request) int {
		if strings.Contains(r.URL.Path, "/bad/") {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	for i := 0; i < 40; i++ {
		path := "/good/"
		if i < 30 {
			path = "/bad/"
		}
		if _, err := (endpoints.Store{}).Add(context.Background(), e.pool, endpoints.Endpoint{ID: fmt.Sprintf("ep%02d", i),
			URL: recv.URL + path + fmt.Sprint(i), Secret: "shared-secret-0123456789"}); err != nil {
			t.Fatal(err)
		}
	}
	r := e.start(func(cfg *Config) {
		endpointsConfig(cfg)
		cfg.EndpointMetricsMax, cfg.EndpointMetrics = 5, []string{"ep39"}
	})
	e.write("m", tenantEvents{"", "order", "order.created", 5, 1}, nil)
	waitFor(t, 30*time.Second, "30 endpoints failing", func() bool {
		return gaugeValue(r.reg, "outbox_relay_endpoints_failing") == 30
	})
	series := map[string]bool{}
	families, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "outbox_relay_endpoint_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "endpoint" {
					series[l.GetValue()] = true
				}
			}
		}
	}
	if len(series) != 6 || !series["ep39"] {
		t.Fatalf("per-endpoint series for %d endpoints (%v), want the 5 most troubled and ep39", len(series), series)
	}
	if n := gaugeValue(r.reg, "outbox_relay_endpoints"); n != 40 {
		t.Fatalf("outbox_relay_endpoints sums to %v, want 40", n)
	}
}

// gaugeValue sums the gauge name over its series.
func gaugeValue(g prometheus.Gatherer, name string) float64 {
	families, err := g.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// A replay since a time for one endpoint (the request names "default/<endpoint>") gives it the
// history of its subscription, from before it existed: the rows of the range its subscription
// takes, in order per aggregate, and nothing to any other endpoint.
func TestEndpointReplaySinceResendsToThatEndpointOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := newPartner(t, "all", func(string, string, string) bool { return true })
	e.addPartner(all, endpoints.Endpoint{})
	e.start(endpointsConfig)
	since := time.Now().Add(-time.Second)
	e.write("a1", tenantEvents{"t1", "order", "order.created", 4, 3}, []*partner{all})
	e.write("a2", tenantEvents{"t2", "order", "order.created", 4, 3}, []*partner{all})
	waitPartners(t, all)
	late := newPartner(t, "t1-late", func(tenant, _, _ string) bool { return tenant == "t1" })
	e.addPartner(late, endpoints.Endpoint{TenantID: "t1"})
	before := len(all.recv.Deliveries())
	conn, err := pgx.Connect(context.Background(), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// What the range holds for t1 is what the late endpoint must get.
	late.want = relaytest.Result{}
	for _, c := range all.want.Committed {
		if strings.HasPrefix(c.Aggregate, "order/a1-") {
			late.want.Committed = append(late.want.Committed, c)
		}
	}
	if _, err := control.RequestReplaySince(context.Background(), conn,
		control.SinceRequest{Pipeline: "default/" + late.id, Since: since}, false); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, late)
	time.Sleep(200 * time.Millisecond)
	if n := len(all.recv.Deliveries()); n != before {
		t.Fatalf("the other endpoint received %d events of a replay for %s", n-before, late.id)
	}
}

// A pipeline that starts with no endpoint at all: the first endpoint, added while the relay is
// stopped, gets only what is committed after it once the relay is back.
func TestFirstEndpointAddedWhileStoppedGetsOnlyLaterEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.start(endpointsConfig)
	e.write("a", tenantEvents{"", "order", "order.created", 3, 2}, nil)
	waitFor(t, 30*time.Second, "the unrouted events marked done", func() bool { return e.notDone() == 0 })
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.write("b", tenantEvents{"", "order", "order.created", 3, 2}, nil)
	first := newPartner(t, "first", func(string, string, string) bool { return true })
	e.addPartner(first, endpoints.Endpoint{})
	e.write("c", tenantEvents{"", "order", "order.created", 3, 2}, []*partner{first})
	e.start(endpointsConfig)
	waitPartners(t, first)
}

// A sealed secret: outbox_endpoints holds only its sealed form (the clear secret appears nowhere
// in the row), and the relay, given the key, signs with the clear secret (the receiver checks
// the signature with it). Without the key, the endpoint's attempts fail with the fix, and its
// events wait.
func TestSealedEndpointSecretSignsAndIsNotStoredInClear(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const keys = "q2Jx1b8m3JtH3kq6q0mF0vQG7w0xY2l3cS9kzYy0d1E=" // 32 bytes in base64
	sealer, err := endpoints.NewSealer(keys)
	if err != nil {
		t.Fatal(err)
	}
	p := newPartner(t, "sealed", func(string, string, string) bool { return true })
	if _, err := (endpoints.Store{Sealer: sealer}).Add(context.Background(), e.pool, endpoints.Endpoint{ID: p.id, URL: p.recv.URL,
		Secret: "secret-of-sealed-0123456789"}); err != nil {
		t.Fatal(err)
	}
	var row string
	if err := e.pool.QueryRow(context.Background(), `SELECT to_jsonb(e)::text FROM outbox_endpoints e WHERE id = $1`, p.id).
		Scan(&row); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(row, "secret-of-sealed") || !strings.Contains(row, "sealed:v1:") {
		t.Fatalf("the stored row shows the secret in clear, or not sealed: %s", row)
	}
	r := e.start(endpointsConfig) // no key: every attempt fails, saying what to set
	e.write("s", tenantEvents{"", "order", "order.created", 2, 2}, []*partner{p})
	waitFor(t, 30*time.Second, "the endpoint failing for want of the key", func() bool {
		return gaugeValue(r.reg, "outbox_relay_endpoints_failing") == 1
	})
	if n := len(p.recv.Deliveries()); n != 0 {
		t.Fatalf("%d events delivered without the key", n)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	e.start(func(cfg *Config) { endpointsConfig(cfg); cfg.SecretsKeys = keys })
	waitPartners(t, p)
	if n := p.recv.BadSignatures(); n != 0 {
		t.Fatalf("%d requests with a bad signature", n)
	}
}

// The URL guard at dial time: an endpoint written with plain SQL (no check on the way in) whose
// URL is the relay's own metrics address, or a metadata address, is never dialled; its attempts
// fail saying why, and the other endpoints go on.
func TestGuardRefusesToDialTheRelaysOwnAndMetadataAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := newPartner(t, "ok", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	metrics := relaytest.NewReceiver("unused-secret-0123456789")
	t.Cleanup(metrics.Close)
	addr := strings.TrimPrefix(metrics.URL, "http://")
	for id, url := range map[string]string{"own": "http://" + addr + "/metrics", "imds": "http://169.254.169.254/latest/meta-data"} {
		if _, err := e.pool.Exec(context.Background(), `INSERT INTO outbox_endpoints (id, url, secrets)
			VALUES ($1, $2, '[{"secret": "plain-sql-secret-0123456789"}]')`, id, url); err != nil {
			t.Fatal(err)
		}
	}
	metrics.Close() // the relay's metrics server takes the port: the guard must refuse it
	r := e.start(func(cfg *Config) { endpointsConfig(cfg); cfg.MetricsAddr = addr })
	e.write("g", tenantEvents{"", "order", "order.created", 2, 2}, []*partner{ok})
	waitPartners(t, ok)
	waitFor(t, 30*time.Second, "both guarded endpoints failing", func() bool {
		return gaugeValue(r.reg, "outbox_relay_endpoints_failing") == 2
	})
	waitFor(t, 30*time.Second, "the guard's reason in their status", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_endpoint_status
			WHERE endpoint_id IN ('own', 'imds') AND last_error LIKE '%the URL guard refuses this address%'`).Scan(&n)
		return n == 2
	})
}

// Each endpoint signs with its own scheme and sends its own format: a Standard Webhooks endpoint
// in CloudEvents binary mode gets requests that verify with its whsec_ secret (and only it), while
// an x-signature endpoint in raw format beside it keeps its own.
func TestEndpointsEachWithItsSchemeAndFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const whsec = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	key, err := signature.DecodeWhsec(whsec)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := map[string]bool{}
	var bad atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !signature.VerifyStandard([][]byte{key}, r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), body,
			r.Header.Get("webhook-signature")) || r.Header.Get("ce-id") == "" || r.Header.Get("X-Signature") != "" {
			bad.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		got[r.Header.Get("ce-id")] = true
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	if _, err := (endpoints.Store{}).Add(context.Background(), e.pool, endpoints.Endpoint{ID: "std", URL: srv.URL, Secret: whsec,
		Scheme: signature.StandardWebhooks, Format: "cloudevents"}); err != nil {
		t.Fatal(err)
	}
	raw := newPartner(t, "raw", func(string, string, string) bool { return true })
	e.addPartner(raw, endpoints.Endpoint{})
	e.start(endpointsConfig)
	e.write("f", tenantEvents{"", "order", "order.created", 4, 3}, []*partner{raw})
	waitPartners(t, raw)
	waitFor(t, 30*time.Second, "the standard-webhooks endpoint got every event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == len(raw.want.Committed)
	})
	for _, c := range raw.want.Committed {
		if !got[c.ID] {
			t.Fatalf("the standard-webhooks endpoint lacks %s", c.ID)
		}
	}
	if n := bad.Load(); n != 0 {
		t.Fatalf("%d requests to the standard-webhooks endpoint did not verify, or were not CloudEvents", n)
	}
}

// An endpoint's batching: a backlog goes to it in CloudEvents batches of up to its
// batch_max_events, in order per aggregate, while an endpoint beside it gets one event per
// request.
func TestEndpointBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	batched := newPartner(t, "batched", func(string, string, string) bool { return true })
	single := newPartner(t, "single", func(string, string, string) bool { return true })
	e.addPartner(batched, endpoints.Endpoint{BatchMaxEvents: 10})
	e.addPartner(single, endpoints.Endpoint{})
	var hold atomic.Bool
	hold.Store(true)
	batched.recv.SetFail(func(*http.Request) int {
		if hold.Load() {
			return http.StatusServiceUnavailable // a backlog builds up behind it
		}
		return 0
	})
	e.start(endpointsConfig)
	e.write("b", tenantEvents{"", "order", "order.created", 20, 5}, []*partner{batched, single})
	waitPartners(t, single)
	hold.Store(false)
	waitPartners(t, batched)
	most := 0
	for _, r := range batched.recv.RequestLog() {
		if r.Status == http.StatusOK {
			most = max(most, len(r.IDs))
			if len(r.IDs) > 10 {
				t.Fatalf("a batch of %d events, batch_max_events 10", len(r.IDs))
			}
		}
	}
	if most < 2 {
		t.Fatalf("the batching endpoint got one event per request")
	}
	for _, r := range single.recv.RequestLog() {
		if r.Batch || len(r.IDs) != 1 {
			t.Fatalf("the endpoint without batching got a batch of %d", len(r.IDs))
		}
	}
}

// A sharded pipeline with endpoints: each shard fans its own aggregates out to every endpoint
// from its own slot, so each endpoint gets every event it subscribes to, in order per aggregate,
// and a shard's dead letters and replays name the shard's lane ("default_s0of2/<endpoint>").
func TestShardedPipelineWithEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := newPartner(t, "a", func(string, string, string) bool { return true })
	b := newPartner(t, "b", func(tenant, _, _ string) bool { return tenant == "t1" })
	e.addPartner(a, endpoints.Endpoint{})
	e.addPartner(b, endpoints.Endpoint{TenantID: "t1"})
	e.startNoWait(func(cfg *Config) { endpointsConfig(cfg); cfg.Shards = 2 })
	waitFor(t, 30*time.Second, "both shards' slots", func() bool { return e.countReadySlots(e.slot+"_s%of2") == 2 })
	live := []*partner{a, b}
	e.write("s1", tenantEvents{"t1", "order", "order.created", 20, 3}, live)
	e.write("s2", tenantEvents{"t2", "order", "order.created", 20, 3}, live)
	waitPartners(t, a, b)
	var shards int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(DISTINCT pipeline) FROM outbox_endpoint_versions`).Scan(&shards); err != nil {
		t.Fatal(err)
	}
	if shards != 2 {
		t.Fatalf("endpoint versions recorded for %d pipelines, want one per shard", shards)
	}
}

// The circuit breaker: an endpoint that fails every attempt is not hammered. After ten failures
// in a row it gets one attempt at a time, a probe 1s apart (doubling), while its events wait
// with their attempts not counted; the endpoint beside it is not slowed; the first probe that
// succeeds closes the breaker and everything goes, in order.
func TestEndpointCircuitBreaker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newPartner(t, "down", func(string, string, string) bool { return true })
	up := newPartner(t, "up", func(string, string, string) bool { return true })
	e.addPartner(down, endpoints.Endpoint{})
	e.addPartner(up, endpoints.Endpoint{})
	var failing atomic.Bool
	failing.Store(true)
	down.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	r := e.start(func(cfg *Config) { endpointsConfig(cfg); cfg.MaxAttempts = -1 })
	e.write("c", tenantEvents{"", "order", "order.created", 50, 2}, []*partner{down, up})
	waitPartners(t, up)
	waitFor(t, 30*time.Second, "the breaker open", func() bool {
		return gaugeValue(r.reg, "outbox_relay_endpoints_circuit_open") == 1
	})
	before := down.recv.Requests()
	time.Sleep(3 * time.Second)
	// Unbroken, 50 aggregates retrying 10ms to 200ms apart would make hundreds of attempts.
	if n := down.recv.Requests() - before; n > 3 {
		t.Fatalf("%d attempts in 3s with the breaker open, want at most 3 probes", n)
	}
	failing.Store(false)
	waitPartners(t, down)
	waitFor(t, 30*time.Second, "the breaker closed", func() bool {
		return gaugeValue(r.reg, "outbox_relay_endpoints_circuit_open") == 0
	})
}

// An endpoint's batch_linger_ms: a batch that is not full waits that long for more events, so a
// burst committed one transaction at a time goes out together, not one request per event.
func TestEndpointBatchLinger(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newPartner(t, "lingering", func(string, string, string) bool { return true })
	e.addPartner(p, endpoints.Endpoint{BatchMaxEvents: 50, BatchLinger: 400 * time.Millisecond})
	e.start(endpointsConfig)
	for i := 0; i < 6; i++ { // six transactions 30ms apart: without a linger, one request each
		e.write(fmt.Sprint("l", i), tenantEvents{"", "order", "order.created", 1, 1}, []*partner{p})
		time.Sleep(30 * time.Millisecond)
	}
	waitPartners(t, p)
	reqs := p.recv.RequestLog()
	if len(reqs) == 0 || len(reqs[0].IDs) < 2 {
		t.Fatalf("requests %+v: the first carried one event, the linger did not gather the burst", reqs)
	}
}
