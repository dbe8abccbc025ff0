package relay

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/relaytest"
	"github.com/outbox-relay/outbox-relay/outbox"
)

// inTx runs f in one transaction of the test's database and commits it.
func (e *env) inTx(f func(tx pgx.Tx)) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	f(tx)
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// enqueueIn writes event seq of aggregate customer/agg of tenant in q and adds it to the want of
// each of to.
func (e *env) enqueueIn(q outbox.Querier, tenant, agg string, seq int, to ...*partner) {
	e.t.Helper()
	id, err := outbox.Enqueue(context.Background(), q, outbox.Event{AggregateType: "customer", AggregateID: agg,
		EventType: "customer.created", TenantID: tenant, Payload: map[string]int{"seq": seq}})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, p := range to {
		p.want.Committed = append(p.want.Committed, relaytest.Committed{ID: id.String(), Aggregate: "customer/" + agg, Seq: seq})
	}
}

// waitConfirmedPast waits until the slot confirmed everything written so far: every endpoint an
// event went to has settled it (delivered, or given up for an endpoint removed), so no attempt
// of it is under way any more.
func (e *env) waitConfirmedPast() {
	e.t.Helper()
	lsn := e.currentLSN()
	waitFor(e.t, 30*time.Second, "the slot confirmed past the last transaction", func() bool {
		confirmed, _ := e.slotLSNs()
		return confirmed >= lsn
	})
}

// An endpoint change applies to the whole transaction that commits it, whichever side of the
// endpoint's row its events were written on. A signup writes the customer's first event, then
// the partner's endpoint, then a second event, in one transaction: the new endpoint gets both
// (before the fix, the one written before the row never reached it). A transaction that writes
// an event, disables an endpoint and writes another sends neither to it, nor does one that
// removes an endpoint between two events; the other endpoint gets all of them.
func TestEndpointChangeAppliesToItsWholeTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := newPartner(t, "all", func(string, string, string) bool { return true })
	e.addPartner(all, endpoints.Endpoint{})
	r := e.start(endpointsConfig)
	defer func() { _ = r.stop(t) }()
	ctx := context.Background()

	// Created between two events of its transaction; and a second one created before both.
	signup := newPartner(t, "signup", func(tenant, _, _ string) bool { return tenant == "t1" })
	first := newPartner(t, "first", func(tenant, _, _ string) bool { return tenant == "t2" })
	e.inTx(func(tx pgx.Tx) {
		e.enqueueIn(tx, "t1", "c1", 1, all, signup)
		ep := endpoints.Endpoint{ID: signup.id, URL: signup.recv.URL, Secret: "secret-of-" + signup.id + "-0123456789", TenantID: "t1"}
		if _, err := (endpoints.Store{}).Add(ctx, tx, ep); err != nil {
			t.Fatal(err)
		}
		e.enqueueIn(tx, "t1", "c1", 2, all, signup)
	})
	e.inTx(func(tx pgx.Tx) {
		ep := endpoints.Endpoint{ID: first.id, URL: first.recv.URL, Secret: "secret-of-" + first.id + "-0123456789", TenantID: "t2"}
		if _, err := (endpoints.Store{}).Add(ctx, tx, ep); err != nil {
			t.Fatal(err)
		}
		e.enqueueIn(tx, "t2", "c2", 1, all, first)
	})
	waitPartners(t, all, signup, first)

	// Disabled between two events of its transaction: neither goes to it (the disable keeps
	// what it was owed before, here nothing, and delivers that once it is enabled).
	e.inTx(func(tx pgx.Tx) {
		e.enqueueIn(tx, "t1", "c3", 1, all)
		if _, err := (endpoints.Store{}).Disable(ctx, tx, signup.id, "closing the account"); err != nil {
			t.Fatal(err)
		}
		e.enqueueIn(tx, "t1", "c3", 2, all)
	})
	// Removed between two events of its transaction: neither goes to it.
	e.inTx(func(tx pgx.Tx) {
		e.enqueueIn(tx, "t2", "c4", 1, all)
		if err := (endpoints.Store{}).Remove(ctx, tx, first.id); err != nil {
			t.Fatal(err)
		}
		e.enqueueIn(tx, "t2", "c4", 2, all)
	})
	waitPartners(t, all)
	e.waitConfirmedPast()
	// The positive control for the disabled one: enabled, it gets what is committed next, after
	// whatever it was kept (which would have come first).
	if _, err := (endpoints.Store{}).Enable(ctx, e.pool, signup.id); err != nil {
		t.Fatal(err)
	}
	e.enqueueIn(e.pool, "t1", "c5", 1, all, signup)
	// Each got exactly its want (an event of the disabling or removing transaction delivered
	// to that endpoint is a phantom), and every attempt of those ended with the confirmation.
	waitPartners(t, all, signup, first)
}
