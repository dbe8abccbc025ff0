package relay

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// logTo makes the relay log at info level to the test's log and to logs.
func logTo(logs *relaytest.SyncBuffer, t *testing.T) func(*Config) {
	return func(c *Config) {
		c.Logger = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), logs)).Level(zerolog.InfoLevel)
	}
}

// savedStatus reads what the relay last saved of endpoint id's status (what `status
// --endpoints`, the API's and the portal's stats show): its undelivered count and oldest.
func (e *env) savedStatus(id string) (undelivered int64, oldest *time.Time) {
	e.t.Helper()
	err := e.pool.QueryRow(context.Background(), `SELECT coalesce(sum(undelivered), 0), min(oldest_undelivered_at)
		FROM outbox_endpoint_status WHERE endpoint_id = $1`, id).Scan(&undelivered, &oldest)
	if err != nil {
		e.t.Fatal(err)
	}
	return undelivered, oldest
}

// An endpoint that spilled owes what its backlog holds: its undelivered count and the age of its
// oldest event count the backlog, in its series and in its saved status, although it holds only
// a page of it in memory (1,000 events); once it recovers, it is owed nothing.
func TestEndpointGaugesCountItsBacklog(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newPartner(t, "down", func(string, string, string) bool { return true })
	e.addPartner(down, endpoints.Endpoint{})
	var failing atomic.Bool
	failing.Store(true)
	down.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusInternalServerError
		}
		return 0
	})
	r := e.start(func(c *Config) { endpointsConfig(c); c.SpillAfter, c.MaxAttempts = 300*time.Millisecond, -1 })
	written := time.Now()
	res := e.produce(relaytest.Workload{Events: 1100, Aggregates: 50, MaxTxSize: 50})
	waitFor(t, time.Minute, "all 1,100 events in the backlog", func() bool { return e.backlogCount(down.id) == 1100 })
	waitFor(t, 30*time.Second, "the series and the saved status count the backlog", func() bool {
		n, oldest := e.savedStatus(down.id)
		return r.metric(t, "outbox_relay_endpoint_undelivered", "endpoint", down.id) == 1100 &&
			r.metric(t, "outbox_relay_endpoint_oldest_undelivered_seconds", "endpoint", down.id) >= time.Since(written).Seconds()-1 &&
			n == 1100 && oldest != nil && !oldest.After(time.Now().Add(-time.Second))
	})
	if v := gaugeValue(r.reg, "outbox_relay_endpoints_spilling"); v != 1 {
		t.Fatalf("endpoints_spilling = %v, want 1", v)
	}
	failing.Store(false)
	if rep := waitAll(t, down.recv, res, time.Minute); !rep.OK() {
		t.Fatalf("after the recovery: %s", rep)
	}
	waitFor(t, 30*time.Second, "nothing owed", func() bool {
		n, oldest := e.savedStatus(down.id)
		return e.backlogCount(down.id) == 0 && n == 0 && oldest == nil && gaugeValue(r.reg, "outbox_relay_endpoints_spilling") == 0
	})
}

// A paused endpoint that spilled and read its whole backlog back (it takes the live stream
// again, holding what it read) still has a backlog: endpoints_spilling counts it, its events
// are owed, and "caught up with its backlog" is not logged until the backlog is empty, after
// it is resumed and has delivered them.
func TestPausedEndpointWithABacklogIsNotCaughtUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := newPartner(t, "paused", func(string, string, string) bool { return true })
	e.addPartner(p, endpoints.Endpoint{})
	var logs relaytest.SyncBuffer
	r := e.start(func(c *Config) { endpointsConfig(c); logTo(&logs, t)(c); c.SpillAfter = 300 * time.Millisecond })
	e.write("a", tenantEvents{"", "order", "order.created", 5, 1}, []*partner{p}) // a success first: a failing one does not rejoin
	waitPartners(t, p)
	if _, err := (endpoints.Store{}).Pause(context.Background(), e.pool, p.id, "maintenance"); err != nil {
		t.Fatal(err)
	}
	e.write("b", tenantEvents{"", "order", "order.created", 10, 3}, []*partner{p})
	waitFor(t, 30*time.Second, "the paused endpoint spilled, read its backlog back and took the stream again", func() bool {
		return strings.Contains(logs.String(), "endpoint read its whole backlog") ||
			strings.Contains(logs.String(), "endpoint caught up with its backlog") // (as it said before)
	})
	if n := e.backlogCount(p.id); n != 30 {
		t.Fatalf("the backlog holds %d events, want the 30 the paused endpoint owes", n)
	}
	if strings.Contains(logs.String(), "caught up with its backlog") {
		t.Fatal(`"caught up with its backlog" logged while the backlog holds 30 events`)
	}
	if v := gaugeValue(r.reg, "outbox_relay_endpoints_spilling"); v != 1 {
		t.Fatalf("endpoints_spilling = %v with the paused endpoint's backlog holding 30 events, want 1", v)
	}
	if v := r.metric(t, "outbox_relay_endpoint_undelivered", "endpoint", p.id); v != 30 {
		t.Fatalf("the paused endpoint owes %v events, want 30", v)
	}
	if _, err := (endpoints.Store{}).Resume(context.Background(), e.pool, p.id); err != nil {
		t.Fatal(err)
	}
	waitPartners(t, p)
	waitFor(t, 30*time.Second, "caught up once the backlog is empty", func() bool {
		return e.backlogCount(p.id) == 0 && strings.Contains(logs.String(), "caught up with its backlog") &&
			gaugeValue(r.reg, "outbox_relay_endpoints_spilling") == 0
	})
}

// /readyz is about the relay: an endpoint that fails every attempt, the only one with events,
// does not make it red although nothing is delivered for longer than the stall timeout (its
// own series report it). The positive control: the same endpoint hanging (no attempt has
// failed yet, the request timeout is long) is a stall, and /readyz says so.
func TestFailingEndpointKeepsTheRelayReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	down := newPartner(t, "down", func(string, string, string) bool { return true })
	e.addPartner(down, endpoints.Endpoint{})
	var addr atomic.Value
	r := e.start(func(c *Config) {
		endpointsConfig(c)
		withHTTP(&addr)(c)
		c.StallTimeout, c.RequestTimeout, c.MaxAttempts = time.Second, time.Minute, -1
		c.SpillAfter, c.SpillSize = time.Hour, 1<<30 // the events stay held, unsettled
	})
	waitFor(t, 10*time.Second, "ready", func() bool { code, _ := get(t, &addr, "/readyz"); return code == 200 })
	down.recv.Hang()
	e.write("a", tenantEvents{"", "order", "order.created", 2, 1}, []*partner{down})
	waitFor(t, 15*time.Second, "a stall while the attempts hang", func() bool {
		code, body := get(t, &addr, "/readyz")
		return code == 503 && strings.Contains(body, "stalled")
	})
	down.recv.SetFail(func(*http.Request) int { return http.StatusInternalServerError })
	down.recv.Unhang()
	waitFor(t, 15*time.Second, "the endpoint failing, its events older than the stall timeout", func() bool {
		return r.metric(t, "outbox_relay_endpoint_failures_in_row", "endpoint", down.id) > 0 &&
			r.metric(t, "outbox_relay_endpoint_oldest_undelivered_seconds", "endpoint", down.id) > 2
	})
	if n := len(down.recv.Deliveries()); n != 0 {
		t.Fatalf("%d events delivered: the relay is not stalled", n)
	}
	// The stall rule's conditions hold now (events older than the stall timeout, none delivered).
	if code, body := get(t, &addr, "/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q with one failing endpoint: readiness is about the relay", code, body)
	}
}
