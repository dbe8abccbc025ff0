package publisher

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/rs/zerolog"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/health"
	"github.com/outbox-relay/outbox-relay/store"
)

// engine is the delivery engine's deterministic core: every decision (routing, the queues of
// each lane, batches, retries, the rate limit and the in-flight caps, the circuit breaker,
// dead letters and parking, pause, replays, backfill, the backlog off the WAL and its rejoin,
// the endpoint versions, what settles and what is marked) is made here, by one owner at a
// time, from inputs that are method calls:
//
//   - offer: a transaction arrived from the stream;
//   - finished: an attempt returned with a destination.Result;
//   - opDone: a store operation returned;
//   - tick: the clock reached a timer;
//   - setPause, stop: the operator's pause and resume, the end of the run.
//
// It does no I/O and starts no goroutines. What it decides that takes I/O comes out as effects
// (effect: start this attempt, run this store operation), taken by its owner with drain; the
// time is what the owner says it is (now, set by every input); the jitter of retries comes from
// the owner's rand. In production the owner is the driver (driver.go): a mutex, a pool of workers
// that make the attempts, a few goroutines that run the store operations, a timer. In the
// simulation (sim_test.go) it is a seeded event queue with a fake clock, which runs attempts and
// operations in random orders with random faults and replays any run exactly from its seed.
//
// Acknowledgements to the tracker (Acker), the status marks (Marks.Done, which queue) and
// metrics are plain calls: they are in memory and do not block.
type engine struct {
	cfg   engineConfig
	now   time.Time
	rand  func() float64
	log   zerolog.Logger
	m     *publisherMetrics
	acker Acker
	marks Marks

	lanes  []*lane // sorted by id: what iterates them is deterministic
	byID   map[string]*lane
	single *lane          // the one lane of a one-destination pipeline; nil with endpoints
	routed []*lane        // routeTo's result, reused
	ep     *endpointState // the endpoints' versions and routing; nil for one destination

	in       intake // intake.go
	runq     []*lane
	busy     int // attempts under way, all lanes
	stopping bool

	timers  timers
	seq     uint64
	earlier bool // a timer earlier than the earliest before was armed (the driver re-arms its own)
	opID    uint64
	out     []effect

	fan          map[*envelope.Message]*fanCount // events routed to more than one lane
	paused       bool
	pauseReason  string
	backfillLeft int       // backfill events of the current page not settled
	sinceLeft    int       // replayed events of the current replay --since page not settled
	marksWait    time.Time // since when a replay --since waits for the marks
	polling      bool      // a timer looks again at the marks then
	spillChecked time.Time // when the lanes were last checked for a spill
	pruned       time.Time // when the versions log was last pruned
	tm           *transitionMetrics
	laterMarks   []laterMark // rows to mark done once the slot confirmed past them
	fair         fairShare   // fair.go
}

// fanCount counts the deliveries of an event routed to several lanes. released counts the
// lanes that gave it up for good (release): their endpoint was removed, and owes it no more.
type fanCount struct {
	routes, settled, delivered, released int
	retries                              int
}

// effect is what the engine decided that its owner carries out: one of attempt and op is set.
type effect struct {
	attempt *attempt
	op      *op
}

// attempt is one attempt to start: a batch (often of one) to a lane's destination.
type attempt struct {
	lane    *lane
	b       *batch
	ms      []*envelope.Message
	n       int  // its attempt number (the batch's most tried event's)
	batched bool // send with SendBatch
	gen     uint64
	dest    destination.Destination
}

// Send makes the attempt.
func (a *attempt) Send(ctx context.Context) destination.Result {
	if !a.batched {
		return a.dest.Send(ctx, a.ms[0], a.n)
	}
	if bd, ok := a.dest.(destination.BatchDestination); ok {
		return bd.SendBatch(ctx, a.ms, a.n)
	}
	return destination.Result{Err: errBatchNotSupported, Label: destination.ResultNetwork}
}

// errBatchNotSupported is what an attempt of a batch gets from a destination that sends one
// event per request.
var errBatchNotSupported = errors.New("the destination sends one event per request: its batch_max_events must be 1")

// op is a store operation: run does the I/O (it reads only what it captured), then is called
// by the owner with its result. A durable op is retried by the owner until it succeeds, or the
// engine stops (then is then not called: what it would have settled stays unconfirmed); another
// is tried once and then gets its error.
type op struct {
	id      uint64
	what    string
	durable bool
	run     func(ctx context.Context) (any, error)
	then    func(v any, err error)
}

// tracef records a decision in the simulation's trace.
func (e *engine) tracef(format string, args ...any) {
	if e.cfg.trace != nil {
		e.cfg.trace(format, args...)
	}
}

// drain returns the effects decided since the last drain.
func (e *engine) drain() []effect {
	out := e.out
	e.out = nil
	return out
}

// do queues a store operation.
func (e *engine) do(what string, durable bool, run func(context.Context) (any, error), then func(any, error)) {
	e.opID++
	e.out = append(e.out, effect{op: &op{id: e.opID, what: what, durable: durable, run: run, then: then}})
}

// durably queues a durable store write whose result is only that it is done.
func (e *engine) durably(what string, run func(context.Context) error, then func()) {
	e.do(what, true, func(ctx context.Context) (any, error) { return nil, run(ctx) }, func(any, error) {
		if then != nil {
			then()
		}
	})
}

// bestEffort queues a store write tried once; a failure is logged.
func (e *engine) bestEffort(what string, run func(context.Context) error) {
	e.do(what, false, func(ctx context.Context) (any, error) { return nil, run(ctx) }, func(_ any, err error) {
		if err != nil && !e.stopping {
			e.log.Warn().Err(err).Msgf("%s failed", what)
		}
	})
}

// opDone takes the result of an operation; stopped reports that the engine's owner gave up on
// a durable one (the engine stops).
func (e *engine) opDone(o *op, v any, err error, stopped bool, now time.Time) {
	e.now = now
	if !stopped {
		o.then(v, err)
	}
	e.pump()
}

// pump carries on with what the last input made possible: the intake, then the attempts.
func (e *engine) pump() {
	if e.stopping {
		return
	}
	e.followSession()
	e.keepShares(nil) // (it may lead again)
	e.pumpIntake()
	e.dispatch()
}

// wake puts l in the run queue when it may start an attempt.
func (e *engine) wake(l *lane) {
	if !l.inRunq && l.startable() {
		l.inRunq = true
		e.runq = append(e.runq, l)
	}
}

// dispatch starts attempts while workers are free: one attempt per lane in turn (a lane that may
// start more goes back at the end of the run queue), so no lane holds every worker.
func (e *engine) dispatch() {
	if !e.delivering() {
		return
	}
	for e.busy < e.cfg.workers && len(e.runq) > 0 && !e.stopping {
		l := e.runq[0]
		e.runq[0] = nil
		e.runq = e.runq[1:]
		l.inRunq = false
		b := l.take()
		if b == nil {
			continue
		}
		e.busy++
		ms, n := b.start()
		e.out = append(e.out, effect{attempt: &attempt{lane: l, b: b, ms: ms, n: n, batched: l.batching.Enabled(),
			gen: l.gen, dest: l.dest}})
		e.wake(l)
	}
	if len(e.runq) == 0 {
		e.runq = nil
	}
}

// finished takes the outcome of an attempt.
func (e *engine) finished(a *attempt, r destination.Result, now time.Time) {
	e.now = now
	e.busy--
	l, b := a.lane, a.b
	if r.Unblamed && !r.Delivered {
		// not the destination's failure (the relay's egress proxy): retried, but it counts
		// neither toward the endpoint's health nor toward the events' MaxAttempts
		for _, it := range b.items {
			it.unblamed++
		}
		l.finished(b)
	} else {
		o := health.Outcome{OK: r.Delivered, Gone: r.Gone}
		if !r.Delivered {
			o.Reason = r.Reason() // (a delivery needs none: formatting it costs every event)
		}
		ch := l.health.Observe(now, o)
		l.finished(b)
		e.transitions(l, ch)
	}
	switch {
	case e.stopping:
		if r.Delivered {
			e.delivered(l, b)
		} // else it stays unconfirmed, and the next run sends it
	case !r.Delivered && e.spillFailed(l, b):
		// the lane spills: the events go to its backlog
	case !r.Delivered && (a.gen != l.gen || !l.active):
		e.abandonRetired(l, b, "the endpoint was disabled or removed while the attempt was under way")
	case r.Delivered:
		e.delivered(l, b)
	case r.Gone && e.cfg.onGone == GonePause:
		e.gone(l, b, r)
	case e.dropHad(l, b):
		// delivered by another relay meanwhile (progress.go): not retried
	default:
		e.failed(l, b, r, a.n)
	}
	e.pump()
}

// delivered settles a delivered batch's events and makes their keys' next events ready.
func (e *engine) delivered(l *lane, b *batch) {
	e.m.EventsDelivered.Add(float64(len(b.items)))
	for _, it := range b.items {
		if !it.stored { // (one in the backlog is marked once delivered from there)
			e.observeDelivered(it)
		}
	}
	for _, k := range l.done(b) {
		e.durably("unpark aggregate", func(ctx context.Context) error { return l.store.Unpark(ctx, storeAggregate(k)) }, nil)
		e.log.Info().Str("lane", l.name).Str("aggregate_type", k.Type).Str("aggregate_id", k.ID).Msg("replay delivered; aggregate unparked")
	}
	for _, it := range b.items {
		e.settle(l, it)
	}
}

// observeDelivered records a delivered event's end-to-end latency and its mark: at once when it
// went to this lane alone, else once every lane it went to has it (fanSettled).
func (e *engine) observeDelivered(it *item) {
	if !it.tx.CommitTime.IsZero() && it.kind != kindReplay {
		e.m.EndToEnd.Observe(e.now.Sub(it.tx.CommitTime).Seconds())
	}
	switch it.kind {
	case kindSince:
		// A row a replay --since re-sent keeps its record: it was selected for being done (or
		// failed or parked). Marking it again would rewrite every row of the range, a WAL record
		// each that every walsender decodes, and move its processed_at, which retention counts from.
		return
	case kindBacklog, kindReplay:
		// One read from a backlog that went to this endpoint alone is done now. One that may have
		// gone to other endpoints too (a replayed event of a fan-out: its routes are not known
		// any more) is done once the slot confirmed past it: every other endpoint settled it, so
		// no restart sends it again and skips it for them (Resume) while one of them still owes
		// it. Before that it keeps its status.
		if it.kind == kindReplay && e.ep == nil {
			break // one destination: it is done
		}
		if it.resent {
			return // re-sent by a replay --since: it keeps its record, as kindSince does
		}
		if it.mark {
			e.markDone(it.m, it.attempt-1)
		} else {
			e.markOnceConfirmed(it.m, it.tx, it.attempt-1)
		}
		return
	}
	if c := e.fan[it.m]; c != nil {
		c.delivered++
		c.retries = max(c.retries, it.attempt-1)
	} else if e.marks != nil {
		e.marks.Done(it.m.ID, it.m.Sequence, it.attempt-1)
	}
}

// markDone marks m's row done (delivered, or owed by no endpoint).
func (e *engine) markDone(m *envelope.Message, retries int) {
	if e.marks != nil {
		e.marks.Done(m.ID, m.Sequence, retries)
	}
}

// laterMark is a row to mark done once the slot confirmed past its event (markOnceConfirmed).
type laterMark struct {
	id, seq string
	lsn     pglogrepl.LSN
	retries int
}

// maxLaterMarks bounds the marks that wait for the slot's confirmation; past it, a mark is
// given up (marks are advisory: the row stays pending, and prune takes it once every slot
// confirmed it).
const maxLaterMarks = 100_000

// markOnceConfirmed marks m's row done once the slot confirmed past it (then every endpoint it
// went to settled it), at once if it has. An event read from a backlog, or replayed, right after
// it was written there is often delivered before the confirmation: without the wait its row
// would stay pending for ever although no endpoint owes it (the marks that wait are looked at
// every backlogTick, flushLaterMarks).
func (e *engine) markOnceConfirmed(m *envelope.Message, tx *cdc.Tx, retries int) {
	e.markOnceConfirmedAt(m.ID, m.Sequence, position(m, tx).LSN, retries)
}

// markOnceConfirmedAt is markOnceConfirmed for row id of sequence seq, committed at lsn.
func (e *engine) markOnceConfirmedAt(id, seq string, lsn pglogrepl.LSN, retries int) {
	if e.marks == nil || e.cfg.confirmed == nil {
		return
	}
	switch {
	case e.cfg.confirmed() > lsn:
		e.marks.Done(id, seq, retries)
	case len(e.laterMarks) < maxLaterMarks:
		e.laterMarks = append(e.laterMarks, laterMark{id: id, seq: seq, lsn: lsn, retries: retries})
	}
}

// flushLaterMarks marks the rows waiting for the slot's confirmation that it has confirmed.
func (e *engine) flushLaterMarks() {
	if len(e.laterMarks) == 0 {
		return
	}
	confirmed := e.cfg.confirmed()
	keep := e.laterMarks[:0]
	for _, lm := range e.laterMarks {
		if confirmed > lm.lsn {
			e.marks.Done(lm.id, lm.seq, lm.retries)
		} else {
			keep = append(keep, lm)
		}
	}
	clear(e.laterMarks[len(keep):])
	e.laterMarks = keep
}

// settle records that it will not be sent again by this run: a streamed event's transaction is
// told (the tracker); a backfill, replay or backlog event counts down its page.
func (e *engine) settle(l *lane, it *item) {
	if it.kind == kindBacklog {
		l.bl.settled(it)
		return
	}
	l.bl.uncount(it)
	if it.stored {
		if it.settled {
			return // by its write into the backlog, or by its delivery (stored)
		}
		it.settled = true
	}
	switch it.kind {
	case kindBackfill:
		e.backfillLeft--
	case kindSince:
		e.acker.Ack(it.tx, it.m)
		e.sinceLeft--
	case kindLive:
		e.acker.Ack(it.tx, it.m)
		e.fair.dropped(l)
	default:
		e.acker.Ack(it.tx, it.m)
	}
	c := e.fan[it.m]
	if c == nil {
		return
	}
	if c.settled++; c.settled == c.routes {
		delete(e.fan, it.m)
		if c.delivered+c.released == c.routes && e.marks != nil { // no endpoint owes it
			e.marks.Done(it.m.ID, it.m.Sequence, c.retries)
		}
	}
}

// failed retries a batch after its backoff, splits a batch that failed narrowAfter times in a
// row, dead-letters a lone event after MaxAttempts (a shadow pipeline abandons it); the keys
// stay busy meanwhile.
func (e *engine) failed(l *lane, b *batch, r destination.Result, attempt int) {
	if len(b.items) == 1 {
		it := b.items[0]
		switch max := e.cfg.maxAttempts; {
		case e.cfg.shadow && max > 0 && it.attempt-it.unblamed >= max:
			e.abandon(l, b, r)
			return
		case max > 0 && it.attempt-it.unblamed >= max && l.store != nil && e.leading():
			// (A relay cut off from the slot retries instead: the one that leads has the event
			// from its own stream, and a dead letter written behind its back would park an
			// aggregate it goes on delivering.)
			e.deadLetter(l, it, r)
			return
		}
	}
	b.fails++
	n := attempt
	if l.batching.Enabled() {
		n = min(b.fails, attempt)
	}
	delay := nextDelay(n, r.RetryAfter, e.cfg.retryMin, e.cfg.retryMax, e.rand)
	e.logFailed(l, b, r, attempt, delay)
	if len(b.items) > 1 && b.fails >= narrowAfter {
		left, right, chained := b.split()
		if chained {
			left.afterGen = l.retryGen
			e.retryIn(l, delay, left)
		} else {
			e.retryIn(l, delay, left, right)
		}
		return
	}
	e.retryIn(l, delay, b)
}

// retryIn makes batches ready again after d, unless the lane's queues were taken apart meanwhile
// (a spill, a disable: the events are elsewhere now).
func (e *engine) retryIn(l *lane, d time.Duration, bs ...*batch) {
	gen := l.retryGen
	e.after(e.now.Add(d), func() {
		if l.retryGen != gen {
			return
		}
		for _, b := range bs {
			l.pushFormed(b)
		}
	})
}

func (e *engine) logFailed(l *lane, b *batch, r destination.Result, attempt int, delay time.Duration) {
	m := b.items[0].m
	ev := e.log.Warn().Str("lane", l.name).Int("attempt", attempt).Dur("retry_in", delay).Str("result", r.Label)
	if r.Err != nil {
		ev = ev.Str("error", r.Err.Error())
	} else {
		ev = ev.Int("status_code", r.Status)
	}
	if len(b.items) > 1 {
		ev = ev.Str("first_event_id", m.ID).Int("events", len(b.items))
		if b.fails >= narrowAfter {
			ev.Msg("batch delivery failed again; retrying it in halves to isolate the failing event")
		} else {
			ev.Msg("batch delivery failed; will retry the same batch")
		}
		return
	}
	ev = ev.Str("event_id", m.ID).Str("aggregate_type", m.AggregateType).Str("aggregate_id", m.AggregateID).
		Str("event_type", m.EventType).Str("lsn", b.items[0].tx.CommitLSN.String())
	if e.cfg.logPayloads {
		ev = ev.RawJSON("payload", m.Payload)
	}
	ev.Msg("delivery failed; will retry")
}

// deadLetter records a head that failed MaxAttempts times, parks its aggregate with every event
// queued behind it, and settles them all: the slot moves on while the store keeps what a replay
// needs. Until the record is written the event counts as in flight (a spill or a disable leaves
// it where it is), and a replay request for the lane waits (parkOps).
func (e *engine) deadLetter(l *lane, it *item, r destination.Result) {
	reason := r.Reason()
	it.inflight = true
	l.parkOps++
	e.durably("dead-letter event", func(ctx context.Context) error { return l.store.DeadLetter(ctx, it.m, it.attempt, reason) }, func() {
		it.inflight = false
		behind := l.park(it)
		e.tracef("dead-letter %s %s (%s/%s), %d behind", l.name, it.m.ID, it.m.AggregateType, it.m.AggregateID, len(behind))
		e.m.EventsDeadLettered.Inc()
		e.log.Error().Str("lane", l.name).Str("event_id", it.m.ID).Str("aggregate_type", it.m.AggregateType).
			Str("aggregate_id", it.m.AggregateID).Str("event_type", it.m.EventType).Int("attempt", it.attempt).
			Str("last_error", reason).Int("parked_behind", len(behind)).
			Msg("event dead-lettered; its aggregate is parked until " + e.replayCommand(l, "aggregate "+it.m.AggregateType+"/"+it.m.AggregateID))
		e.parkNow(l, behind, func() {
			e.settle(l, it)
			l.parkOps--
		})
	})
}

// parkNow records events of parked aggregates durably, then settles them and calls then. While
// a replay of the lane reads what is parked, the events wait (deferPark): written meanwhile,
// they could miss that read and then be forgotten with the aggregate once the replay is
// delivered.
//
// A lane writes its parks one at a time, in the order they were decided (writeParks): what is
// parked of an aggregate is then always the start of its events, never the start with a hole.
// A replay delivers what is parked ahead of everything else of the aggregate; had a later park
// landed before an earlier one and the relay died in between, the earlier event, back from the
// backlog or the stream, would be queued behind the replayed later ones (simulation seed 7237).
func (e *engine) parkNow(l *lane, its []*item, then func()) {
	if len(its) == 0 {
		then()
		return
	}
	if l.replayReads > 0 {
		if e.cfg.trace != nil {
			e.tracef("park deferred %s %v", l.name, itemIDs(its))
		}
		l.deferred = append(l.deferred, deferredPark{its, then})
		return
	}
	l.parkOps++
	l.parks = append(l.parks, deferredPark{its, then})
	if !l.parking {
		e.writeParks(l)
	}
}

// writeParks writes the parks waiting in l.parks in one store operation; those decided while it
// runs wait for it and go in the next one.
func (e *engine) writeParks(l *lane) {
	ps := l.parks
	l.parks, l.parking = nil, true
	var ms []*envelope.Message
	for _, p := range ps {
		for _, it := range p.its {
			ms = append(ms, it.m)
		}
	}
	if e.cfg.trace != nil {
		e.tracef("park %s %v", l.name, messageIDs(ms))
	}
	st := l.store
	e.durably("park events", func(ctx context.Context) error { return st.Park(ctx, ms) }, func() {
		l.parking = false
		if len(l.parks) > 0 {
			e.writeParks(l)
		}
		for _, p := range ps {
			for _, it := range p.its {
				e.settle(l, it)
			}
			l.parkOps--
			p.then()
		}
	})
}

// deferredPark is events to park, and what to do once they are, waiting for a replay's read
// (lane.deferred) or for the lane's park write under way (lane.parks).
type deferredPark struct {
	its  []*item
	then func()
}

// parkDeferred parks the events that waited for the replays' reads, or queues those whose
// aggregate a replay unparked meanwhile (behind the replayed events: they came later).
func (e *engine) parkDeferred(l *lane) {
	ds := l.deferred
	l.deferred = nil
	for _, d := range ds {
		var still []*item
		for _, it := range d.its {
			if !l.add(it) {
				still = append(still, it)
			}
		}
		e.parkNow(l, still, d.then)
	}
}

// abandon gives up on a shadow pipeline's event after its last attempt: the failure is recorded
// (best effort: a shadow never holds the slot for its own bookkeeping) and the event settled
// like a delivered one, so the next event of its aggregate goes ahead.
func (e *engine) abandon(l *lane, b *batch, r destination.Result) {
	it := b.items[0]
	reason := r.Reason()
	e.recordAbandoned(l, it, reason)
	e.log.Warn().Str("event_id", it.m.ID).Str("aggregate_type", it.m.AggregateType).Str("aggregate_id", it.m.AggregateID).
		Str("event_type", it.m.EventType).Int("attempt", it.attempt).Str("last_error", reason).
		Msg("shadow delivery abandoned after its last attempt; the event is settled, nothing is parked")
	l.done(b)
	e.settle(l, it)
}

// replayCommand is the command that replays what l parked, narrowed by what (in words: a
// library's messages name no CLI flag), for a log line.
func (e *engine) replayCommand(l *lane, what string) string {
	cmd := "`outbox-relay replay` of " + what
	if l.id != "" {
		cmd += " for endpoint " + l.id
	}
	return cmd + " of pipeline " + e.cfg.pipeline
}

func (e *engine) recordAbandoned(l *lane, it *item, reason string) {
	e.m.EventsAbandoned.Inc()
	if l.store != nil {
		e.writeAbandoned(l.store, it.m, it.attempt, reason, abandonedTries)
	}
}

// abandonedTries is how many times an abandoned event is recorded while its row is not visible
// yet (store.ErrNotVisible), a second apart, before the failure is logged.
const abandonedTries = 10

// writeAbandoned records an abandoned event (best effort: nothing waits for it), again a second
// later while its row is not visible yet, tries times in all.
func (e *engine) writeAbandoned(st store.Pipeline, m *envelope.Message, attempt int, reason string, tries int) {
	e.do("record an abandoned event", false, func(ctx context.Context) (any, error) {
		return nil, st.Abandoned(ctx, m, attempt, reason)
	}, func(_ any, err error) {
		switch {
		case err == nil || e.stopping:
		case errors.Is(err, store.ErrNotVisible) && tries > 1:
			e.after(e.now.Add(time.Second), func() { e.writeAbandoned(st, m, attempt, reason, tries-1) })
		default:
			e.log.Warn().Err(err).Str("event_id", m.ID).Msg("recording an abandoned event failed")
		}
	})
}

// abandonRetired settles events of an endpoint disabled or removed while their attempt was
// under way, recording them as abandoned.
func (e *engine) abandonRetired(l *lane, b *batch, reason string) {
	l.done(b)
	for _, it := range b.items {
		switch {
		case l.removed || e.cfg.backlog == nil:
			e.release(l, it, reason)
		case it.kind == kindLive && l.bl.on && !l.bl.removed:
			// A disable that keeps what the endpoint was owed (retire, keep): the event goes to
			// its backlog, as spillFailed does (which takes a batch of streamed events only:
			// this one also held events read from the backlog).
			l.bl.keep(it)
		case it.kind == kindLive || it.kind == kindBackfill:
			e.recordAbandoned(l, it, reason)
			e.settle(l, it)
		default:
			// One read from the backlog stays there. One a replay re-sent is not recorded as
			// abandoned: that record would take the place of its dead letter (failed or
			// parked), and the next replay of its aggregate, once the endpoint is enabled,
			// would leave it out (the simulation found this loss once a disable no longer
			// excused what the endpoint was owed).
			e.settle(l, it)
		}
	}
}

// release gives it up for l for good, recorded as abandoned, and settles it: l's endpoint was
// removed (or disabled with no backlog to keep what it held), so it owes the event no more.
// The event's row is then marked done once no endpoint owes it: at once when it went to l
// alone, else once every other endpoint it went to has it (settle, markOnceConfirmed). Without
// this, a row would stay pending for ever although every endpoint that still exists has it.
// (What a replay re-sent to an endpoint disabled without a backlog stays parked for its lane, to
// be replayed once it is enabled: it is not marked.)
func (e *engine) release(l *lane, it *item, reason string) {
	e.recordAbandoned(l, it, reason)
	switch c := e.fan[it.m]; {
	case it.resent:
		// re-sent by a replay --since: its row keeps its record
	case c != nil:
		c.released++
	case it.kind == kindLive, it.kind == kindBackfill, it.kind == kindBacklog && it.mark:
		e.markDone(it.m, it.attempt-1)
	case it.kind == kindBacklog, it.kind == kindReplay && l.removed:
		// (one read from the backlog, or a dead letter replayed, that went to other endpoints
		// too: they settled it once the slot confirmed past it)
		e.markOnceConfirmed(it.m, it.tx, it.attempt-1)
	}
	e.settle(l, it)
}

// gone handles a 410 Gone answer: the lane is held (the pipeline paused, or the endpoint held
// until its disable arrives through the stream), the batch waits at its keys' heads, its attempt
// not counted, and the pause or disable is recorded durably so that it holds across restarts and
// in whichever relay leads next.
func (e *engine) gone(l *lane, b *batch, r destination.Result) {
	for _, it := range b.items {
		it.attempt--
	}
	first := b.items[0].m
	what := "event " + first.ID
	if len(b.items) > 1 {
		what = "a batch of " + strconv.Itoa(len(b.items)) + " events from " + first.ID
	}
	reason := "the endpoint answered 410 Gone (" + what + "): it says it is gone; resume once it accepts events again"
	if l == e.single {
		e.setPause(true, reason)
	} else {
		l.gone = true
		e.refreshPause(l)
	}
	l.pushFormed(b)
	if l == e.single {
		record := e.cfg.recordPause
		if record == nil {
			e.logGone(l, first, r, false)
			return
		}
		e.durably("record the 410 Gone", func(ctx context.Context) error { return record(ctx, reason) }, func() {
			e.logGone(l, first, r, true)
		})
		return
	}
	id, disable := l.id, e.cfg.disable
	e.do("record the 410 Gone", true, func(ctx context.Context) (any, error) { return disableOnce(ctx, disable, id, reason) }, func(v any, _ error) {
		if won, _ := v.(bool); won {
			e.disabledGone(l, reason)
		} else {
			e.disabledAlready(l, reason)
		}
		// What a replay or a backfill re-sent is settled unsent now, as its disable will (retire):
		// the intake may wait for it (a backfill page), and the disable reaches this relay only
		// through the intake.
		for _, it := range l.takeOut(func(it *item) bool { return it.kind == kindLive || it.kind == kindBacklog }) {
			e.settle(l, it)
		}
		e.pump()
	})
}

func (e *engine) logGone(l *lane, m *envelope.Message, r destination.Result, recorded bool) {
	e.log.Error().Str("event_id", m.ID).Str("aggregate_type", m.AggregateType).Str("aggregate_id", m.AggregateID).
		Int("status_code", r.Status).Bool("pause_recorded", recorded).
		Msgf("the endpoint answered 410 Gone: pipeline %q is paused, nothing is sent and the event stays undelivered; "+
			"once the endpoint accepts events again, resume the pipeline with `outbox-relay resume`", l.name)
}

// pause takes the operator's pause (or resume) of the pipeline, at now.
func (e *engine) pause(paused bool, reason string, now time.Time) {
	e.now = now
	e.setPause(paused, reason)
	e.pump()
}

// setPause pauses (or resumes) every lane: attempts under way finish, nothing new starts, and
// retries that come due wait behind the pause.
func (e *engine) setPause(paused bool, reason string) {
	e.paused, e.pauseReason = paused, reason
	if paused {
		e.m.Paused.Set(1)
	} else {
		e.m.Paused.Set(0)
	}
	for _, l := range e.lanes {
		e.refreshPause(l)
	}
}

// itemIDs and messageIDs return the events' ids, for the trace.
func itemIDs(its []*item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.m.ID
	}
	return out
}

func messageIDs(ms []*envelope.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}
