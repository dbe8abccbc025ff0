package publisher

import (
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/health"
	"github.com/outbox-relay/outbox-relay/internal/settings"
	"github.com/outbox-relay/outbox-relay/store"
)

// lane is one destination's share of the engine: a pipeline's one destination, or one partner
// endpoint. Everything per destination lives here once: the keyed queues that keep the order
// per aggregate, the batches, the in-flight cap, the rate limit, the health (the circuit
// breaker), the pause, the parked aggregates and the backlog off the WAL.
//
// Order per aggregate: events are queued by key in the order they are added (stream order), and
// only a key's head may be attempted; it stays the head until it is delivered (or dead-lettered
// and parked), so the next event of the aggregate waits. Each key is in at most one batch at a
// time, and a batch holds a prefix of each of its keys.
type lane struct {
	e    *engine
	id   string // the endpoint's id; "" for a pipeline's one destination
	name string // the pipeline's name, or "<pipeline>/<endpoint id>"

	keys      map[cdc.Aggregate]*fifo
	ready     fifo     // heads that may start, one per key at most
	formed    []*batch // batches that may start again (retries, halves of a split)
	parked    map[cdc.Aggregate]bool
	replaying map[cdc.Aggregate]int // replayed events not yet delivered, per key
	replays   uint64                // counts the times the replays under way were given up (abortReplays)
	touched   []cdc.Aggregate       // done's scratch: the keys a finished batch touched
	parkOps   int                   // dead letters and parks being written (a replay waits for them)
	// replayReads counts the replays of parked aggregates reading what is parked; parks wait
	// meanwhile in deferred (parkNow).
	replayReads int
	deferred    []deferredPark
	queued      int // events held: queued, in flight, waiting for a retry

	busy        int // attempts under way
	maxInFlight int
	limit       *windowLimiter // nil: no rate limit
	limitUntil  time.Time      // the rate limit lets nothing start before
	batching    Batch
	readySince  time.Time // when ready got its oldest head (a batch lingers from then)
	wakeAt      time.Time // a timer wakes the lane then (zero: none)
	retryGen    uint64    // bumped when the queues are taken apart: a retry timer set before is stale
	inRunq      bool

	health  health.Tracker
	breaker bool // the breaker holds attempts back while open (else it is only reported)
	outage  int  // the record of its endpoint's outage (outageNone, ...: health.go)
	paused  bool // held back: the pipeline, the endpoint, or a 410 being recorded
	gone    bool // answered 410 Gone: held until its disable (or the pipeline's pause) is recorded and applied

	dest    destination.Destination // decorated with metrics and the delivery log
	partial bool                    // dest is a PartialBatchDestination: one event per key in a batch
	store   store.Pipeline          // dead letters, parked aggregates, replays; nil: none
	active  bool                    // started: false while an endpoint is disabled, and after removal
	removed bool                    // its endpoint was removed: it owes nothing any more
	gen     uint64                  // counts starts; a backlog page read for an earlier start is dropped

	// An endpoint's row and what follows it (endpoints.go).
	row       endpoint.Row
	raw       []byte // the row's JSON, for a rebuild at rebuildAt; nil when none is due
	applied   int64  // the LSN of the version row is
	release   func()
	rebuildAt time.Time
	started   time.Time

	bl     laneBacklog // backlog.go
	status laneStatus  // what was last saved of its status
}

func newLane(e *engine, id, name string) *lane {
	l := &lane{e: e, id: id, name: name, keys: map[cdc.Aggregate]*fifo{}, parked: map[cdc.Aggregate]bool{},
		replaying: map[cdc.Aggregate]int{}, maxInFlight: 1, breaker: true}
	l.batching.defaults()
	return l
}

// Batch configures batched delivery: one request carries several events (as a CloudEvents
// batch, see destination.BatchDestination).
//
// Order is kept as without batching: an aggregate's events inside a batch are contiguous and in
// commit order (for a PartialBatchDestination, a batch holds at most one event per aggregate),
// an aggregate is in at most one batch in flight, and its next events wait for that batch's
// 2xx. A batch is all-or-nothing: any other answer retries the same batch (the
// same events) with the usual backoff, until it has failed narrowAfter times in a row; then it
// is split in halves, and so on, until a failing event stands alone. Only a lone event is
// dead-lettered (after MaxAttempts), so a poison event parks only its own aggregate.
type Batch struct {
	// MaxEvents is the most events in one request. 0 or 1: one event per request, no batching.
	MaxEvents int
	// MaxBytes bounds the summed payload sizes of a batch; an event larger than it travels
	// alone. If zero, 1 MiB.
	MaxBytes int
	// Linger is how long a batch that is not full waits for more ready events before it is
	// sent. If zero, 5ms (settings.BatchLinger, as --batch-linger and batch.linger); if
	// negative (NoLinger), it is sent with whatever is ready at once (--batch-linger 0).
	Linger time.Duration
}

// Enabled reports whether requests carry more than one event.
func (b Batch) Enabled() bool { return b.MaxEvents > 1 }

func (b *Batch) defaults() {
	if b.MaxBytes <= 0 {
		b.MaxBytes = settings.BatchMaxBytes
	}
	if b.Linger == 0 {
		b.Linger = settings.BatchLinger
	}
}

// NoLinger is a Batch.Linger that sends a batch that is not full at once.
const NoLinger time.Duration = -1

// add queues it behind the earlier events of its key. It returns false, queuing nothing, when
// the key is parked.
func (l *lane) add(it *item) bool {
	k := it.key()
	if l.parked[k] {
		return false
	}
	l.enqueue(k, it)
	return true
}

func (l *lane) enqueue(k cdc.Aggregate, it *item) {
	q := l.keys[k]
	if q == nil {
		q = &fifo{}
		l.keys[k] = q
	}
	q.push(it)
	l.queued++
	if q.len() == 1 {
		l.pushReady(it)
	} else {
		l.e.wake(l) // it may fill a lingering batch
	}
}

func (l *lane) pushReady(it *item) {
	if l.ready.len() == 0 {
		l.readySince = l.e.now
	}
	l.ready.push(it)
	l.e.wake(l)
}

func (l *lane) pushFormed(b *batch) {
	l.formed = append(l.formed, b)
	l.e.wake(l)
}

// startable reports whether take may return an attempt now, or may after a wait it arms itself.
func (l *lane) startable() bool {
	return l.active && !l.paused && (l.ready.len() > 0 || len(l.formed) > 0) && l.busy < l.maxInFlight
}

// take returns the next attempt the lane may start now, or nil: nothing ready, at its cap,
// paused, its breaker waiting for the next probe, its rate limit, or a batch lingering for
// more events (the last three arm a timer that wakes the lane). It counts against the cap until
// the attempt has finished.
func (l *lane) take() *batch {
	now := l.e.now
	if !l.startable() {
		return nil
	}
	if now.Before(l.limitUntil) {
		l.wakeLater(l.limitUntil)
		return nil
	}
	if ok, wake := l.health.Startable(now, l.busy); !ok && l.breaker {
		l.wakeLater(wake)
		return nil
	}
	if len(l.formed) == 0 && l.lingers() {
		return nil
	}
	if l.limit != nil {
		if wait := l.limit.try(now); wait > 0 {
			l.limitUntil = now.Add(wait)
			l.wakeLater(l.limitUntil)
			return nil
		}
	}
	var b *batch
	switch {
	case len(l.formed) > 0:
		b = l.formed[0]
		l.formed[0] = nil
		l.formed = l.formed[1:]
	case l.batching.Enabled():
		b = l.gather()
		l.readySince = now // the heads left wait a linger of their own
	default:
		b = &batch{items: []*item{l.ready.pop()}}
	}
	l.busy++
	l.health.Started()
	return b
}

// wakeLater arms the lane's timer for at, unless it is armed for earlier; a zero at arms
// nothing.
func (l *lane) wakeLater(at time.Time) {
	if at.IsZero() || !l.wakeAt.IsZero() && !at.Before(l.wakeAt) {
		return
	}
	l.wakeAt = at
	l.e.after(at, func() {
		if l.wakeAt.Equal(at) {
			l.wakeAt = time.Time{}
		}
		l.e.wake(l)
	})
}

// lingers reports whether a new batch should wait for more ready events, and if so arms the
// timer that ends the wait. The events claimable now are the ready heads and, unless the
// destination acknowledges each event on its own, the events queued behind them.
func (l *lane) lingers() bool {
	b := l.batching
	if !b.Enabled() || b.Linger <= 0 {
		return false
	}
	count, size := 0, 0
	for i := 0; i < l.ready.len() && count < b.MaxEvents && size < b.MaxBytes; i++ {
		h := l.ready.at(i)
		count, size = count+l.claim(h), size+len(h.m.Payload)
	}
	if count >= b.MaxEvents || size >= b.MaxBytes {
		return false
	}
	end := l.readySince.Add(b.Linger)
	if !l.e.now.Before(end) {
		return false
	}
	l.wakeLater(end)
	return true
}

// claim is how many events the head h may bring into a batch: its key's queued events, or
// only itself for a destination that acknowledges each on its own.
func (l *lane) claim(h *item) int {
	if l.partial {
		return 1
	}
	return l.keys[h.key()].len()
}

// gather forms a batch of the ready heads, then the events behind each, key by key, while
// they fit.
func (l *lane) gather() *batch {
	cfg := l.batching
	b := &batch{}
	var heads []*item
	count, size := 0, 0
	for l.ready.len() > 0 && count < cfg.MaxEvents && size < cfg.MaxBytes {
		h := l.ready.peek()
		if len(heads) > 0 && size+len(h.m.Payload) > cfg.MaxBytes {
			break
		}
		l.ready.pop()
		heads = append(heads, h)
		count, size = count+1, size+len(h.m.Payload)
	}
	for _, h := range heads {
		b.items = append(b.items, h)
		if l.partial {
			continue
		}
		q := l.keys[h.key()]
		for i := 1; i < q.len() && count < cfg.MaxEvents; i++ {
			it := q.at(i)
			if size+len(it.m.Payload) > cfg.MaxBytes {
				break
			}
			b.items = append(b.items, it)
			count, size = count+1, size+len(it.m.Payload)
		}
	}
	return b
}

// finished frees the slot of an attempt whose outcome was observed; after a probe that failed
// it arms the timer of the next one.
func (l *lane) finished(b *batch) {
	l.busy--
	for _, it := range b.items {
		it.inflight = false
	}
	if next := l.health.Released(l.e.now); l.breaker {
		l.wakeLater(next)
	}
	l.e.wake(l)
}

// done removes delivered (or given up) events from their keys and makes what follows ready: the
// rest of a split key, or else each key's next event. It returns the keys whose replay it
// completed.
func (l *lane) done(b *batch) (replayed []cdc.Aggregate) {
	touched := l.touched[:0] // (reused: done runs once per delivery)
	for _, it := range b.items {
		k := it.key()
		if it.kind == kindReplay && it.replays == l.replays {
			if l.replaying[k]--; l.replaying[k] == 0 {
				delete(l.replaying, k)
				replayed = append(replayed, k)
			}
		}
		if q := l.keys[k]; q != nil && q.len() > 0 && q.peek() == it {
			q.pop()
			l.queued--
		}
		if len(touched) == 0 || touched[len(touched)-1] != k {
			touched = append(touched, k)
		}
	}
	l.touched = touched
	if b.after != nil && b.afterGen == l.retryGen {
		l.pushFormed(b.after)
		return replayed
	}
	for _, k := range touched {
		q := l.keys[k]
		switch {
		case q == nil:
		case q.len() == 0:
			delete(l.keys, k)
		default:
			l.pushReady(q.peek())
		}
	}
	return replayed
}

// park parks the key of a head that failed for good, and returns the events queued behind it.
func (l *lane) park(it *item) []*item {
	k := it.key()
	if !l.parked[k] {
		l.e.m.ParkedAggregates.Inc()
	}
	l.parked[k] = true
	delete(l.replaying, k)
	q := l.keys[k]
	delete(l.keys, k)
	var behind []*item
	for q != nil && q.len() > 0 {
		if next := q.pop(); next != it {
			behind = append(behind, next)
		}
		l.queued--
	}
	return behind
}

// unpark queues a parked key's replayed events, in order, ahead of anything that arrives later.
func (l *lane) unpark(k cdc.Aggregate, its []*item) {
	if l.parked[k] {
		l.e.m.ParkedAggregates.Dec()
	}
	delete(l.parked, k)
	for _, it := range its {
		it.replays = l.replays
		l.enqueue(k, it)
	}
	if len(its) > 0 {
		l.replaying[k] += len(its)
	}
}

// takeOut takes out of the queues every event that is not in flight and that keep does not keep,
// in stream order, and readies the heads left that are not in flight. The batches formed or
// waiting for a retry are taken apart: their kept events are plain queued events again.
func (l *lane) takeOut(keep func(*item) bool) []*item {
	l.retryGen++ // the retries waiting for their timer are taken apart too
	l.formed = nil
	l.ready = fifo{}
	var out []*item
	for _, k := range l.sortedKeys() {
		q := l.keys[k]
		kept := &fifo{}
		for q.len() > 0 {
			if it := q.pop(); it.inflight || keep(it) {
				kept.push(it)
			} else {
				out = append(out, it)
				l.queued--
			}
		}
		if kept.len() == 0 {
			delete(l.keys, k)
			continue
		}
		l.keys[k] = kept
		if !kept.peek().inflight {
			l.pushReady(kept.peek())
		}
	}
	sortItems(out)
	return out
}

// sortedKeys returns the lane's keys in a fixed order, so that what iterates them is
// deterministic.
func (l *lane) sortedKeys() []cdc.Aggregate {
	ks := make([]cdc.Aggregate, 0, len(l.keys))
	for k := range l.keys {
		ks = append(ks, k)
	}
	slices.SortFunc(ks, func(a, b cdc.Aggregate) int {
		if a.Type != b.Type {
			return cmpString(a.Type, b.Type)
		}
		return cmpString(a.ID, b.ID)
	})
	return ks
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// sortItems sorts items in stream order (their position, then the order they were made in).
func sortItems(its []*item) {
	slices.SortStableFunc(its, func(a, b *item) int {
		pa, pb := position(a.m, a.tx), position(b.m, b.tx)
		switch {
		case pa.Less(pb):
			return -1
		case pb.Less(pa):
			return 1
		case a.seq < b.seq:
			return -1
		case a.seq > b.seq:
			return 1
		}
		return 0
	})
}

// undelivered returns how many events the lane owes: those it holds (queued, in flight, waiting
// for a retry), those spilled and not written yet, and the entries of its backlog it has not
// read; and when the oldest of them was committed (zero when none is known). The backlog's
// oldest is what the store said at the last status save (refreshOldest), or its first write.
func (l *lane) undelivered() (n int, oldest time.Time) {
	earlier := func(t time.Time) {
		if !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	for _, q := range l.keys {
		earlier(q.peek().since())
	}
	b := &l.bl
	for _, its := range [][]*item{b.buf, b.writing} {
		for _, it := range its {
			earlier(it.since())
		}
	}
	unread := b.entries
	for _, pg := range b.pages {
		unread -= int64(pg.n)
	}
	if b.entries > 0 {
		earlier(b.oldest)
	}
	return l.queued + len(b.buf) + len(b.writing) + int(max(unread, 0)), oldest
}

// hasBacklog reports whether the lane spills, or its backlog holds entries (a paused endpoint
// that read its whole backlog and rejoined the stream still owes them).
func (l *lane) hasBacklog() bool {
	b := &l.bl
	return b.on || b.entries > 0 || len(b.buf) > 0 || len(b.writing) > 0
}
