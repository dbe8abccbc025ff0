package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// One endpoint's recover holds no other (issue 38, point 4): a replay --since to one endpoint
// goes through that endpoint's backlog, so while it is under way (its receiver hangs, so it
// cannot end) another endpoint receives what is committed after the request and the slot
// confirms past it; once the receiver answers, the endpoint gets every row of the range again,
// with its original sequence, in order per aggregate. (Before, the replay held the pipeline's
// stream until its page was delivered: the other endpoint got nothing, the slot stood still.)
func TestRecoverOneEndpointHoldsNoOther(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	rec := newPartner(t, "recovering", func(tenant, _, _ string) bool { return tenant == "t1" })
	busy := newPartner(t, "busy", func(tenant, _, _ string) bool { return tenant == "t2" })
	e.addPartner(rec, endpoints.Endpoint{TenantID: "t1"})
	e.addPartner(busy, endpoints.Endpoint{TenantID: "t2"})
	e.start(endpointsConfig)
	var since time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		t.Fatal(err)
	}
	both := []*partner{rec, busy}
	e.write("old", tenantEvents{"t1", "order", "order.created", 40, 50}, both)
	waitPartners(t, rec)
	waitFor(t, time.Minute, "every row marked done", func() bool { return e.notDone() == 0 })
	old := rec.want

	rec.recv.Hang()
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	plan, err := control.RequestReplaySince(ctx, conn, control.SinceRequest{Pipeline: "default/" + rec.id, Since: since}, false)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Events != int64(len(old.Committed)) {
		t.Fatalf("the replay selects %d events, want the %d of the range", plan.Events, len(old.Committed))
	}
	e.write("live", tenantEvents{"t2", "order", "order.created", 20, 10}, both)
	owed := e.currentLSN()
	if rep := waitAll(t, busy.recv, busy.want, 30*time.Second); !rep.OK() {
		t.Fatalf("while the replay to %s is under way, endpoint %s got what was committed after it: %s", rec.id, busy.id, rep)
	}
	waitFor(t, 30*time.Second, "the slot confirmed past the request and what followed it", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= owed
	})
	// The replay was under way all along: its endpoint hangs, and got nothing of it yet.
	if n := len(rec.recv.Deliveries()); n != len(old.Committed) {
		t.Fatalf("the recovering endpoint got %d deliveries while it hung, want the %d from before the replay", n, len(old.Committed))
	}
	if n := e.backlogCount(rec.id); n == 0 {
		t.Fatal("the replay's rows are not in the recovering endpoint's backlog")
	}

	rec.recv.Unhang()
	waitFor(t, 2*time.Minute, "every row of the range re-sent", func() bool {
		n := map[string]int{}
		for _, d := range rec.recv.Deliveries() {
			n[d.ID]++
		}
		for _, c := range old.Committed {
			if n[c.ID] < 2 {
				return false
			}
		}
		return true
	})
	checkSince(t, rec.recv.Deliveries(), old, relaytest.Result{})
	waitFor(t, 30*time.Second, "the backlog emptied", func() bool { return e.backlogCount(rec.id) == 0 })
	if n := len(busy.recv.Deliveries()); n != len(busy.want.Committed) {
		t.Fatalf("endpoint %s got %d deliveries, want its %d events once: nothing of the other's replay", busy.id, n, len(busy.want.Committed))
	}
}
