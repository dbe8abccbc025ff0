package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
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
	e.addPartner(ok, outbox.Endpoint{})
	e.addPartner(bad, outbox.Endpoint{})
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

// An endpoint that fails spills once its oldest event waited spill_after: its events go to its
// backlog and the slot confirms past them, while the healthy endpoint goes on. A relay
// restarted meanwhile still has the backlog; when the endpoint answers again it receives every
// event in order per aggregate, from the backlog and then live, and the backlog empties.
func TestEndpointSpillsToItsBacklogAndRejoins(t *testing.T) {
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
	e := newEnv(t)
	ok, bad, failing := e.healthyAndFailing(http.StatusServiceUnavailable)
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.SpillSize = time.Hour, 1<<30 }) // no spill but the disable's
	defer func() { _ = r.stop(t) }()
	e.write("a", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok)
	if _, err := outbox.DisableEndpoint(context.Background(), e.pool, bad.id, "maintenance"); err != nil {
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
	if _, err := outbox.EnableEndpoint(context.Background(), e.pool, bad.id); err != nil {
		t.Fatal(err)
	}
	e.write("c", tenantEvents{"", "order", "order.created", 10, 5}, []*partner{ok, bad})
	waitPartners(t, ok, bad)
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(bad.id) == 0 })
}

// An endpoint's spill_after_ms wins over the pipeline's spill_after: with the pipeline's an
// hour, the endpoint whose row says 300ms spills, and the other failing one holds its events.
func TestEndpointSpillAfterOfItsOwn(t *testing.T) {
	e := newEnv(t)
	quick := newPartner(t, "quick", func(string, string, string) bool { return true })
	slow := newPartner(t, "slow", func(string, string, string) bool { return true })
	e.addPartner(quick, outbox.Endpoint{SpillAfter: 300 * time.Millisecond})
	e.addPartner(slow, outbox.Endpoint{})
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
	e := newEnv(t)
	ok := newPartner(t, "steady", func(string, string, string) bool { return true })
	flaky := newPartner(t, "flaky", func(string, string, string) bool { return true })
	e.addPartner(ok, outbox.Endpoint{})
	e.addPartner(flaky, outbox.Endpoint{})
	var failing atomic.Bool
	flaky.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusBadGateway
		}
		return 0
	})
	start := func() *exec.Cmd {
		cmd := exec.Command(relaytest.RelayBinary(t), "run", "--endpoints", "--slot", e.slot, "--publication", "pub_"+e.slot,
			"--metrics-addr", "", "--retry-min", "10ms", "--retry-max", "200ms", "--spill-after", "300ms",
			"--log-format", "json", "--log-level", "warn")
		cmd.Env = append(os.Environ(), "DB_DSN="+e.dsn)
		cmd.Stderr = testWriter{t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	cmd := start()
	waitFor(t, 30*time.Second, "slot created", func() bool {
		var n int
		_ = e.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&n)
		return n == 1
	})
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
