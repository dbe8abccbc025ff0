// Package storetest is the conformance suite of the delivery engine's stores (package store):
// one set of cases that every implementation runs, with the same answers. store/pgstore runs it
// against a real PostgreSQL cluster, store/memstore in memory; the engine's simulation runs on
// memstore, so what it proves holds on PostgreSQL only as far as this suite holds on both.
//
// Each case starts from an empty database of its own (Harness.New), writes rows as a producer
// would (Insert, PutEndpoint, Backfill, RequestSince) and checks what the stores answer.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// DB is one empty database of an implementation: its stores and the producer's side.
type DB struct {
	// Pipeline returns the store of pipeline (or endpoint lane) name; with ownState its failed
	// and parked events are its own, not the rows' status.
	Pipeline  func(name string, ownState bool) store.Pipeline
	Backlog   func(pipeline string) store.Backlog
	Endpoints func(pipeline string) store.Endpoints
	Marks     store.Marks
	Log       store.DeliveryLog
	History   store.DeliveryHistory // reads Log back

	// Insert adds outbox rows, pending (their ids are UUIDs; CreatedAt is kept).
	Insert func(ms ...*envelope.Message)
	// Delete removes outbox rows.
	Delete func(ids ...string)
	// PutEndpoint adds endpoint id to the endpoints table (a valid row of the tenant).
	PutEndpoint func(id, tenant string)
	// Backfill records slot's backfill of ids, at positions 1, 2, ...
	Backfill func(slot string, ids ...string)
	// RequestSince records a replay --since request of st's selection and Total; returns its id.
	RequestSince func(st store.SinceState) int64
	// Flush waits until the marks and the delivery log written so far are stored.
	Flush func()
	// Deliveries reads the delivery log of event id.
	Deliveries func(id string) (delivered, failed []store.DeliveryAttempt)
}

// Harness makes a fresh DB for each case.
type Harness struct {
	New func(t *testing.T) DB
}

// Run runs every case over h.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		run  func(t *testing.T, db DB)
	}{
		{"Marks", testMarks},
		{"DeadLettersRowStatus", func(t *testing.T, db DB) { testDeadLetters(t, db, false) }},
		{"DeadLettersOwnState", func(t *testing.T, db DB) { testDeadLetters(t, db, true) }},
		{"Backfill", testBackfill},
		{"ReplaysSince", testReplaysSince},
		{"Backlog", testBacklog},
		{"BacklogReplay", testBacklogReplay},
		{"EndpointVersions", testEndpointVersions},
		{"EndpointParkedAndStatus", testEndpointParkedAndStatus},
		{"DeliveryLog", testDeliveryLog},
		{"DeliveryHistory", testDeliveryHistory},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h.New(t)) })
	}
}

var ctx = context.Background()

// base is the created_at of the rows the cases insert, at microseconds (PostgreSQL's precision).
var base = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// uuid returns the n-th test id.
func uuid(n int) string { return fmt.Sprintf("0193a5b2-7c4e-7d1a-9f00-%012d", n) }

// ev is event n of aggregate agg ("order" type), created n seconds after base.
func ev(n int, agg string) *envelope.Message {
	return &envelope.Message{ID: uuid(n), AggregateType: "order", AggregateID: agg, EventType: "order.created",
		Payload: []byte(fmt.Sprintf(`{"n": %d}`, n)), CreatedAt: base.Add(time.Duration(n) * time.Second), TenantID: "t1"}
}

func seq(lsn uint64, idx int) string { return envelope.Sequence(lsn, idx) }

func ids(ms []*envelope.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

func seqs(ms []*envelope.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.Sequence
	}
	return out
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func equal[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// The marks: a row marked done reads as delivered, no other, and "" is never one.
func testMarks(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "b"))
	db.Marks.Done(uuid(1), seq(0x10, 0), 2)
	db.Flush()
	got, err := db.Marks.Delivered(ctx, []string{uuid(1), uuid(2), "", uuid(99)})
	must(t, err)
	equal(t, "delivered", got, map[string]bool{uuid(1): true})
}

// Dead letters and parking, as the engine uses them: a dead letter parks its aggregate, the
// events behind it are parked, a replay reads them all back in stream order with their
// sequences, and an unpark forgets the aggregate. A write naming a row that does not exist
// fails (the engine retries it: a row handed over by logical decoding may not be visible yet).
func testDeadLetters(t *testing.T, db DB, own bool) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "a"), ev(4, "b"))
	p, other := db.Pipeline("lane/ep1", own), db.Pipeline("lane/ep2", own)
	parked, err := p.Parked(ctx)
	must(t, err)
	equal(t, "parked at first", len(parked), 0)
	a := store.Aggregate{Type: "order", ID: "a"}
	m1, m2, m3 := ev(1, "a"), ev(2, "a"), ev(3, "a")
	m1.Sequence, m2.Sequence, m3.Sequence = seq(0x10, 0), seq(0x10, 1), seq(0x20, 0)
	must(t, p.DeadLetter(ctx, m1, 3, "HTTP 500"))
	must(t, p.Park(ctx, []*envelope.Message{m3, m2}))
	must(t, p.Park(ctx, []*envelope.Message{m2})) // again: no change
	parked, err = p.Parked(ctx)
	must(t, err)
	equal(t, "parked", parked, []store.Aggregate{a})
	parked, err = other.Parked(ctx)
	must(t, err)
	equal(t, "another lane's parked", len(parked), 0)
	ms, err := p.Replayable(ctx, a, 0x99)
	must(t, err)
	equal(t, "replayable", ids(ms), []string{uuid(1), uuid(2), uuid(3)})
	equal(t, "replayable sequences", seqs(ms), []string{m1.Sequence, m2.Sequence, m3.Sequence})
	equal(t, "replayed payload", string(ms[0].Payload), string(ev(1, "a").Payload))
	equal(t, "replayed tenant", ms[0].TenantID, "t1")
	ms, err = p.Replayable(ctx, store.Aggregate{Type: "order", ID: "b"}, 0x99)
	must(t, err)
	equal(t, "replayable of an aggregate not parked", len(ms), 0)
	if err := p.DeadLetter(ctx, ev(98, "c"), 1, "x"); err == nil {
		t.Fatal("a dead letter of a row that does not exist succeeded")
	}
	if err := p.Park(ctx, []*envelope.Message{ev(97, "c")}); err == nil {
		t.Fatal("a park of a row that does not exist succeeded")
	}
	must(t, p.Abandoned(ctx, ev(4, "b"), 5, "disabled"))
	if err := p.Abandoned(ctx, ev(96, "c"), 1, "x"); err == nil {
		t.Fatal("an abandoned row that does not exist was recorded")
	}
	must(t, p.Unpark(ctx, a))
	parked, err = p.Parked(ctx)
	must(t, err)
	equal(t, "parked after unpark", len(parked), 0)
	ms, err = p.Replayable(ctx, a, 0x99)
	must(t, err)
	want := 3 // the rows' status stays failed and parked for the status owner
	if own {
		want = 0 // the lane's own record of them is done
	}
	equal(t, "replayable after unpark", len(ms), want)
}

// A backfill is read page by page in position order, each event's sequence at the backfill's
// LSN with its position as index; a row marked done meanwhile is skipped unless the pipeline
// keeps its own state; once done, nothing is left.
func testBackfill(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "b"), ev(4, "b"), ev(5, "c"))
	db.Backfill("slot1", uuid(1), uuid(2), uuid(3), uuid(4), uuid(5))
	db.Marks.Done(uuid(2), seq(0x10, 0), 0)
	db.Flush()
	for _, own := range []bool{false, true} {
		p := db.Pipeline("default", own)
		var got []string
		var after int64
		var lasts []int64
		for {
			ms, last, err := p.BackfillPage(ctx, "slot1", after, 2, 0)
			must(t, err)
			if len(ms) == 0 {
				equal(t, "last of an empty page", last, after)
				break
			}
			got = append(got, ids(ms)...)
			lasts = append(lasts, last)
			after = last
		}
		want, wantLasts := []string{uuid(1), uuid(3), uuid(4), uuid(5)}, []int64{3, 5}
		if own {
			want, wantLasts = []string{uuid(1), uuid(2), uuid(3), uuid(4), uuid(5)}, []int64{2, 4, 5}
		}
		equal(t, fmt.Sprintf("backfill (own state %v)", own), got, want)
		equal(t, "pages' last positions", lasts, wantLasts)
	}
	p := db.Pipeline("default", false)
	ms, _, err := p.BackfillPage(ctx, "slot1", 0, 1, 0)
	must(t, err)
	equal(t, "first backfill event's sequence", ms[0].Sequence, seq(0, 1))
	must(t, p.BackfillDone(ctx, "slot1"))
	ms, _, err = p.BackfillPage(ctx, "slot1", 0, 10, 0)
	must(t, err)
	equal(t, "backfill after done", len(ms), 0)
}

// A replay since a time selects the delivered, dead-lettered and parked rows of its range (and
// type filters), in stream order by their sequence, page by page from a cursor, and records its
// progress.
func testReplaysSince(t *testing.T, db DB) {
	rows := []*envelope.Message{ev(1, "a"), ev(2, "a"), ev(3, "b"), ev(4, "b"), ev(5, "c"), ev(6, "c")}
	rows[3].AggregateType = "invoice"
	db.Insert(rows...)
	// Delivered in stream order 1, 3, 2 (sequences), 4 of another type, 5 pending, 6 dead-lettered.
	db.Marks.Done(uuid(1), seq(0x10, 0), 0)
	db.Marks.Done(uuid(3), seq(0x10, 1), 0)
	db.Marks.Done(uuid(2), seq(0x20, 0), 1)
	db.Marks.Done(uuid(4), seq(0x30, 0), 0)
	db.Flush()
	m6 := ev(6, "c")
	m6.Sequence = seq(0x40, 0)
	must(t, db.Pipeline("default", false).DeadLetter(ctx, m6, 2, "HTTP 500"))

	since := base.Add(time.Second)
	id := db.RequestSince(store.SinceState{Pipeline: "default", Since: since, Until: base.Add(7 * time.Second),
		AggregateType: "order", Total: 4})
	p := db.Pipeline("default", false)
	st, err := p.SinceState(ctx, id)
	must(t, err)
	equal(t, "request", []any{st.ID, st.Pipeline, st.Since.Equal(since), st.AggregateType, st.Total, st.Sent, st.Done},
		[]any{id, "default", true, "order", int64(4), int64(0), false})
	var got, gotSeqs []string
	for {
		ms, next, err := p.SincePage(ctx, st, 2, 0x99)
		must(t, err)
		if len(ms) == 0 {
			equal(t, "cursor of an empty page", next, st.After)
			break
		}
		got, gotSeqs = append(got, ids(ms)...), append(gotSeqs, seqs(ms)...)
		equal(t, "cursor's id", next.ID, ms[len(ms)-1].ID)
		st.After, st.Sent = next, st.Sent+int64(len(ms))
		must(t, p.SinceProgress(ctx, st))
	}
	equal(t, "replayed", got, []string{uuid(1), uuid(3), uuid(2), uuid(6)})
	equal(t, "replayed sequences", gotSeqs, []string{seq(0x10, 0), seq(0x10, 1), seq(0x20, 0), seq(0x40, 0)})
	st.Done = true
	must(t, p.SinceProgress(ctx, st))
	back, err := p.SinceState(ctx, id)
	must(t, err)
	equal(t, "progress read back", []any{back.Sent, back.After, back.Done}, []any{int64(4), st.After, true})
	// a relay cut off from the slot records stale progress after another completed the request
	stale := st
	stale.Sent, stale.After, stale.Done = 2, store.SinceCursor{}, false
	must(t, p.SinceProgress(ctx, stale))
	back, err = p.SinceState(ctx, id)
	must(t, err)
	equal(t, "complete after a stale progress", []any{back.Sent, back.After, back.Done}, []any{int64(4), st.After, true})
	if _, err := p.SinceState(ctx, id+1000); err == nil {
		t.Fatal("a replay request that does not exist was read")
	}
}

func pos(lsn uint64, idx int) store.BacklogPos {
	return store.BacklogPos{LSN: pglogrepl.LSN(lsn), Idx: idx}
}

// An endpoint's backlog keeps the first entry of a position, reads back in stream order within
// its bounds with the events (nil for a row gone), trims and drops, and reports its size.
func testBacklog(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "b"), ev(4, "b"))
	b := db.Backlog("p")
	must(t, b.Spill(ctx, "ep1", []store.BacklogEntry{
		{Pos: pos(0x20, 0), EventID: uuid(3), Attempts: 1},
		{Pos: pos(0x10, 0), EventID: uuid(1), Mark: true},
		{Pos: pos(0x10, 1), EventID: uuid(2), Attempts: 2}}))
	must(t, b.Spill(ctx, "ep1", []store.BacklogEntry{{Pos: pos(0x10, 1), EventID: uuid(2), Attempts: 9},
		{Pos: pos(0x30, 0), EventID: uuid(4)}}))
	must(t, db.Backlog("q").Spill(ctx, "ep1", []store.BacklogEntry{{Pos: pos(0x10, 0), EventID: uuid(1)}}))
	max := pos(0xFFFF, 1<<30)
	page, err := b.Page(ctx, "ep1", store.BacklogPos{}, max, 3)
	must(t, err)
	entries := func(es []store.BacklogEvent) []store.BacklogEntry {
		out := make([]store.BacklogEntry, len(es))
		for i, e := range es {
			out[i] = e.BacklogEntry
		}
		return out
	}
	equal(t, "first page", entries(page), []store.BacklogEntry{{Pos: pos(0x10, 0), EventID: uuid(1), Mark: true},
		{Pos: pos(0x10, 1), EventID: uuid(2), Attempts: 2}, {Pos: pos(0x20, 0), EventID: uuid(3), Attempts: 1}})
	equal(t, "an entry's event", []any{page[0].Message.ID, page[0].Message.AggregateID, string(page[0].Message.Payload)},
		[]any{uuid(1), "a", string(ev(1, "a").Payload)})
	page, err = b.Page(ctx, "ep1", pos(0x10, 0), pos(0x20, 0), 10)
	must(t, err)
	equal(t, "a bounded page", len(page), 2)
	db.Delete(uuid(4))
	page, err = b.Page(ctx, "ep1", pos(0x20, 0), max, 10)
	must(t, err)
	equal(t, "the entry of a row gone", []any{len(page), page[0].EventID, page[0].Message == nil}, []any{1, uuid(4), true})
	sizes, err := b.Sizes(ctx)
	must(t, err)
	equal(t, "sizes", sizes, map[string]store.BacklogSize{"ep1": {Entries: 4, Last: pos(0x30, 0)}})
	n, err := b.Trim(ctx, "ep1", pos(0x10, 1))
	must(t, err)
	equal(t, "trimmed", n, int64(2))
	sizes, err = b.Sizes(ctx)
	must(t, err)
	equal(t, "sizes after a trim", sizes, map[string]store.BacklogSize{"ep1": {Entries: 2, Last: pos(0x30, 0)}})
	oldest, err := b.Oldest(ctx, []string{"ep1", "nobody"})
	must(t, err)
	equal(t, "the oldest after a trim: its first entry's event's created_at", fmt.Sprint(len(oldest), oldest["ep1"].Equal(ev(3, "b").CreatedAt)),
		"1 true")
	// A drop returns what it forgot, in order, for the caller to settle the rows.
	must(t, b.Spill(ctx, "ep1", []store.BacklogEntry{{Pos: pos(0x40, 0), EventID: uuid(2), Attempts: 3, Mark: true}}))
	dropped, err := b.Drop(ctx, "ep1")
	must(t, err)
	equal(t, "dropped", dropped, []store.BacklogEntry{{Pos: pos(0x20, 0), EventID: uuid(3), Attempts: 1},
		{Pos: pos(0x30, 0), EventID: uuid(4)}, {Pos: pos(0x40, 0), EventID: uuid(2), Attempts: 3, Mark: true}})
	dropped, err = b.Drop(ctx, "ep1")
	must(t, err)
	equal(t, "dropped again", len(dropped), 0)
	sizes, err = b.Sizes(ctx)
	must(t, err)
	equal(t, "sizes after a drop", len(sizes), 0)
	sizes, err = db.Backlog("q").Sizes(ctx)
	must(t, err)
	equal(t, "another pipeline's backlog", sizes, map[string]store.BacklogSize{"ep1": {Entries: 1, Last: pos(0x10, 0)}})
	// The oldest skips entries whose row is gone (they are skipped when read), and reads
	// only the endpoints asked for.
	must(t, db.Backlog("q").Spill(ctx, "ep2", []store.BacklogEntry{{Pos: pos(0x30, 0), EventID: uuid(4)}}))
	must(t, db.Backlog("q").Spill(ctx, "ep3", []store.BacklogEntry{{Pos: pos(0x30, 0), EventID: uuid(4)}, {Pos: pos(0x40, 0), EventID: uuid(2)}}))
	oldest, err = db.Backlog("q").Oldest(ctx, []string{"ep2", "ep3"})
	must(t, err)
	equal(t, "the oldest of backlogs with rows gone", fmt.Sprint(len(oldest), oldest["ep3"].Equal(ev(2, "a").CreatedAt)), "1 true")
	oldest, err = db.Backlog("q").Oldest(ctx, nil)
	must(t, err)
	equal(t, "the oldest of no endpoint", len(oldest), 0)
}

// A replay --since writes its rows into an endpoint's backlog at its request's commit, before
// that transaction's own events, with the request's progress in the same write; the entries read
// back in that order, each event with the sequence it was delivered with.
func testBacklogReplay(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "b"), ev(4, "b"))
	db.Marks.Done(uuid(1), seq(0x10, 0), 0)
	db.Flush()
	id := db.RequestSince(store.SinceState{Pipeline: "p/ep1", Since: base, Total: 2})
	p, b := db.Pipeline("p/ep1", true), db.Backlog("p").(store.ReplayBacklog)
	st, err := p.SinceState(ctx, id)
	must(t, err)
	must(t, b.Spill(ctx, "ep1", []store.BacklogEntry{{Pos: pos(0x40, 0), EventID: uuid(3)}, {Pos: pos(0x50, 0), EventID: uuid(4)}}))
	st.Sent, st.After = 2, store.SinceCursor{Sequence: seq(0x10, 0), Insert: 2, ID: uuid(2)}
	must(t, b.SpillReplay(ctx, "ep1", []store.BacklogEntry{{Pos: pos(0x50, store.ReplayIdx(0)), EventID: uuid(1)},
		{Pos: pos(0x50, store.ReplayIdx(1)), EventID: uuid(2)}}, st))
	page, err := b.Page(ctx, "ep1", store.BacklogPos{}, pos(0xFFFF, 1<<30), 10)
	must(t, err)
	var got []string
	for _, e := range page {
		got = append(got, fmt.Sprintf("%s %v %s", e.EventID, e.Pos.Replayed(), e.Message.Sequence))
	}
	equal(t, "entries", got, []string{uuid(3) + " false ", uuid(1) + " true " + seq(0x10, 0), uuid(2) + " true ",
		uuid(4) + " false "})
	back, err := p.SinceState(ctx, id)
	must(t, err)
	equal(t, "progress written with the entries", []any{back.Sent, back.After, back.Done}, []any{int64(2), st.After, false})
	// Read up to just before the request's transaction's own events: the replay's entries only.
	page, err = b.Page(ctx, "ep1", pos(0x40, 0), pos(0x50, -1), 10)
	must(t, err)
	equal(t, "the replay's entries", len(page), 2)
}

// versionIDs is each version as id@lsn, "-" for a removal.
func versionIDs(t *testing.T, vs []store.EndpointVersion) []string {
	var out []string
	for _, v := range vs {
		s := fmt.Sprintf("%s@%X", v.ID, uint64(v.LSN))
		if v.Row == nil {
			s += "-"
		} else {
			var r struct {
				ID string `json:"id"`
			}
			if err := json.Unmarshal(v.Row, &r); err != nil || r.ID != v.ID {
				t.Fatalf("version %s: row %s does not decode to its endpoint (%v)", s, v.Row, err)
			}
		}
		out = append(out, s)
	}
	return out
}

// The versions log: a bootstrap records the endpoints once, a version is kept as first
// recorded, the log reads in LSN then id order, and a prune keeps what a transaction after the
// confirmed position may be routed by.
func testEndpointVersions(t *testing.T, db DB) {
	e := db.Endpoints("p")
	_, boot, vs, err := e.Versions(ctx)
	must(t, err)
	equal(t, "bootstrapped before a bootstrap", []any{boot, len(vs)}, []any{false, 0})
	db.PutEndpoint("ep2", "t1")
	db.PutEndpoint("ep1", "")
	must(t, e.Bootstrap(ctx))
	db.PutEndpoint("ep3", "t2")
	must(t, e.Bootstrap(ctx)) // bootstrapped already: nothing
	marker, boot, vs, err := e.Versions(ctx)
	must(t, err)
	equal(t, "bootstrap", []any{marker, boot, versionIDs(t, vs)}, []any{pglogrepl.LSN(0), true, []string{"ep1@0", "ep2@0"}})
	row := func(id string) []byte { return []byte(`{"id": "` + id + `", "url": "https://example.com/` + id + `"}`) }
	must(t, e.Record(ctx, store.EndpointVersion{ID: "ep1", LSN: 0x100, Row: row("ep1")}))
	must(t, e.Record(ctx, store.EndpointVersion{ID: "ep1", LSN: 0x100})) // again: kept as first recorded
	must(t, e.Record(ctx, store.EndpointVersion{ID: "ep3", LSN: 0x150, Row: row("ep3")}))
	must(t, e.Record(ctx, store.EndpointVersion{ID: "ep2", LSN: 0x200}))
	if err := e.Record(ctx, store.EndpointVersion{ID: "", LSN: 0x300, Row: row("")}); err == nil {
		t.Fatal("a version without an endpoint id was recorded")
	}
	_, _, vs, err = e.Versions(ctx)
	must(t, err)
	equal(t, "versions", versionIDs(t, vs), []string{"ep1@0", "ep2@0", "ep1@100", "ep3@150", "ep2@200-"})
	_, boot, vs, err = db.Endpoints("other").Versions(ctx)
	must(t, err)
	equal(t, "another pipeline's versions", []any{boot, len(vs)}, []any{false, 0})
	must(t, e.Prune(ctx, 0x150))
	_, _, vs, err = e.Versions(ctx)
	must(t, err)
	equal(t, "versions pruned at 150", versionIDs(t, vs), []string{"ep2@0", "ep1@100", "ep3@150", "ep2@200-"})
	must(t, e.Prune(ctx, 0x250))
	_, boot, vs, err = e.Versions(ctx)
	must(t, err)
	equal(t, "versions pruned at 250", []any{boot, versionIDs(t, vs)}, []any{true, []string{"ep1@100", "ep3@150"}})
}

// The endpoints' parked aggregates are their lanes' (pipeline/<id>); the status keeps when a
// failing endpoint began failing, and forgets a removed one's.
func testEndpointParkedAndStatus(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "b"))
	m1, m2 := ev(1, "a"), ev(2, "b")
	m1.Sequence, m2.Sequence = seq(0x10, 0), seq(0x10, 1)
	must(t, db.Pipeline("p/ep1", true).DeadLetter(ctx, m1, 2, "HTTP 500"))
	must(t, db.Pipeline("q/ep1", true).DeadLetter(ctx, m2, 2, "HTTP 500"))
	must(t, db.Pipeline("p", true).DeadLetter(ctx, m2, 2, "HTTP 500"))
	parked, err := db.Endpoints("p").Parked(ctx)
	must(t, err)
	equal(t, "endpoints' parked", parked, map[string][]store.Aggregate{"ep1": {{Type: "order", ID: "a"}}})
	e := db.Endpoints("p")
	since := base.Add(-time.Hour)
	must(t, e.SaveStatus(ctx, []store.EndpointStatus{{ID: "ep1", FailuresInRow: 3, FailingSince: since, LastError: "HTTP 500",
		LastErrorAt: base}, {ID: "ep2", LastSuccess: base}, {ID: ""}}))
	failing, err := e.FailingSince(ctx)
	must(t, err)
	if len(failing) != 1 || !failing["ep1"].Equal(since) {
		t.Fatalf("failing since = %v, want ep1 at %v", failing, since)
	}
	must(t, e.ForgetStatus(ctx, "ep1"))
	failing, err = e.FailingSince(ctx)
	must(t, err)
	equal(t, "failing since after forget", len(failing), 0)
}

// The delivery log keeps each delivery and failed attempt of an event, per endpoint.
func testDeliveryLog(t *testing.T, db DB) {
	db.Insert(ev(1, "a"))
	at := base.Add(time.Minute)
	db.Log.Failed(store.DeliveryAttempt{Pipeline: "p", Endpoint: "ep1", EventID: uuid(1), Attempt: 1, At: at, Status: 500,
		Latency: 3 * time.Millisecond, Error: "HTTP 500: boom"})
	db.Log.Delivered(store.DeliveryAttempt{Pipeline: "p", Endpoint: "ep1", EventID: uuid(1), Attempt: 2, At: at.Add(time.Second),
		Status: 200, Latency: 2 * time.Millisecond})
	db.Log.Delivered(store.DeliveryAttempt{Pipeline: "p", Endpoint: "ep2", EventID: uuid(1), Attempt: 1, At: at, Status: 204,
		Latency: time.Millisecond})
	db.Flush()
	delivered, failed := db.Deliveries(uuid(1))
	// A delivery keeps its attempt, time and latency (its status is a 2xx: not recorded); a
	// failed attempt its status and error too.
	key := func(as []store.DeliveryAttempt, full bool) []string {
		var out []string
		for _, a := range as {
			k := fmt.Sprintf("%s/%s #%d at+%s in %s", a.Pipeline, a.Endpoint, a.Attempt, a.At.Sub(at), a.Latency)
			if full {
				k += fmt.Sprintf(" %d %s", a.Status, a.Error)
			}
			out = append(out, k)
		}
		slices.Sort(out)
		return out
	}
	equal(t, "deliveries", key(delivered, false), []string{"p/ep1 #2 at+1s in 2ms", "p/ep2 #1 at+0s in 1ms"})
	equal(t, "failed attempts", key(failed, true), []string{"p/ep1 #1 at+0s in 3ms 500 HTTP 500: boom"})
}

// The delivery log says which endpoints of a pipeline have an event: what a relay that takes
// over reads so as not to send those again. Failed attempts are not deliveries; another
// pipeline's deliveries are not this one's; an id never delivered (or empty) is absent.
func testDeliveryHistory(t *testing.T, db DB) {
	db.Insert(ev(1, "a"), ev(2, "a"), ev(3, "b"))
	at := base.Add(time.Minute)
	deliver := func(pipeline, endpoint string, n int) {
		db.Log.Delivered(store.DeliveryAttempt{Pipeline: pipeline, Endpoint: endpoint, EventID: uuid(n), Attempt: 1, At: at,
			Status: 200, Latency: time.Millisecond})
	}
	deliver("p", "ep2", 1)
	deliver("p", "ep1", 1)
	deliver("p", "ep1", 1) // delivered twice: one endpoint still
	deliver("p", "ep1", 2)
	deliver("other", "ep3", 2)
	deliver("p", "", 3) // a pipeline's one destination
	db.Log.Failed(store.DeliveryAttempt{Pipeline: "p", Endpoint: "ep2", EventID: uuid(2), Attempt: 1, At: at, Status: 500,
		Error: "HTTP 500"})
	db.Flush()
	got, err := db.History.DeliveredTo(ctx, "p", []string{uuid(1), uuid(2), uuid(3), uuid(4), ""})
	must(t, err)
	equal(t, "delivered to", got, map[string][]string{uuid(1): {"ep1", "ep2"}, uuid(2): {"ep1"}, uuid(3): {""}})
	got, err = db.History.DeliveredTo(ctx, "other", []string{uuid(1), uuid(2)})
	must(t, err)
	equal(t, "another pipeline's", got, map[string][]string{uuid(2): {"ep3"}})
	got, err = db.History.DeliveredTo(ctx, "p", []string{uuid(1), uuid(2), uuid(3)}, "ep2", "")
	must(t, err)
	equal(t, "to some endpoints", got, map[string][]string{uuid(1): {"ep2"}, uuid(3): {""}})
	got, err = db.History.DeliveredTo(ctx, "p", nil)
	must(t, err)
	equal(t, "no ids", got, map[string][]string{})
}
