package main

import (
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

var epT0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at is epT0 plus s seconds.
func at(s float64) time.Time { return epT0.Add(time.Duration(s * float64(time.Second))) }

// cleanEpRecord is a small endpoints run in which every invariant holds. Endpoints:
//
//	ep-a  tenant t00, order.*                                  add 1, pause 4, resume 6
//	ep-b  no tenant, invoice.paid and order.created, only aggregate type invoice
//	                                                           add 1, disable 5, enable 7
//	ep-c  tenant t00, *                                        add 3, remove 8
//	ep-d  tenant t02, *                                        add 1, pause 5.2, remove 6.5
//
// Transactions (commit LSN 0/i50, read around it [0/i00, 0/(i+1)00) for tx i-1):
//
//	tx0 at 2    e1 order/1 order.created t00 seq 1     a: required; b: outside (aggregate type); c: before creation
//	tx1 at 3.5  e2 invoice/2 invoice.paid t01 seq 1    b: required (owed at the disable at 5, kept for the enable at 7); a, c: outside (tenant)
//	tx2 at 4.5  e3 order/1 order.paid t00 seq 2        a: paused, required, not before 6; c: optional (removed at 8)
//	            e9 invoice/6 invoice.created t00 seq 1 a: outside (pattern); c: optional
//	tx3 at 5.5  e4 invoice/2 invoice.paid t01 seq 2    b: disabled
//	            e8 customer/5 customer.updated t02 seq 1  d: paused, then removed before a resume
//	tx4 at 7.5  e5 order/1 order.shipped t00 seq 3     a: required; c: optional
//	            e6 invoice/3 invoice.paid (no tenant)  b: required; a, c: outside (tenant)
//	tx5 at 9    e7 order/4 order.created t00 seq 1     a: required; c: removed
func cleanEpRecord() epRecord {
	a := epVersion{Exists: true, State: stEnabled, Tenant: "t00", EventTypes: []string{"order.*"}}
	b := epVersion{Exists: true, State: stEnabled, EventTypes: []string{"invoice.paid", "order.created"}, AggTypes: []string{"invoice"}}
	c := epVersion{Exists: true, State: stEnabled, Tenant: "t00", EventTypes: []string{"*"}}
	d := epVersion{Exists: true, State: stEnabled, Tenant: "t02", EventTypes: []string{"*"}}
	with := func(v epVersion, s float64, op string) epVersion {
		v.At, v.Op = at(s), op
		switch op {
		case opPause:
			v.State = stPaused
		case opResume, opEnable:
			v.State = stEnabled
		case opDisable:
			v.State = stDisabled
		case opRemove:
			v.Exists = false
		}
		return v
	}
	tl := timeline{
		"ep-a": {with(a, 1, opAdd), with(a, 4, opPause), with(a, 6, opResume)},
		"ep-b": {with(b, 1, opAdd), with(b, 5, opDisable), with(b, 7, opEnable)},
		"ep-c": {with(c, 3, opAdd), with(c, 8, opRemove)},
		"ep-d": {with(d, 1, opAdd), with(d, 5.2, opPause), with(d, 6.5, opRemove)},
	}
	ev := func(id, agg, typ, tenant string, seq int) event {
		return event{ID: id, Aggregate: agg, Seq: seq, Tenant: tenant, EventType: typ, AggType: agg[:len(agg)-2]}
	}
	txs := []txRecord{
		{Writer: 0, At: at(2), Events: []event{ev("e1", "order/1", "order.created", "t00", 1)}},
		{Writer: 1, At: at(3.5), Events: []event{ev("e2", "invoice/2", "invoice.paid", "t01", 1)}},
		{Writer: 0, At: at(4.5), Events: []event{ev("e3", "order/1", "order.paid", "t00", 2),
			ev("e9", "invoice/6", "invoice.created", "t00", 1)}},
		{Writer: 1, At: at(5.5), Events: []event{ev("e4", "invoice/2", "invoice.paid", "t01", 2),
			ev("e8", "customer/5", "customer.updated", "t02", 1)}},
		{Writer: 0, At: at(7.5), Events: []event{ev("e5", "order/1", "order.shipped", "t00", 3),
			ev("e6", "invoice/3", "invoice.paid", "", 1)}},
		{Writer: 1, At: at(9), Events: []event{ev("e7", "order/4", "order.created", "t00", 1)}},
	}
	where := map[string][2]int{} // id → tx, index
	for i := range txs {
		txs[i].Before, txs[i].After = pglogrepl.LSN(0x100*(i+1)), pglogrepl.LSN(0x100*(i+2))
		for k, e := range txs[i].Events {
			where[e.ID] = [2]int{i, k}
		}
	}
	dl := func(id, ep string, s float64) delivery {
		w := where[id]
		e := txs[w[0]].Events[w[1]]
		return delivery{ID: id, Aggregate: e.Aggregate, Seq: e.Seq, Endpoint: ep, At: at(s),
			Sequence: sequence(pglogrepl.LSN(0x100*(w[0]+1)+0x50), w[1])}
	}
	ds := []delivery{
		dl("e1", "ep-a", 2.1), // 0
		dl("e2", "ep-b", 3.6), // 1
		dl("e3", "ep-c", 4.6), // 2
		dl("e9", "ep-c", 4.7), // 3
		dl("e3", "ep-a", 6.1), // 4: after the resume
		dl("e5", "ep-a", 7.6), // 5
		dl("e6", "ep-b", 7.6), // 6
		dl("e5", "ep-c", 7.7), // 7
		dl("e7", "ep-a", 9.1), // 8
	}
	// Each sample passes a transaction only once its holding pairs are below the mark; tx1's
	// only pair (e2 at ep-b) holds it until delivered (entry 1), the disable at 5 aside.
	samples := []sample{
		{LSN: 0x201, Mark: 1, At: at(2.2)}, // passes tx0 (e1@a is entry 0)
		{LSN: 0x301, Mark: 2, At: at(3.7)}, // passes tx1 (e2@b is entry 1)
		{LSN: 0x401, Mark: 5, At: at(6.2)}, // passes tx2 (e3@a 4, e3@c 2, e9@c 3)
		{LSN: 0x601, Mark: 8, At: at(7.8)}, // passes tx3 (nothing routed; e8@d excused at 6.5) and tx4
		{LSN: 0x701, Mark: 9, At: at(9.2)}, // passes tx5
		{LSN: 0x301, Mark: 9, At: at(9.3)}, // moved back after a crash restart: allowed
	}
	return epRecord{Txs: txs, RolledBack: []string{"r1"}, Aborted: []string{"x1"}, Deliveries: ds, Samples: samples, Timeline: tl}
}

// epFailing names the verdict's non-empty lists.
func epFailing(v epVerdict) []string {
	lists := map[string][]string{
		"lost": v.Lost, "phantom-rolled-back": v.PhantomsRolledBack, "phantom-aborted": v.PhantomsAborted,
		"phantom-unknown": v.PhantomsUnknown, "unknown-endpoint": v.UnknownEndpoint, "outside": v.Outside,
		"while-paused": v.WhilePaused, "order": v.OrderViolations, "confirm": v.ConfirmViolations,
		"confirm-seq": v.ConfirmSeqViolations, "sequence": v.SequenceErrors, "ordering": v.OrderingErrors,
	}
	var out []string
	for name, l := range lists {
		if len(l) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestCheckEndpointsFindsEachViolation(t *testing.T) {
	drop := func(r *epRecord, i int) { r.Deliveries = slices.Delete(r.Deliveries, i, i+1) }
	add := func(r *epRecord, d delivery) { r.Deliveries = append(r.Deliveries, d) }
	copyOf := func(r *epRecord, i int, ep string, s float64) delivery {
		d := r.Deliveries[i]
		d.Endpoint, d.At = ep, at(s)
		return d
	}
	tests := []struct {
		name   string
		mutate func(r *epRecord)
		want   []string // the lists that must be non-empty, sorted; nothing else may be
		wantIn string   // a substring of the one failing description, if set
	}{
		{"clean run", func(r *epRecord) {}, nil, ""},
		{"duplicates are allowed", func(r *epRecord) { add(r, r.Deliveries[0]); add(r, r.Deliveries[4]) }, nil, ""},
		{"an optional pair may be dropped after its endpoint is removed", func(r *epRecord) {
			drop(r, 7) // e5@c, ep-c removed at 8
			drop(r, 3) // e9@c
			drop(r, 2) // e3@c
			// Left: e1@a 0, e2@b 1, e3@a 2, e5@a 3, e6@b 4, e7@a 5; the samples that pass tx2
			// and tx4 come after ep-c's removal.
			r.Samples = []sample{{LSN: 0x201, Mark: 1, At: at(2.2)}, {LSN: 0x301, Mark: 2, At: at(3.7)},
				{LSN: 0x401, Mark: 3, At: at(8.1)}, {LSN: 0x601, Mark: 5, At: at(8.2)}, {LSN: 0x701, Mark: 6, At: at(9.2)}}
		}, nil, ""},
		{"an optional pair holds the slot until its endpoint is removed", func(r *epRecord) {
			drop(r, 3) // e9@c
			drop(r, 2) // e3@c
			// Left: e1@a 0, e2@b 1, e3@a 2, e5@a 3, e6@b 4, e5@c 5, e7@a 6; tx2 passed at 7.9,
			// before ep-c's removal at 8, its e3@c undelivered.
			r.Samples = []sample{{LSN: 0x201, Mark: 1, At: at(2.2)}, {LSN: 0x301, Mark: 2, At: at(3.7)},
				{LSN: 0x401, Mark: 3, At: at(7.9)}, {LSN: 0x601, Mark: 6, At: at(8.2)}, {LSN: 0x701, Mark: 7, At: at(9.2)}}
		}, []string{"confirm", "confirm-seq"}, ""},
		{"a pair owed at a disable, never delivered after the enable", func(r *epRecord) {
			drop(r, 1) // e2@b: the disable at 5 kept it for the enable at 7
			r.Samples = r.Samples[:1]
		}, []string{"lost"}, "ep-b e2"},
		{"a required pair never delivered, the slot held back", func(r *epRecord) {
			drop(r, 8) // e7@a
			r.Samples = r.Samples[:4]
		}, []string{"lost"}, "ep-a e7"},
		{"a required pair never delivered, and the slot passed it", func(r *epRecord) {
			drop(r, 8)
			r.Samples[4].Mark, r.Samples[5].Mark = 8, 8
		}, []string{"confirm", "lost"}, ""},
		{"a pair routed while paused never delivered", func(r *epRecord) {
			drop(r, 4) // e3@a
			r.Samples = r.Samples[:2]
		}, []string{"lost"}, "ep-a e3"},
		{"delivered before the endpoint's creation", func(r *epRecord) { add(r, copyOf(r, 0, "ep-c", 9.5)) },
			[]string{"outside"}, whyBeforeCreation},
		{"delivered after the endpoint's removal", func(r *epRecord) { add(r, copyOf(r, 8, "ep-c", 9.5)) },
			[]string{"outside"}, whyRemoved},
		{"delivered while disabled", func(r *epRecord) {
			d := r.Deliveries[1] // e2@b, for e4's headers
			d.ID, d.Seq, d.At, d.Sequence = "e4", 2, at(5.6), sequence(0x450, 0)
			add(r, d)
		}, []string{"outside"}, whyDisabled},
		{"outside the subscription: the aggregate type", func(r *epRecord) { add(r, copyOf(r, 0, "ep-b", 2.3)) },
			[]string{"outside"}, whyOutside},
		{"outside the subscription: the event-type pattern", func(r *epRecord) { add(r, copyOf(r, 3, "ep-a", 4.8)) },
			[]string{"outside"}, whyOutside},
		{"outside the subscription: another tenant", func(r *epRecord) { add(r, copyOf(r, 1, "ep-c", 3.8)) },
			[]string{"outside"}, whyOutside},
		{"outside the subscription: an event without a tenant to a tenant's endpoint", func(r *epRecord) {
			add(r, copyOf(r, 6, "ep-c", 7.8))
		}, []string{"outside"}, whyOutside},
		{"held by a pause, then delivered though the endpoint was removed before any resume", func(r *epRecord) {
			d := r.Deliveries[0]
			d.ID, d.Aggregate, d.Seq, d.Endpoint, d.At, d.Sequence = "e8", "customer/5", 1, "ep-d", at(5.8), sequence(0x450, 1)
			add(r, d)
		}, []string{"outside"}, whyPausedDropped},
		{"routed while paused, delivered before the resume", func(r *epRecord) { r.Deliveries[4].At = at(5.9) },
			[]string{"while-paused"}, "before its resume"},
		{"an aggregate's events out of commit order at one endpoint", func(r *epRecord) {
			r.Deliveries[4], r.Deliveries[5] = r.Deliveries[5], r.Deliveries[4] // e5@a before e3@a
			r.Samples[2].Mark = 6
		}, []string{"order"}, "order/1 at ep-a"},
		{"a rolled-back event delivered", func(r *epRecord) { add(r, delivery{ID: "r1", Endpoint: "ep-a", Aggregate: "order/1"}) },
			[]string{"phantom-rolled-back"}, ""},
		{"an event of a transaction cut off delivered", func(r *epRecord) { add(r, delivery{ID: "x1", Endpoint: "ep-a"}) },
			[]string{"phantom-aborted"}, ""},
		{"an id never written delivered", func(r *epRecord) { add(r, delivery{ID: "zz", Endpoint: "ep-a"}) },
			[]string{"phantom-unknown"}, ""},
		{"a delivery to an endpoint never created", func(r *epRecord) { add(r, copyOf(r, 0, "ep-z", 2.5)) },
			[]string{"unknown-endpoint"}, ""},
		{"slot confirmed a transaction with a pair of it undelivered", func(r *epRecord) {
			r.Samples[2].Mark = 4 // 0/401 passes tx2, whose e3@a is entry 4
		}, []string{"confirm", "confirm-seq"}, ""},
		{"slot passed the commit record, not After(tx), with a pair undelivered", func(r *epRecord) {
			r.Samples = slices.Insert(r.Samples, 2, sample{LSN: 0x351, Mark: 3, At: at(6)})
		}, []string{"confirm-seq"}, ""},
		{"a pair owed at a disable holds the slot until delivered", func(r *epRecord) {
			r.Samples[1].Mark = 1 // 0/301 at 3.7 passes tx1 before e2@b (entry 1)
		}, []string{"confirm", "confirm-seq"}, ""},
		{"a pair owed at a disable may wait in the backlog while the slot passes", func(r *epRecord) {
			// e2@b, undelivered at 5.1 (the disable at 5), is in ep-b's backlog then.
			r.Backlog = &backlogIndex{ids: map[string]int32{}}
			r.Samples[1] = sample{LSN: 0x301, Mark: 1, BacklogMark: 1, At: at(5.1), Backlog: []int32{r.Backlog.id(pairKey("ep-b", "e2"))}}
			for i := range r.Samples {
				if i != 1 {
					r.Samples[i].BacklogMark = r.Samples[i].Mark
				}
			}
		}, nil, ""},
		{"a pair held by a pause holds the slot until its endpoint is removed", func(r *epRecord) {
			// Passes tx3 at 6.3, before ep-d's removal at 6.5; nothing of tx3 was delivered, so
			// there is no commit LSN to cross-check by.
			r.Samples = slices.Insert(r.Samples, 3, sample{LSN: 0x501, Mark: 5, At: at(6.3)})
		}, []string{"confirm"}, ""},
		{"an index that is not the event's position", func(r *epRecord) { r.Deliveries[3].Sequence = sequence(0x350, 0) },
			[]string{"sequence"}, ""},
		{"changes whose commits agree with the clock", func(r *epRecord) {
			r.Timeline["ep-a"][1].Before, r.Timeline["ep-a"][1].After = 0x300, 0x400 // pause at 4: after tx1, before tx2
		}, nil, ""},
		{"a transaction placed before a change but committed after it", func(r *epRecord) {
			// The commit LSN decides: tx0 (0/150) and tx1 (0/250) come after this pause, so
			// e1's delivery to ep-a at 2.1 is one made while paused.
			r.Timeline["ep-a"][1].Before, r.Timeline["ep-a"][1].After = 0x100, 0x200
		}, []string{"ordering", "while-paused"}, ""},
		{"a transaction placed after a change but committed before it", func(r *epRecord) {
			r.Timeline["ep-a"][1].Before, r.Timeline["ep-a"][1].After = 0x400, 0x500 // tx2 (0/350 at 4.5) after it?
		}, []string{"ordering"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cleanEpRecord()
			tt.mutate(&r)
			v := checkEndpoints(r)
			got := epFailing(v)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("failing checks %v, want %v\nverdict: %+v", got, tt.want, v)
			}
			if v.ok() != (len(tt.want) == 0) {
				t.Fatalf("ok() = %v with failing checks %v", v.ok(), got)
			}
			if tt.wantIn != "" {
				all := slices.Concat(v.Lost, v.Outside, v.WhilePaused, v.OrderViolations)
				if len(all) != 1 || !strings.Contains(all[0], tt.wantIn) {
					t.Fatalf("descriptions %q, want one that says %q", all, tt.wantIn)
				}
			}
		})
	}
}

// The clean record's pairs fall in every class, so each test above meets what it means to.
func TestCheckEndpointsCountsPairs(t *testing.T) {
	v := checkEndpoints(cleanEpRecord())
	// 9 events × 4 endpoints = 36 pairs.
	want := epVerdict{Committed: 9, Endpoints: 4, Required: 6, Optional: 3, Paused: 1, Delivered: 6, OptionalDelivered: 3,
		PausedDelivered: 1}
	if v.Committed != want.Committed || v.Endpoints != want.Endpoints || v.Required != want.Required ||
		v.Optional != want.Optional || v.Paused != want.Paused || v.Delivered != want.Delivered ||
		v.OptionalDelivered != want.OptionalDelivered || v.PausedDelivered != want.PausedDelivered {
		t.Fatalf("got %+v, want counts of %+v", v, want)
	}
	notRouted := 0
	for _, why := range whys {
		if v.NotRouted[why] == 0 {
			t.Errorf("no pair %s", why)
		}
		notRouted += v.NotRouted[why]
	}
	if total := v.Required + v.Optional + notRouted; total != 36 {
		t.Errorf("%d pairs classified, want 36", total)
	}
	if v.Samples != 6 || v.Backward != 1 || v.LastCommit != 0x650 {
		t.Errorf("samples %d, backward %d, last commit %s; want 6, 1, 0/650", v.Samples, v.Backward, v.LastCommit)
	}
}

func TestSubscribed(t *testing.T) {
	e := event{Tenant: "t01", EventType: "order.item.added", AggType: "order"}
	tests := []struct {
		v    epVersion
		want bool
	}{
		{epVersion{EventTypes: []string{"*"}}, true},
		{epVersion{Tenant: "t01", EventTypes: []string{"order.*"}}, true},
		{epVersion{Tenant: "t02", EventTypes: []string{"*"}}, false},
		{epVersion{EventTypes: []string{"order.item"}}, false},
		{epVersion{EventTypes: []string{"order.item.added"}, AggTypes: []string{"invoice", "order"}}, true},
		{epVersion{EventTypes: []string{"*"}, AggTypes: []string{"invoice"}}, false},
		{epVersion{EventTypes: []string{"invoice.*", "order.item.*"}}, true},
		{epVersion{EventTypes: []string{"orders.*"}}, false},
	}
	for _, tt := range tests {
		if got := tt.v.subscribed(e); got != tt.want {
			t.Errorf("%+v subscribed = %v, want %v", tt.v, got, tt.want)
		}
	}
	if (epVersion{Tenant: "t01", EventTypes: []string{"*"}}).subscribed(event{EventType: "x"}) {
		t.Errorf("an event without a tenant reached a tenant's endpoint")
	}
	if !(epVersion{EventTypes: []string{"*"}}).subscribed(event{EventType: "x"}) {
		t.Errorf("an event without a tenant missed an endpoint without one")
	}
}

// Duplicates are counted per endpoint, against the pairs it got, and the summary puts the
// worst rate first.
func TestCheckEndpointsCountsDuplicatesPerEndpoint(t *testing.T) {
	r := cleanEpRecord()
	r.Deliveries = append(r.Deliveries, r.Deliveries[0], r.Deliveries[4], r.Deliveries[1]) // e1@a, e3@a, e2@b again
	v := checkEndpoints(r)
	if v.Duplicates != 3 {
		t.Fatalf("duplicates %d, want 3", v.Duplicates)
	}
	got := map[string]endpointDups{}
	for id, d := range v.PerEndpoint {
		got[id] = *d
	}
	want := map[string]endpointDups{"ep-a": {First: 4, Again: 2}, "ep-b": {First: 2, Again: 1}, "ep-c": {First: 3}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("per endpoint %v, want %v", got, want)
	}
	if s, want := v.dupsByEndpoint(2), "ep-a 2 of 4 (50.00%), ep-b 1 of 2 (50.00%), 1 more"; s != want {
		t.Fatalf("summary %q, want %q", s, want)
	}
}

// Transactions are placed against changes by commit LSN; against the relay's own disable
// after a 410, bounded only by [Lo, After], those inside the window are uncertain.
func TestRuleByCommitOrder(t *testing.T) {
	v := epVersion{Exists: true, State: stEnabled, EventTypes: []string{"*"}}
	add, gone, enable := v, v, v
	add.Op, add.At, add.Before = opAdd, at(1), 0x100
	gone.Op, gone.At, gone.State, gone.Lo, gone.After = opGone, at(4.5), stDisabled, 0x300, 0x500
	enable.Op, enable.At, enable.Before = opEnable, at(6), 0x600
	vs := []epVersion{add, gone, enable}
	e := event{EventType: "order.created", AggType: "order"}
	tests := []struct {
		name string
		p    txPos
		want pairRule
	}{
		{"before the add by LSN, though later by the clock", txPos{At: at(2), Commit: 0xf0}, pairRule{Why: whyBeforeCreation}},
		{"before the 410's window: owed at the disable", txPos{At: at(5), Commit: 0x250}, pairRule{Routed: true, Required: true}},
		{"inside the window", txPos{At: at(4), Commit: 0x400}, pairRule{Routed: true, Uncertain: true}},
		{"inside the window by the writer's bounds", txPos{At: at(4), Before: 0x2f0, After: 0x400}, pairRule{Routed: true, Uncertain: true}},
		{"before the window by the writer's bounds", txPos{At: at(4), Before: 0x200, After: 0x2f0}, pairRule{Routed: true, Required: true}},
		{"after the window: disabled", txPos{At: at(3), Commit: 0x550}, pairRule{Why: whyDisabled}},
		{"after the enable", txPos{At: at(3), Commit: 0x650}, pairRule{Routed: true, Required: true}},
	}
	for _, tt := range tests {
		if got := rule(vs, tt.p, e); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
