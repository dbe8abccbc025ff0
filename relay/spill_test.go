package relay

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// backlogCount returns how many events the endpoint's backlog holds.
func (e *env) backlogCount(id string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_endpoint_backlog WHERE endpoint_id = $1`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// healthyAndFailing adds two endpoints subscribed to everything: one healthy, and one that
// answers status while failing is set (it starts set).
func (e *env) healthyAndFailing(status int) (ok, bad *partner, failing *atomic.Bool) {
	ok = newPartner(e.t, "healthy", func(string, string, string) bool { return true })
	bad = newPartner(e.t, "failing", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	e.addPartner(bad, endpoints.Endpoint{})
	failing = new(atomic.Bool)
	failing.Store(true)
	bad.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return status
		}
		return 0
	})
	return ok, bad, failing
}

// startEndpointsProcess runs `outbox-relay run --endpoints` on the test's slot as a process of
// its own (to be SIGKILLed), with flags added, its log (JSON, warn) to stderr; it is killed at
// the test's end if it still runs.
func (e *env) startEndpointsProcess(stderr io.Writer, flags ...string) *exec.Cmd {
	e.t.Helper()
	args := append([]string{"run", "--endpoints", "--slot", e.slot, "--publication", "pub_" + e.slot,
		"--metrics-addr", "", "--log-format", "json", "--log-level", "warn"}, flags...)
	cmd := exec.Command(relaytest.RelayBinary(e.t), args...)
	cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// An endpoint that fails spills once its oldest event waited spill_after: its events go to its
// backlog and the slot confirms past them, while the healthy endpoint goes on. A relay
// restarted meanwhile still has the backlog; when the endpoint answers again it receives every
// event in order per aggregate, from the backlog and then live, and the backlog empties.
func TestEndpointSpillsToItsBacklogAndRejoins(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok, bad, failing := e.healthyAndFailing(http.StatusInternalServerError)
	spill := func(c *Config) { endpointsConfig(c); c.SpillAfter = 300 * time.Millisecond }
	r := e.start(spill)
	live := []*partner{ok, bad}
	e.write("a", tenantEvents{"", "order", "order.created", 10, 5}, live)
	waitPartners(t, ok)
	owed := e.currentLSN()
	waitFor(t, 30*time.Second, "the slot confirmed past the failing endpoint's events", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= owed
	})
	if n := e.backlogCount(bad.id); n != 50 {
		t.Fatalf("the failing endpoint's backlog holds %d events, want 50", n)
	}
	if n := e.backlogCount(ok.id); n != 0 {
		t.Fatalf("the healthy endpoint's backlog holds %d events", n)
	}
	// Spilling: what comes next goes to the backlog too, and the slot moves on.
	e.write("b", tenantEvents{"", "order", "order.created", 10, 5}, live)
	waitPartners(t, ok)
	owed = e.currentLSN()
	waitFor(t, 30*time.Second, "the slot confirmed past the events spilled live", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= owed && e.backlogCount(bad.id) == 100
	})
	// What the endpoint alerts read (deploy/prometheus/alerts.yml): the failing endpoint's own
	// series say that it fails, what its backlog holds and the age of the oldest event it is
	// owed, which it reads back from the backlog while it retries; the healthy one, not in
	// trouble, has none.
	waitFor(t, 30*time.Second, "the failing endpoint's series", func() bool {
		return r.metric(t, "outbox_relay_endpoint_failures_in_row", "endpoint", bad.id) > 0 &&
			r.metric(t, "outbox_relay_endpoint_backlog", "endpoint", bad.id) > 0 &&
			r.metric(t, "outbox_relay_endpoint_oldest_undelivered_seconds", "endpoint", bad.id) > 0
	})
	if v := r.metric(t, "outbox_relay_endpoint_failures_in_row", "endpoint", ok.id); v != -1 {
		t.Errorf("the healthy endpoint exports failures in a row (%v): only the endpoints in trouble have series", v)
	}
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	r = e.start(spill)
	defer func() { _ = r.stop(t) }()
	e.write("c", tenantEvents{"", "order", "order.created", 10, 5}, live)
	waitPartners(t, ok)
	failing.Store(false)
	waitPartners(t, ok, bad)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(bad.id) == 0 })
	waitFor(t, 30*time.Second, "the recovered endpoint's series gone (its alerts resolve)", func() bool {
		return r.metric(t, "outbox_relay_endpoint_failures_in_row", "endpoint", bad.id) == -1
	})
	// Rejoined: later events go live.
	e.write("d", tenantEvents{"", "order", "order.created", 10, 5}, live)
	waitPartners(t, ok, bad)
	if n := e.backlogCount(bad.id); n != 0 {
		t.Fatalf("after the rejoin the backlog holds %d events", n)
	}
	// Each event went to both endpoints: its row is marked done once both have it, including the
	// ones the failing endpoint got from its backlog.
	waitFor(t, 30*time.Second, "every row marked done", func() bool { return e.notDone() == 0 })
}

// A disabled endpoint keeps what it held: the events it had not delivered go to its backlog
// (the slot confirms past them), it is sent nothing committed while it is disabled, and once it
// is enabled it receives the kept events in order, then what is committed after.
func TestDisabledEndpointKeepsItsEventsUntilEnabled(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok, bad, failing := e.healthyAndFailing(http.StatusServiceUnavailable)
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = time.Hour, 1<<30 }) // no spill but the disable's
	defer func() { _ = r.stop(t) }()
	e.write("a", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok)
	if _, err := (endpoints.Store{}).Disable(context.Background(), e.pool, bad.id, "maintenance"); err != nil {
		t.Fatal(err)
	}
	owed := e.currentLSN()
	waitFor(t, 30*time.Second, "the held events kept in the backlog and the slot past them", func() bool {
		confirmed, _ := e.slotLSNs()
		return e.backlogCount(bad.id) == 50 && confirmed >= owed
	})
	e.write("b", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok}) // not routed to the disabled one
	waitPartners(t, ok)
	failing.Store(false)
	if _, err := (endpoints.Store{}).Enable(context.Background(), e.pool, bad.id); err != nil {
		t.Fatal(err)
	}
	e.write("c", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok, bad)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(bad.id) == 0 })
	waitFor(t, 30*time.Second, "the recovered endpoint's series gone (its alerts resolve)", func() bool {
		return r.metric(t, "outbox_relay_endpoint_failures_in_row", "endpoint", bad.id) == -1
	})
}

// An endpoint's spill_after_ms wins over the pipeline's spill_after: with the pipeline's an
// hour, the endpoint whose row says 300ms spills, and the other failing one holds its events.
func TestEndpointSpillAfterOfItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	quick := newPartner(t, "quick", func(string, string, string) bool { return true })
	slow := newPartner(t, "slow", func(string, string, string) bool { return true })
	e.addPartner(quick, endpoints.Endpoint{SpillAfter: 300 * time.Millisecond})
	e.addPartner(slow, endpoints.Endpoint{})
	fail := func(*http.Request) int { return http.StatusInternalServerError }
	quick.recv.SetFail(fail)
	slow.recv.SetFail(fail)
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = time.Hour, 1<<30 })
	defer func() { _ = r.stop(t) }()
	e.write("a", tenantEvents{"", "order", "order.created", 4, 5}, nil)
	waitFor(t, 30*time.Second, "the endpoint with spill_after_ms spilled", func() bool { return e.backlogCount(quick.id) == 20 })
	time.Sleep(time.Second)
	if n := e.backlogCount(slow.id); n != 0 {
		t.Fatalf("the endpoint with the pipeline's spill_after (an hour) spilled %d events", n)
	}
}

// The relay process SIGKILLed again and again while an endpoint that fails in stretches spills,
// drains its backlog and rejoins the stream: nothing is lost for either endpoint, and each gets
// every aggregate's events in order (first deliveries).
func TestSIGKILLWhileAnEndpointSpillsLosesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := newPartner(t, "steady", func(string, string, string) bool { return true })
	flaky := newPartner(t, "flaky", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	e.addPartner(flaky, endpoints.Endpoint{})
	var failing atomic.Bool
	flaky.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	start := func() *exec.Cmd {
		return e.startEndpointsProcess(testWriter{t}, "--retry-min", "10ms", "--retry-max", "200ms", "--spill-after", "300ms")
	}
	cmd := start()
	e.waitSlot()
	stop := make(chan struct{})
	written := make(chan struct{})
	go func() { // stretches of failure long enough to spill, and of health to drain and rejoin
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(1000+rand.IntN(1500)) * time.Millisecond):
				failing.Store(!failing.Load())
			}
		}
	}()
	go func() {
		defer close(written)
		for round := 0; round < 40; round++ {
			e.write(fmt.Sprintf("r%d", round), tenantEvents{"", "order", "order.created", 10, 3}, []*partner{ok, flaky})
			time.Sleep(300 * time.Millisecond)
		}
	}()
	var spilled atomic.Bool
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
				if e.backlogCount(flaky.id) > 0 {
					spilled.Store(true)
				}
			}
		}
	}()
	kills := 0
	for done := false; !done; {
		select {
		case <-written:
			done = true
		case <-time.After(time.Duration(1500+rand.IntN(1500)) * time.Millisecond):
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			kills++
			cmd = start()
		}
	}
	close(stop)
	failing.Store(false)
	waitPartners(t, ok, flaky)
	if !spilled.Load() {
		t.Fatalf("the flaky endpoint never spilled in %d kills: the test did not exercise the backlog", kills)
	}
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(flaky.id) == 0 })
	t.Logf("%d SIGKILLs; flaky endpoint: %d deliveries for %d events", kills, len(flaky.recv.Deliveries()), len(flaky.want.Committed))
}

// A relay that starts again reads the backlog its predecessor wrote with the endpoint as it was
// where the stream starts again, which can be before a pause the backlog's entries were
// committed after: those entries wait for the pause to apply, and then for the resume. Here a
// failing endpoint that never spills holds the slot, and so the stream, before the pause (the
// restarted relay buffers one event: reading stops at it), while the paused endpoint spilled
// an event from before its pause and those after it.
func TestBacklogAfterAPauseWaitsForTheResumeAfterARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder := newPartner(t, "holder", func(_, aggType, _ string) bool { return aggType == "hold" })
	paused := newPartner(t, "paused", func(_, aggType, _ string) bool { return aggType != "hold" })
	e.addPartner(holder, endpoints.Endpoint{AggregateTypes: []string{"hold"}, SpillAfter: time.Hour})
	e.addPartner(paused, endpoints.Endpoint{AggregateTypes: []string{"pre", "order"}})
	var holding, failing atomic.Bool
	holding.Store(true)
	failing.Store(true)
	holder.recv.SetFail(func(*http.Request) int {
		if holding.Load() {
			return http.StatusInternalServerError
		}
		return 0
	})
	paused.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	spill := func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = 300*time.Millisecond, 1<<30 }
	r := e.start(spill)
	both := []*partner{holder, paused}
	e.write("a", tenantEvents{"", "hold", "hold.created", 1, 1}, both)
	e.write("b", tenantEvents{"", "pre", "pre.created", 1, 1}, both)
	waitFor(t, 30*time.Second, "the failing endpoint spilled its first event", func() bool { return e.backlogCount(paused.id) == 1 })
	ctx := context.Background()
	if _, err := (endpoints.Store{}).Pause(ctx, e.pool, paused.id, "partner maintenance"); err != nil {
		t.Fatal(err)
	}
	e.write("c", tenantEvents{"", "order", "order.created", 5, 2}, both)
	waitFor(t, 30*time.Second, "the paused endpoint spilled what was committed after its pause", func() bool {
		return e.backlogCount(paused.id) == 11
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	r = e.start(func(c *Config) { spill(c); c.MaxBufferedEvents = 1 })
	defer func() { _ = r.stop(t) }()
	waitFor(t, 30*time.Second, "the event committed before the pause delivered from the backlog", func() bool {
		return len(paused.recv.Deliveries()) > 0
	})
	time.Sleep(time.Second)
	for _, d := range paused.recv.Deliveries() {
		if !strings.HasPrefix(d.Aggregate, "pre/") {
			t.Fatalf("the paused endpoint was sent %s (%s), committed while it was paused, before its pause applied", d.ID, d.Aggregate)
		}
	}
	holding.Store(false) // the stream goes on: the pause applies, then the resume
	waitPartners(t, holder)
	time.Sleep(500 * time.Millisecond)
	for _, d := range paused.recv.Deliveries() {
		if !strings.HasPrefix(d.Aggregate, "pre/") {
			t.Fatalf("the paused endpoint was sent %s (%s) before its resume", d.ID, d.Aggregate)
		}
	}
	if _, err := (endpoints.Store{}).Resume(ctx, e.pool, paused.id); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, paused)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(paused.id) == 0 })
}

// A relay that starts with the slot already past an endpoint's pause (what was committed while
// it was paused is in its backlog, and the slot confirmed past it) reads no entry of that
// backlog before the pause applies: a lane's reads are bounded by its first version not applied
// yet from the moment the versions are read, before any is applied. The endpoints torture found
// the new relay delivering such a backlog at once, before the resume; the simulation then
// (the "paused" invariant).
func TestBacklogWrittenWhilePausedWaitsForTheResumeWhenTheSlotIsPastThePause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// a-paused's lane starts first, and the idle endpoints' starts are the window
	paused := newPartner(t, "a-paused", func(_, aggType, _ string) bool { return aggType == "order" })
	other := newPartner(t, "other", func(_, aggType, _ string) bool { return aggType == "other" })
	e.addPartner(paused, endpoints.Endpoint{AggregateTypes: []string{"order"}})
	e.addPartner(other, endpoints.Endpoint{AggregateTypes: []string{"other"}})
	for i := range 60 { // endpoints that get nothing, each a step of the start
		idle := &partner{id: fmt.Sprintf("z-idle-%02d", i), recv: other.recv}
		e.addPartner(idle, endpoints.Endpoint{AggregateTypes: []string{"none"}})
	}
	spill := func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = 300*time.Millisecond, 1<<30 }
	cmd := e.startEndpointsProcess(testWriter{t}, "--spill-after", "300ms")
	e.waitSlot()
	ctx := context.Background()
	if _, err := (endpoints.Store{}).Pause(ctx, e.pool, paused.id, "partner maintenance"); err != nil {
		t.Fatal(err)
	}
	e.write("c", tenantEvents{"", "order", "order.created", 5, 2}, []*partner{paused})
	waitFor(t, 30*time.Second, "the paused endpoint spilled what was committed while paused", func() bool {
		return e.backlogCount(paused.id) == 10
	})
	e.write("d", tenantEvents{"", "other", "other.created", 1, 1}, []*partner{other})
	waitPartners(t, other)                     // the slot confirms past the pause and the spilled events
	if err := cmd.Process.Kill(); err != nil { // killed: the versions log keeps the pause past its marker
		t.Fatal(err)
	}
	_ = cmd.Wait()
	r := e.start(spill)
	defer func() { _ = r.stop(t) }()
	e.write("e", tenantEvents{"", "other", "other.created", 1, 1}, []*partner{other})
	waitPartners(t, other) // the new relay streams, past its start
	if ds := paused.recv.Deliveries(); len(ds) > 0 {
		t.Fatalf("the paused endpoint was sent %d events (first %s) committed while it was paused, before its resume", len(ds), ds[0].ID)
	}
	if _, err := (endpoints.Store{}).Resume(ctx, e.pool, paused.id); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, paused)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(paused.id) == 0 })
}

// An endpoint added while the relay runs has no version at the versions log's start, only a
// later one; a relay that starts again with the slot past that version must still find the
// backlog it spilled and deliver it.
func TestBacklogOfAnEndpointAddedWhileRunningSurvivesARestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := newPartner(t, "first", func(string, string, string) bool { return true })
	e.addPartner(ok, endpoints.Endpoint{})
	spill := func(c *Config) { endpointsConfig(c); c.SpillAfter = 300 * time.Millisecond }
	r := e.start(spill)
	e.write("a", tenantEvents{"", "order", "order.created", 2, 2}, []*partner{ok})
	waitPartners(t, ok)
	late := newPartner(t, "late", func(string, string, string) bool { return true })
	e.addPartner(late, endpoints.Endpoint{})
	var failing atomic.Bool
	failing.Store(true)
	late.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	e.write("b", tenantEvents{"", "order", "order.created", 5, 2}, []*partner{ok, late})
	waitPartners(t, ok)
	owed := e.currentLSN()
	waitFor(t, 30*time.Second, "the late endpoint spilled and the slot confirmed past its events", func() bool {
		confirmed, _ := e.slotLSNs()
		return e.backlogCount(late.id) == 10 && confirmed >= owed
	})
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	failing.Store(false)
	r = e.start(spill)
	defer func() { _ = r.stop(t) }()
	e.write("c", tenantEvents{"", "order", "order.created", 5, 1}, []*partner{ok, late})
	waitPartners(t, ok, late)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(late.id) == 0 })
}
