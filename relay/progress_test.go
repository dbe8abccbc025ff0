package relay

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// recordedDeliveries returns how many distinct events the delivery log records delivered to
// endpoint id.
func (e *env) recordedDeliveries(id string) int {
	e.t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), `SELECT count(DISTINCT u.id) FROM outbox_deliveries d
		CROSS JOIN LATERAL unnest(d.event_ids) AS u(id) WHERE d.endpoint_id = $1`, id).Scan(&n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

// The trial of issue 38 at small scale: a relay killed (SIGKILL) while one endpoint fails,
// before that endpoint spills, is started again. The slot could not confirm past the events the
// failing endpoint owed, so the new process is sent them again; the healthy endpoints, which
// the delivery log says have them, do not get them again (before: every one of them, a flood
// to every partner for one partner's incident). The failing endpoint, once it answers, gets
// everything in order, which shows the events were sent again.
func TestSIGKILLBeforeASpillResendsNothingToHealthyEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := func(string, string, string) bool { return true }
	var healthy []*partner
	for i := range 4 {
		p := newPartner(t, fmt.Sprintf("healthy-%d", i), all)
		e.addPartner(p, endpoints.Endpoint{})
		healthy = append(healthy, p)
	}
	bad := newPartner(t, "failing", all)
	e.addPartner(bad, endpoints.Endpoint{})
	var failing atomic.Bool
	failing.Store(true)
	bad.recv.SetFail(func(*http.Request) int {
		if failing.Load() {
			return http.StatusInternalServerError
		}
		return 0
	})
	everyone := append(slices.Clone(healthy), bad)
	// No spill before the kill: the failing endpoint holds the slot back.
	flags := []string{"--retry-min", "10ms", "--retry-max", "200ms", "--spill-after", "10m"}
	cmd := e.startEndpointsProcess(testWriter{t}, flags...)
	e.waitSlot()
	e.write("before", tenantEvents{"", "order", "order.created", 20, 10}, everyone)
	before := len(bad.want.Committed)
	for _, p := range healthy {
		if rep := waitAll(t, p.recv, p.want, time.Minute); len(rep.Lost) > 0 {
			t.Fatalf("endpoint %s before the kill: %s", p.id, rep)
		}
	}
	// What the previous leader delivered and its delivery log recorded (it writes every
	// second): the kill comes after, as in the trial (a partner failing for a while).
	waitFor(t, 30*time.Second, "the delivery log recorded the healthy endpoints' deliveries", func() bool {
		for _, p := range healthy {
			if e.recordedDeliveries(p.id) < before {
				return false
			}
		}
		return true
	})
	if n := len(bad.recv.Deliveries()); n != 0 {
		t.Fatalf("the failing endpoint accepted %d events before the kill; the test needs it to owe them all", n)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	e.startEndpointsProcess(testWriter{t}, flags...)
	e.write("after", tenantEvents{"", "order", "order.created", 20, 2}, everyone)
	failing.Store(false)
	waitPartners(t, everyone...)
	for _, p := range healthy {
		rep := relaytest.Check(p.want, p.recv.Deliveries())
		got := len(p.want.Committed)
		t.Logf("endpoint %s: %d events, %d duplicates (%.1f%%)", p.id, got, rep.Duplicates, 100*float64(rep.Duplicates)/float64(got))
		if rep.Duplicates*100 > got {
			t.Errorf("endpoint %s got %d duplicates of %d events after the restart (more than 1%%): the events sent again "+
				"went to it although the delivery log says it had them", p.id, rep.Duplicates, got)
		}
	}
	if rep := relaytest.Check(bad.want, bad.recv.Deliveries()); rep.Delivered < before {
		t.Fatalf("the failing endpoint got %d events, fewer than the %d it owed at the kill", rep.Delivered, before)
	}
}
