// Package memstore keeps the delivery engine's stores (package store) in memory: the twin of
// store/pgstore, for the engine's tests and its deterministic simulation. store/storetest runs
// the same conformance suite over both, so that the two give the same answers.
//
// A DB is the database: the outbox rows a producer writes (Insert), the endpoints table
// (PutEndpoint), a slot's backfill list (Backfill) and the replay requests (RequestSince) on one
// side, the relay's own state on the other, which the views it returns (Pipeline, Backlog,
// Endpoints, Marks, DeliveryLog, DeliveryHistory) read and write. Everything is guarded by one
// mutex, so a DB may be shared by goroutines; a write is durable as soon as it returns, as a
// committed one is.
package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// DB is an in-memory database of the outbox rows and the relay's state. The zero value is not
// ready: use New.
type DB struct {
	mu          sync.Mutex
	now         func() time.Time
	rows        map[string]*row
	inserted    int64
	endpoints   map[string][]byte
	backfills   map[string][]backfillRow
	parked      map[string]map[store.Aggregate]parkedRow
	pipeEvents  map[string]map[string]*pipeEvent
	replays     map[int64]*store.SinceState
	replayIDs   int64
	versions    map[string]*versionLog
	status      map[string]map[string]store.EndpointStatus
	backlogs    map[string]map[string][]store.BacklogEntry
	delivered   []store.DeliveryAttempt
	deliveredBy map[string][]int // indexes of delivered, by event id
	failed      []store.DeliveryAttempt
}

// row is one outbox_events row and the relay's status columns of it.
type row struct {
	m       envelope.Message // Sequence unused: seq is the column
	insert  int64
	status  string // pending, done, failed, parked
	retries int
	lastErr string
	seq     string
}

type backfillRow struct {
	pos int64
	id  string
}

type parkedRow struct {
	firstID, reason string
	at              int64
}

type pipeEvent struct {
	status, lastErr, seq string
	retries              int
}

type versionLog struct {
	markers []store.EndpointVersion // LSN only
	vs      []store.EndpointVersion
}

// New returns an empty DB whose clock is now (nil: time.Now).
func New(now func() time.Time) *DB {
	if now == nil {
		now = time.Now
	}
	return &DB{now: now, rows: map[string]*row{}, endpoints: map[string][]byte{}, backfills: map[string][]backfillRow{},
		parked: map[string]map[store.Aggregate]parkedRow{}, pipeEvents: map[string]map[string]*pipeEvent{},
		replays: map[int64]*store.SinceState{}, versions: map[string]*versionLog{},
		status: map[string]map[string]store.EndpointStatus{}, backlogs: map[string]map[string][]store.BacklogEntry{}}
}

// Insert adds outbox rows, pending, in this order (their insertion order). A row's CreatedAt is
// kept; zero: the clock's now.
func (db *DB) Insert(ms ...*envelope.Message) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, m := range ms {
		db.inserted++
		r := &row{m: *m, insert: db.inserted, status: "pending"}
		r.m.Sequence = ""
		if r.m.CreatedAt.IsZero() {
			r.m.CreatedAt = db.now()
		}
		db.rows[m.ID] = r
	}
}

// Delete removes outbox rows (a prune, or a row deleted by hand).
func (db *DB) Delete(ids ...string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, id := range ids {
		delete(db.rows, id)
	}
}

// Status returns row id's status ("" when there is no such row).
func (db *DB) Status(id string) string {
	db.mu.Lock()
	defer db.mu.Unlock()
	if r := db.rows[id]; r != nil {
		return r.status
	}
	return ""
}

// PutEndpoint sets endpoint id's row (to_jsonb) in the endpoints table; DeleteEndpoint removes
// it. Bootstrap reads the table.
func (db *DB) PutEndpoint(id string, row []byte) {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.endpoints[id] = slices.Clone(row)
}

// DeleteEndpoint removes endpoint id from the endpoints table.
func (db *DB) DeleteEndpoint(id string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	delete(db.endpoints, id)
}

// Backfill records slot's backfill: the rows ids, at positions 1, 2, ... in this order.
func (db *DB) Backfill(slot string, ids ...string) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for i, id := range ids {
		db.backfills[slot] = append(db.backfills[slot], backfillRow{pos: int64(i + 1), id: id})
	}
}

// RequestSince records a replay --since request (its selection and Total; the rest is
// ignored) and returns its id.
func (db *DB) RequestSince(st store.SinceState) int64 {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.replayIDs++
	st.ID, st.Sent, st.After, st.Done = db.replayIDs, 0, store.SinceCursor{}, false
	db.replays[st.ID] = &st
	return st.ID
}

// Deliveries returns the delivery log's entries of event id: deliveries and failed attempts.
func (db *DB) Deliveries(id string) (delivered, failed []store.DeliveryAttempt) {
	db.mu.Lock()
	defer db.mu.Unlock()
	for _, a := range db.delivered {
		if a.EventID == id {
			delivered = append(delivered, a)
		}
	}
	for _, a := range db.failed {
		if a.EventID == id {
			failed = append(failed, a)
		}
	}
	return delivered, failed
}

// errNotVisible is what a write naming a row that does not exist returns, as pgstore does for a
// row not visible yet: the engine retries it.
var errNotVisible = store.ErrNotVisible

// message returns row r's message with sequence seq.
func (r *row) message(seq string) *envelope.Message {
	m := r.m
	m.Sequence = seq
	return &m
}

// Marks returns the status marks of the DB's rows. They are written at once: Flushed is always
// true.
func (db *DB) Marks() store.Marks { return marks{db} }

type marks struct{ db *DB }

func (k marks) Done(id, seq string, retries int) {
	k.db.mu.Lock()
	defer k.db.mu.Unlock()
	if r := k.db.rows[id]; r != nil {
		r.status, r.retries, r.seq = "done", retries, seq
	}
}

func (k marks) Flushed() bool { return true }

func (k marks) Delivered(_ context.Context, ids []string) (map[string]bool, error) {
	k.db.mu.Lock()
	defer k.db.mu.Unlock()
	out := map[string]bool{}
	for _, id := range ids {
		if r := k.db.rows[id]; r != nil && r.status == "done" {
			out[id] = true
		}
	}
	return out, nil
}

// DeliveryLog returns the delivery log; Deliveries reads it.
func (db *DB) DeliveryLog() store.DeliveryLog { return deliveryLog{db} }

type deliveryLog struct{ db *DB }

func (l deliveryLog) Failed(a store.DeliveryAttempt) {
	l.db.mu.Lock()
	defer l.db.mu.Unlock()
	l.db.failed = append(l.db.failed, a)
}

func (l deliveryLog) Delivered(a store.DeliveryAttempt) {
	l.db.mu.Lock()
	defer l.db.mu.Unlock()
	if l.db.deliveredBy == nil {
		l.db.deliveredBy = map[string][]int{}
	}
	l.db.deliveredBy[a.EventID] = append(l.db.deliveredBy[a.EventID], len(l.db.delivered))
	l.db.delivered = append(l.db.delivered, a)
}

// DeliveryHistory returns the delivery log read back (store.DeliveryHistory).
func (db *DB) DeliveryHistory() store.DeliveryHistory { return deliveryLog{db} }

func (l deliveryLog) DeliveredTo(_ context.Context, pipeline string, ids []string, endpoints ...string) (map[string][]string, error) {
	l.db.mu.Lock()
	defer l.db.mu.Unlock()
	want := map[string]bool{}
	for _, id := range ids {
		if id != "" {
			want[id] = true
		}
	}
	out := map[string][]string{}
	for id := range want {
		for _, i := range l.db.deliveredBy[id] {
			a := l.db.delivered[i]
			if a.Pipeline == pipeline && !slices.Contains(out[a.EventID], a.Endpoint) &&
				(len(endpoints) == 0 || slices.Contains(endpoints, a.Endpoint)) {
				out[a.EventID] = append(out[a.EventID], a.Endpoint)
			}
		}
	}
	for _, eps := range out {
		slices.Sort(eps)
	}
	return out, nil
}

// compareCursor orders replay positions as pgstore does: sequence (bytewise), insertion, id.
func compareCursor(a, b store.SinceCursor) int {
	return cmp.Or(cmp.Compare(a.Sequence, b.Sequence), cmp.Compare(a.Insert, b.Insert), cmp.Compare(a.ID, b.ID))
}

// beforeAny is the cursor before the first row.
var beforeAny = store.SinceCursor{Insert: -1, ID: "00000000-0000-0000-0000-000000000000"}

func errNoReplay(id int64) error {
	return fmt.Errorf("no such replay request: outbox_replays has no row %d", id)
}
