package publisher

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// intake is where transactions from the stream wait to be queued, and how far the one being
// queued got. It goes strictly in stream order: an event, or a control record at its place among
// the events, is taken only once what came before it is done with, which may mean waiting for a
// store operation (held: a park, a replay's read, an endpoint version recorded) or a condition
// (until: a replay --since page settled, a backfill page delivered). Meanwhile nothing behind it
// is queued; the stream stops reading once the tracker's buffer is full.
type intake struct {
	txs     []*cdc.Tx     // received, not taken yet
	cur     *cdc.Tx       // being queued
	ctls    []cdc.Control // its control records, in the order they are carried out (controlsInOrder)
	next    int           // its next event
	ctl     int           // its next control record (of ctls)
	steps   []func()      // work to do before the next event (the start's reads, a replay's steps)
	held    int           // store operations it waits for
	until   func() bool
	then    func()
	parking []parked // events of parked aggregates met since the last write of them

	session     uint64             // the streaming session of the last transaction taken
	lastCommit  pglogrepl.LSN      // the commit of the last transaction taken from the stream
	catching    bool               // catching up with a new session (followSession)
	from        pglogrepl.LSN      // the slot's confirmed position as the last new session started
	resume      bool               // skip what an earlier process delivered (Resume)
	checked     map[*cdc.Tx]*prior // resent transactions checked: what they hold delivered
	doneSession uint64             // the session that found nothing more to skip
	quiet       int                // events in a row the session's checks found delivered nowhere
	quietIn     uint64             // the session quiet counts in
	recheck     map[*cdc.Tx]bool   // transactions held from an earlier session, to check again
}

type parked struct {
	l  *lane
	it *item
}

// offer takes a transaction from the stream.
func (e *engine) offer(tx *cdc.Tx, now time.Time) {
	e.now = now
	e.in.txs = append(e.in.txs, tx)
	e.pump()
}

// first puts steps before the intake's other work, in their order.
func (e *engine) first(steps ...func()) {
	e.in.steps = append(steps, e.in.steps...)
}

// hold runs a durable store operation that the intake waits for; then is called with its result.
func (e *engine) hold(what string, run func(context.Context) (any, error), then func(any)) {
	e.in.held++
	e.do(what, true, run, func(v any, _ error) {
		e.in.held--
		then(v)
	})
}

// holdWrite is hold for a write.
func (e *engine) holdWrite(what string, run func(context.Context) error, then func()) {
	e.hold(what, func(ctx context.Context) (any, error) { return nil, run(ctx) }, func(any) {
		if then != nil {
			then()
		}
	})
}

// waitUntil makes the intake wait until cond holds, then do then.
func (e *engine) waitUntil(cond func() bool, then func()) {
	e.in.until, e.in.then = cond, then
}

// pumpIntake queues as much as it may.
func (e *engine) pumpIntake() {
	in := &e.in
	for !e.stopping && in.held == 0 {
		switch {
		case in.until != nil:
			if !in.until() {
				return
			}
			then := in.then
			in.until, in.then = nil, nil
			then()
		case len(in.steps) > 0:
			s := in.steps[0]
			in.steps[0] = nil
			in.steps = in.steps[1:]
			s()
		case !e.queueNext():
			return
		}
	}
}

// queueNext takes the next event or control record of the stream, and reports false when it
// has none.
func (e *engine) queueNext() bool {
	in := &e.in
	if in.cur == nil {
		if len(in.txs) == 0 {
			return false
		}
		tx := in.txs[0]
		if e.resumeActive(tx) && in.checked[tx] == nil {
			e.checkResent()
			return true
		}
		in.txs[0] = nil
		in.txs = in.txs[1:]
		in.cur, in.ctls, in.next, in.ctl = tx, controlsInOrder(tx.Controls), 0, 0
		if !tx.Backfill {
			e.begin(tx.Session, func(pglogrepl.LSN) pglogrepl.LSN { return tx.CommitLSN }, nil)
			in.lastCommit = tx.CommitLSN
		}
		return true
	}
	tx := in.cur
	switch {
	case in.ctl < len(in.ctls) && in.ctls[in.ctl].At <= in.next:
		if !e.flushParked() {
			c := &in.ctls[in.ctl]
			in.ctl++
			e.control(tx, c)
		}
	case in.next < len(tx.Events):
		m := tx.Events[in.next]
		in.next++
		e.queueEvent(tx, m, in.checked[tx])
	case !e.flushParked():
		delete(in.checked, tx)
		in.cur, in.ctls = nil, nil
	}
	return true
}

// controlsInOrder returns a transaction's control records in the order the intake carries them
// out: its endpoint changes first, before its first event, then the others (replays) at their
// places among the events. An endpoint change applies to the whole transaction that commits it:
// the endpoint as it stands at the commit routes every event of the transaction, whether the
// event was written before or after the endpoint's row (a signup writes customer.created, then
// the partner's endpoint, and the new partner gets its own signup event; an event written in
// the transaction that disables or removes an endpoint does not go to it). Several changes of
// one transaction apply in their order, so the last one stands. cs is returned as it is when
// it is in that order already.
func controlsInOrder(cs []cdc.Control) []cdc.Control {
	n, ordered := 0, true
	for i, c := range cs {
		if c.Endpoint != nil {
			ordered = ordered && i == n && c.At == 0
			n++
		}
	}
	if ordered {
		return cs
	}
	out := make([]cdc.Control, 0, len(cs))
	for _, c := range cs {
		if c.Endpoint != nil {
			c.At = 0
			out = append(out, c)
		}
	}
	for _, c := range cs {
		if c.Endpoint == nil {
			out = append(out, c)
		}
	}
	return out
}

// begin prepares the lanes for a transaction of a streaming session, then calls done (if not
// nil); at is where the engine's intake stands in the stream, given the slot's confirmed
// position as the session started. In a new session, another relay may have led the slot since
// this one received what it holds (this process stood by, or lost its connection): what the slot
// confirmed meanwhile is dropped (dropConfirmed), the endpoints are brought up to date with the
// versions log as of the intake's place (another relay may have pruned the log up to the slot's
// position), and the lanes with the backlogs and the parked aggregates. Then the endpoint
// versions committed before the intake's place apply.
func (e *engine) begin(session uint64, at func(from pglogrepl.LSN) pglogrepl.LSN, done func()) {
	if session <= e.in.session { // this session's, or one received before it caught up
		if e.ep != nil {
			e.ep.applyPending(at(0))
		}
		if done != nil {
			done()
		}
		return
	}
	var from pglogrepl.LSN
	if e.cfg.slot != nil {
		from = e.cfg.slot.SessionFrom()
	}
	e.in.from = max(e.in.from, from)
	e.dropConfirmed()
	lsn := at(from)
	then := func() {
		e.in.session = session
		e.begin(session, func(pglogrepl.LSN) pglogrepl.LSN { return lsn }, done)
	}
	resync := func() {
		if e.ep != nil {
			e.ep.resync(lsn, func() { e.resyncBacklogs(func() { e.resyncParked(then) }) })
		} else {
			e.resyncBacklogs(func() { e.resyncParked(then) })
		}
	}
	if e.in.session != 0 { // another relay may have led: what it delivered of what this one holds is not sent again
		resync = e.recheckHeld(resync)
	}
	resync()
}

// settledElsewhere reports whether the slot's position moved past tx, which this process
// received in an earlier streaming session, while another relay led the slot (dropConfirmed).
// Without a session's position (no Slot: a stream whose transactions may carry no LSN at all,
// as a library caller's or a test's), nothing was.
func (e *engine) settledElsewhere(tx *cdc.Tx) bool {
	return !tx.Backfill && e.in.from != 0 && tx.EndLSN <= e.in.from
}

// dropConfirmed settles, unsent, the streamed events and control records this process holds at
// or before the slot's position as its new streaming session started (settledElsewhere): the slot can
// only have moved past them while another relay led it, which settled them (delivered them,
// wrote them to a backlog or a dead letter, or dropped them with a disable). Sent now, they could
// go out after later events that relay delivered; their endpoint changes recorded now could
// bring back what it removed from the versions log since (Prune). What is under way finishes.
func (e *engine) dropConfirmed() {
	in := &e.in
	old := func(tx *cdc.Tx) bool { return tx != nil && e.settledElsewhere(tx) }
	n := 0
	ackRest := func(tx *cdc.Tx, next, ctl int) {
		for _, m := range tx.Events[next:] {
			e.acker.Ack(tx, m)
			n++
		}
		for range tx.Controls[ctl:] {
			e.acker.AckControl(tx)
			n++
		}
	}
	if old(in.cur) {
		ackRest(in.cur, in.next, in.ctl)
		in.next, in.ctl = len(in.cur.Events), len(in.ctls)
	}
	keep := in.txs[:0]
	for _, tx := range in.txs {
		if old(tx) {
			ackRest(tx, 0, 0)
			delete(in.checked, tx)
		} else {
			keep = append(keep, tx)
		}
	}
	clear(in.txs[len(keep):])
	in.txs = keep
	parking := in.parking[:0]
	for _, p := range in.parking {
		if old(p.it.tx) {
			e.settle(p.l, p.it)
			n++
		} else {
			parking = append(parking, p)
		}
	}
	in.parking = parking
	stale := func(it *item) bool { return ofStream(it) && old(it.tx) }
	for _, l := range e.lanes {
		for _, it := range l.takeOut(func(it *item) bool { return !stale(it) }) {
			e.settle(l, it)
			n++
		}
		buf := l.bl.buf[:0]
		for _, it := range l.bl.buf {
			if stale(it) {
				e.settle(l, it)
				n++
			} else {
				buf = append(buf, it)
			}
		}
		l.bl.buf = buf
		e.dropSince(l, old)
	}
	if n > 0 {
		e.tracef("drop confirmed up to %s: %d", in.from, n)
		e.log.Info().Int("events", n).Str("confirmed", in.from.String()).
			Msg("another relay led the slot while this one was cut off from it, and settled events this one held; they are not sent again")
	}
}

// resyncParked makes each lane's parked aggregates those the store records, then calls then.
// Those another relay parked while it led the slot (a dead letter it wrote) are parked here: what
// a lane holds of them is parked behind (the intake waits for those writes), as what arrives
// later. Those another relay unparked meanwhile (it delivered their replay) are no longer parked
// here: kept, the lane would park their next events under an aggregate the store no longer
// lists, which no replay would ever send (simulation seed 14463).
func (e *engine) resyncParked(then func()) {
	read := func(ctx context.Context) (any, error) {
		if e.ep != nil {
			return e.cfg.endpoints.Parked(ctx)
		}
		if e.single.store == nil {
			return map[string][]store.Aggregate{}, nil
		}
		aggs, err := e.single.store.Parked(ctx)
		return map[string][]store.Aggregate{"": aggs}, err
	}
	e.hold("read the parked aggregates", read, func(v any) {
		parked := v.(map[string][]store.Aggregate)
		for _, l := range e.lanes {
			if l.active { // else parked when it starts (setParked)
				e.resyncLaneParked(l, parked[l.id])
			}
		}
		then()
	})
}

// resyncLaneParked makes l's parked aggregates stored, those the store records for it.
func (e *engine) resyncLaneParked(l *lane, stored []store.Aggregate) {
	inStore := make(map[cdc.Aggregate]bool, len(stored))
	for _, a := range stored {
		inStore[cdc.Aggregate(a)] = true
	}
	gone := 0
	for k := range l.parked {
		if !inStore[k] {
			delete(l.parked, k)
			gone++
		}
	}
	if gone > 0 {
		e.tracef("unparked by another relay %s %d", l.name, gone)
		e.m.ParkedAggregates.Sub(float64(gone))
	}
	// A replay under way is given up: another relay may have parked more events of its
	// aggregate since it read them, which its end (Unpark) would forget. The aggregate is
	// parked again, for a replay to come, if the store still records it parked.
	news := map[cdc.Aggregate]bool{}
	for k := range l.replaying {
		if inStore[k] {
			news[k], l.parked[k] = true, true
		}
	}
	if len(news) > 0 {
		e.log.Warn().Str("lane", l.name).Int("aggregates", len(news)).Msg("a replay under way was given up, since another " +
			"relay led the slot meanwhile and may have parked more of its events; its aggregates stay parked: replay them " +
			"again with " + e.replayCommand(l, "everything parked"))
	}
	clear(l.replaying)
	l.replays++
	for k := range inStore {
		if !l.parked[k] {
			news[k], l.parked[k] = true, true
		}
	}
	if len(news) == 0 {
		return
	}
	e.tracef("parked by another relay %s %d", l.name, len(news))
	e.m.ParkedAggregates.Add(float64(len(news)))
	e.in.held++
	e.parkNow(l, l.takeOut(func(it *item) bool { return !news[it.key()] }), func() { e.in.held-- })
}

// delivering reports whether the engine may start attempts: while its stream holds the slot in
// the session of the transactions it took (or before it took any). A relay cut off from the slot
// starts none of what it holds: another relay takes the slot over, gets those events again from
// the slot's confirmed position and delivers them in their order, or drops them with a disable
// it applies (sent late by this one, they would go out after later events). When its stream
// holds the slot again, it catches up with what the other relay did (followSession, begin), then
// goes on. (An attempt started before the relay learns it lost the slot may still land late: a
// relay learns it only when its replication connection fails.)
func (e *engine) delivering() bool {
	if e.cfg.slot == nil || e.in.session == 0 {
		return true
	}
	return e.cfg.slot.Session() == e.in.session
}

// followSession catches up with a new streaming session at once, as its first transaction
// would (begin), without waiting for the intake to reach it: transactions received before it
// may still wait for deliveries (a replay's page, a full buffer), which wait for it. The catch-up
// comes first, before what the intake waits for or does next: it is as of the intake's place
// (before the transaction being queued, or after the last one).
func (e *engine) followSession() {
	in := &e.in
	if e.cfg.slot == nil || in.session == 0 || in.held > 0 || in.catching {
		return
	}
	s := e.cfg.slot.Session()
	if s == 0 || s <= in.session {
		return
	}
	e.tracef("follow session %d", s)
	until, then := in.until, in.then
	in.until, in.then, in.catching = nil, nil, true
	e.begin(s, func(from pglogrepl.LSN) pglogrepl.LSN {
		if in.cur != nil && in.next+in.ctl < len(in.cur.Events)+len(in.cur.Controls) {
			return in.cur.CommitLSN // in the middle of it
		}
		return max(in.lastCommit+1, from+1)
	}, func() { in.until, in.then, in.catching = until, then, false })
}

// queueEvent routes m of tx to its lanes, except those an earlier process delivered it to (p:
// what a lookup found, nil if none was made); an event every lane has is settled as it is.
func (e *engine) queueEvent(tx *cdc.Tx, m *envelope.Message, p *prior) {
	if p.done(m.ID) {
		e.tracef("skip %s: delivered", m.ID)
		e.m.EventsSkipped.Inc()
		e.acker.Ack(tx, m)
		return
	}
	lanes := e.routeTo(m)
	if had := p.endpoints(m.ID); len(had) > 0 && len(lanes) > 0 {
		lanes = e.withoutPrior(m, lanes, had)
	}
	if e.cfg.trace != nil {
		var names []string
		for _, l := range lanes {
			names = append(names, l.id)
		}
		e.tracef("route %s %v", m.ID, names)
	}
	e.send(tx, m, lanes, kindLive)
}

// send hands m to each of lanes, which it routes to. An event that routes to none is settled
// (and marked) at once.
func (e *engine) send(tx *cdc.Tx, m *envelope.Message, lanes []*lane, kind itemKind) {
	switch len(lanes) {
	case 0:
		if e.marks != nil {
			e.marks.Done(m.ID, m.Sequence, 0) // nobody is subscribed: settled as it is
		}
		if kind != kindBackfill {
			e.acker.Ack(tx, m)
		}
		return
	case 1:
	default:
		e.fan[m] = &fanCount{routes: len(lanes)}
		if kind != kindBackfill {
			extra := make([]*envelope.Message, len(lanes)-1)
			for i := range extra {
				extra[i] = m
			}
			e.acker.Grow(tx, extra)
		}
	}
	for _, l := range lanes {
		e.queueIn(l, e.newItem(m, tx, kind))
	}
}

func (e *engine) newItem(m *envelope.Message, tx *cdc.Tx, kind itemKind) *item {
	e.seq++
	return &item{m: m, tx: tx, kind: kind, seq: e.seq, at: e.now}
}

// queueIn queues it in l: a streamed event of a lane that spills goes to its backlog instead,
// and one of a parked aggregate is parked (written with the others met before the intake's
// next control record, see flushParked).
func (e *engine) queueIn(l *lane, it *item) {
	live := it.kind == kindLive
	if live {
		e.fair.took(l)
	}
	switch {
	case e.settledInBacklog(l, it):
	case l.bl.on && live:
		l.bl.buf = append(l.bl.buf, it)
	case !l.add(it):
		e.in.parking = append(e.in.parking, parked{l, it})
	}
	if live {
		e.keepShares(l)
	}
}

// flushParked writes the events of parked aggregates met so far, lane by lane, and settles them
// once written; it reports whether there were any (the intake then waits for the writes).
func (e *engine) flushParked() bool {
	ps := e.in.parking
	if len(ps) == 0 {
		return false
	}
	e.in.parking = nil
	for len(ps) > 0 {
		l := ps[0].l
		var its []*item
		rest := ps[:0]
		for _, p := range ps {
			if p.l == l {
				its = append(its, p.it)
			} else {
				rest = append(rest, p)
			}
		}
		ps = rest
		e.in.held++
		e.parkNow(l, its, func() { e.in.held-- })
	}
	return true
}

// control carries out a control record of tx at its place in the stream.
func (e *engine) control(tx *cdc.Tx, c *cdc.Control) {
	switch {
	case c.Endpoint != nil && e.ep != nil:
		e.ep.change(tx, c.Endpoint)
	case c.Replay != nil:
		l := e.replayLane(c.Replay)
		switch {
		case l == nil:
			e.acker.AckControl(tx)
		case c.Replay.SinceRequest != 0:
			e.replaySince(l, tx, c.Replay.SinceRequest)
		default:
			e.replay(l, tx, c.Replay.Aggregates)
		}
	default:
		e.acker.AckControl(tx) // a kind this pipeline does not act on
	}
}
