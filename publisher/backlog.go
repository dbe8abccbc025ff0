package publisher

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// The backlog off the WAL. A lane whose oldest undelivered event has waited its spill_after, or
// that holds SpillSize events while it makes no progress, spills: the events it holds go to its
// backlog (store.Backlog) in stream order, and so does every event routed to it from then on; an
// event settles for the slot once its entry is written, so the slot confirms past a destination
// that is down. Attempts under way when it spilled finish; one that fails goes to the backlog
// too, and nothing is written before they have all settled (no entry may skip an event that is
// neither delivered nor in the backlog: writeSpilled says why). Once they are all settled, the
// lane reads its backlog in pages into its queues (bounded memory), delivers them as any other
// event (retries, circuit breaker, dead letters), and deletes each page delivered. When it has
// read everything written and its last attempt succeeded, it rejoins the live stream: the
// events routed to it that were not written yet are queued behind what it read, and the next
// ones are queued as they come.
//
// Order per aggregate holds because the backlog is read in stream order into the same per-key
// queues, nothing is read before every earlier event of the lane is in the backlog (the attempts
// under way settled, the events taken from the queues written), and the lane rejoins only once
// everything written was read. A relay that stops at any point loses nothing: what was not
// written is not confirmed, so the stream sends it again, and an entry written twice (the same
// position) is kept once. Entries delivered but not deleted yet are sent again (at least once,
// in order). A relay that starts again, or streams again after another led the slot, knows each
// endpoint as it was where the stream starts, which can be before entries of its backlog: it
// reads no entry at or past the endpoint's next version not applied yet (a pause must hold what
// was committed after it), nor past what it knows was written (through).
//
// A lane does one store operation of its backlog at a time (busy), in the order write, delete,
// read, so each sees what the one before did; lanes go independently.

// laneBacklog is a lane's side of the backlog.
type laneBacklog struct {
	// on: the streamed events routed to the lane are spilled (buf) instead of queued.
	on bool
	// buf are the events spilled and not written yet; writing those of the write under way
	// (writeSpilled), counted in neither buf nor entries until it is done.
	buf     []*item
	writing []*item
	busy    bool // a store operation of the backlog is under way
	// written is the position of the last entry written (or found at start), read that of the
	// last entry read; short is set when the last page read was not full, readTo is how far
	// that read could go (see through).
	written, read, readTo store.BacklogPos
	short                 bool
	// before is the commit LSN of the endpoint's first version not applied yet (0: none): its
	// entries from there on are not read before it is (see through).
	before pglogrepl.LSN
	// live counts the attempts of streamed events that were under way when the lane spilled
	// (or was disabled), not settled yet: nothing is written or read before they are.
	live int
	// fair: it spilled for holding more than its fair share of the buffer (fair.go); what it
	// spilled is written without waiting for live, with the events of those attempts.
	fair bool
	// pages are the pages read and not yet deleted, oldest first; inMem counts their events
	// not settled.
	pages []*backlogPage
	inMem int
	// entries is how many entries the backlog holds, as far as this process knows. recount is
	// set when resyncBacklogs read it while an operation of the backlog was under way, which
	// that read may or may not have seen: the operation leaves entries as read, and the lane
	// counts them again once it is done (recountBacklog).
	entries int64
	recount bool
	// oldest is when the event of the backlog's first entry was created, as last known: set by
	// a write into an empty backlog, and read again from the store at each status save
	// (refreshOldest), off the delivery path; zero: unknown yet, or no entry. It is what the
	// endpoint's oldest undelivered event is once its events are in the backlog (undelivered).
	oldest time.Time
	// rejoined is set when the lane rejoined the stream with entries still to deliver: "caught
	// up" is logged once they are delivered (emptied).
	rejoined bool
	removed  bool
	// reads counts the times the lane forgot what it read (reread): a page read before is dropped.
	reads uint64
	// since are the replays --since whose rows are not all written yet, in stream order
	// (sincebacklog.go): nothing is written or read past the first one's place before they are.
	since []*sinceJob
	// invisible is the event of the next entry to read when its row was not found, and
	// invisibleSince when that was first seen (see visible); no read starts before readAt.
	invisible      string
	invisibleSince time.Time
	readAt         time.Time
}

// backlogPage is a page read from a lane's backlog: its last position and its events not
// settled yet.
type backlogPage struct {
	high store.BacklogPos
	left int
	n    int // entries read in it
}

const (
	// backlogPageSize is how many entries a lane reads from its backlog at once; it reads the
	// next page once fewer than backlogLow of those it read are undelivered.
	backlogPageSize = 1000
	backlogLow      = backlogPageSize / 2
	// backlogTick is how often the backlogs are written, read and deleted; spillCheck is how
	// often the lanes are checked for a spill.
	backlogTick = 50 * time.Millisecond
	// backlogInvisible is how long a lane waits for an entry's event to become visible (see
	// visible) before it takes the event for deleted and skips it.
	backlogInvisible = 10 * time.Second
	spillCheck       = time.Second
	// spillStall is how long a lane holding SpillSize events must have delivered nothing for
	// the size to spill it (a busy lane holds many events and delivers them).
	spillStall = time.Second
)

// settled counts a settled event read from the backlog against its page.
func (b *laneBacklog) settled(it *item) {
	it.page.left--
	if slices.Contains(b.pages, it.page) {
		b.inMem--
	}
}

// through is how far the lane may read its backlog now: not past what this process knows was
// written (another relay that led the slot meanwhile may have written more, read once
// resyncBacklogs has brought the endpoint's versions up to there), and not at or past its first
// version not applied yet: after a restart the stream starts again before entries written then,
// and the endpoint is what it was at the stream's position; an entry committed while it was
// paused must wait for the pause to apply, not be delivered at once.
func (b *laneBacklog) through() store.BacklogPos {
	t := b.written
	if b.before > 0 && b.before <= t.LSN {
		t = store.BacklogPos{LSN: b.before - 1, Idx: math.MaxInt32}
	}
	if len(b.since) > 0 { // the rows of a replay --since being written, not past them
		if c := (store.BacklogPos{LSN: b.since[0].tx.CommitLSN, Idx: -1}); c.Less(t) {
			t = c
		}
	}
	return t
}

// position returns m's stream position (from its sequence; tx's commit LSN if it has none).
func position(m *envelope.Message, tx *cdc.Tx) store.BacklogPos {
	s := m.Sequence
	if len(s) == envelope.SequenceLen && s[16] == '-' {
		lsn, err1 := strconv.ParseUint(s[:16], 16, 64)
		idx, err2 := strconv.ParseUint(s[17:], 16, 32)
		if err1 == nil && err2 == nil {
			return store.BacklogPos{LSN: pglogrepl.LSN(lsn), Idx: int(idx)}
		}
	}
	return store.BacklogPos{LSN: tx.CommitLSN}
}

// backlogTick writes, reads and deletes the lanes' backlogs and decides which lane spills and
// which rejoins; it runs every backlogTick while the engine has a backlog.
func (e *engine) backlogTick() {
	check := e.now.Sub(e.spillChecked) >= spillCheck
	if check {
		e.spillChecked = e.now
	}
	leading := e.leading()
	e.flushLaterMarks()
	e.keepShares(nil)
	for _, l := range e.lanes {
		if check && !l.bl.on && leading {
			if why := e.spillDue(l); why != "" {
				e.spill(l, why, true)
			}
		}
		e.backlogStep(l)
	}
	e.after(e.now.Add(backlogTick), e.backlogTick)
}

// leading reports whether this relay's stream holds the slot, and the engine has brought itself
// up to date with that streaming session (the versions and backlogs another relay may have
// changed meanwhile: begin), or has taken nothing from the stream yet (it read the stores at its
// start). Only then does it spill and write backlog entries, dead letters and endpoint changes.
// Backlog entries serve to let the slot confirm past a destination that is down, which a relay
// cut off from the slot cannot do; written late, after another relay took over, they would put
// events there behind the other relay's back (it has them from its own stream and delivers them
// in their order, or drops them with a disable; read later, they would go out after later
// events).
func (e *engine) leading() bool {
	if e.cfg.slot == nil {
		return true
	}
	s := e.cfg.slot.Session()
	return s != 0 && (s == e.in.session || e.in.session == 0) // (before its first transaction: up to date since its start)
}

// spillAfter is the lane's spill_after: its row's, else the pipeline's.
func (e *engine) spillAfter(l *lane) time.Duration {
	if l.row.SpillAfterMS > 0 {
		return time.Duration(l.row.SpillAfterMS) * time.Millisecond
	}
	return e.cfg.spillAfter
}

// spillDue reports why l should spill now ("" if it should not).
func (e *engine) spillDue(l *lane) string {
	if !l.active {
		return ""
	}
	n, since := 0, time.Time{}
	for _, q := range l.keys {
		for i := range q.len() {
			if it := q.at(i); it.kind != kindBacklog {
				n++
				if since.IsZero() || it.at.Before(since) {
					since = it.at
				}
			}
		}
	}
	if n == 0 {
		return ""
	}
	if after := e.spillAfter(l); e.now.Sub(since) >= after {
		return "its oldest undelivered event waited " + after.String()
	}
	if n >= e.cfg.spillSize && e.now.Sub(l.health.Progress()) >= spillStall {
		return "it holds " + strconv.Itoa(n) + " events and delivered none for " + spillStall.String()
	}
	return ""
}

// spill moves the streamed events l holds to its backlog and spills what is routed to it from
// now on. The attempts under way stay; those of streamed events are counted (live).
//
// A lane that spills from the live stream (fromLive) reads its backlog from the first event it
// spills on: everything before was delivered by this relay, or read from its backlog already.
// An entry before it can only be another relay's, written while that relay was cut off from the
// slot after this one took over (a relay that loses the slot goes on with what it holds, and
// may write it to the backlog late): its event reached this relay through its own stream, and
// was delivered (or dropped by a disable) in its order; delivered now, it would come after later
// events of its aggregate. (A relay that finds another's backlog at the start of a streaming
// session reads it all: resyncBacklogs.)
func (e *engine) spill(l *lane, why string, fromLive bool) {
	b := &l.bl
	if b.on || !l.active || e.cfg.backlog == nil {
		return
	}
	b.on, b.short = true, false
	e.tracef("spill %s: %s", l.name, why)
	// Only streamed events go to the backlog. The others stay queued: read from the backlog
	// already; or re-sent by a replay or the backfill, which keep their own accounting (their
	// request's transaction, their page). A streamed event read back later queues behind them
	// at its key.
	its := l.takeOut(func(it *item) bool { return it.kind != kindLive })
	inFlight := countInFlight(l)
	if fromLive {
		var first *store.BacklogPos
		for _, q := range l.keys {
			for i := range q.len() {
				if it := q.at(i); it.counted && it.inflight {
					if p := position(it.m, it.tx); first == nil || p.Less(*first) {
						first = &p
					}
				}
			}
		}
		if len(its) > 0 {
			if p := position(its[0].m, its[0].tx); first == nil || p.Less(*first) {
				first = &p
			}
		}
		if first != nil && b.read.Less(before(*first)) {
			b.read = before(*first)
		}
	}
	b.buf = append(its, b.buf...)
	b.live += inFlight
	e.log.Warn().Str("lane", l.name).Str("why", why).Int("events", len(its)).Int("in_flight", inFlight).
		Msg("endpoint spills to its backlog: its events are recorded off the WAL, the slot confirms past them, " +
			"and it delivers them from the backlog in order")
}

// before returns the position just before p.
func before(p store.BacklogPos) store.BacklogPos {
	if p.Idx > math.MinInt32 { // (an index below 0 is a replay --since's entry)
		return store.BacklogPos{LSN: p.LSN, Idx: p.Idx - 1}
	}
	return store.BacklogPos{LSN: p.LSN - 1, Idx: math.MaxInt32}
}

// countInFlight counts the streamed events of attempts under way not counted yet, and counts
// them (they settle against laneBacklog.live).
func countInFlight(l *lane) int {
	n := 0
	for _, q := range l.keys {
		for i := range q.len() {
			if it := q.at(i); it.inflight && it.kind == kindLive && !it.counted {
				it.counted = true
				n++
			}
		}
	}
	return n
}

// spillFailed takes the events of a failed attempt of streamed events into the backlog when
// their lane spills (or was disabled with its events kept); it reports false if it does not.
func (e *engine) spillFailed(l *lane, b *batch) bool {
	bl := &l.bl
	if e.cfg.backlog == nil || !bl.on || bl.removed {
		return false
	}
	for _, it := range b.items {
		if it.kind != kindLive {
			return false
		}
	}
	l.done(b)
	for _, it := range b.items {
		bl.keep(it)
	}
	return true
}

// keep takes a streamed event whose attempt failed into the events to write (buf), no longer
// counted as an attempt under way since the spill (live).
func (b *laneBacklog) keep(it *item) {
	b.uncount(it)
	if !it.stored { // (one stored is written already, or being written)
		b.buf = append(b.buf, it)
	}
}

// storeInFlight returns the streamed events of the attempts under way when the lane spilled
// (counted; one may wait for a retry now) that are not written yet, marked stored: writeSpilled
// writes them with what it spilled.
func (l *lane) storeInFlight() []*item {
	var its []*item
	for _, q := range l.keys {
		for i := range q.len() {
			if it := q.at(i); it.counted && !it.stored {
				it.stored = true
				its = append(its, it)
			}
		}
	}
	return its
}

// uncount ends its count in live: its attempt that was under way when the lane spilled (or
// was disabled) has settled.
func (b *laneBacklog) uncount(it *item) {
	if it.counted {
		it.counted = false
		b.live--
	}
}

// spillRetired keeps in the backlog what a lane being disabled holds: the streamed events are
// spilled, those read from the backlog are forgotten (they are still in it: it is read again
// from its start when the endpoint is enabled).
func (e *engine) spillRetired(l *lane, its []*item, inFlight int) {
	b := &l.bl
	var spilled []*item
	read := false // entries read and not delivered: the backlog holds them
	for _, it := range its {
		switch {
		case it.stored: // written with what the lane spilled for its fair share, or being written
			b.uncount(it)
		case it.kind != kindBacklog:
			spilled = append(spilled, it)
		default:
			read = true
		}
	}
	if len(spilled) == 0 && inFlight == 0 && !read && b.entries == 0 && !b.on {
		return // nothing to keep: enabled again, it takes the live stream at once
	}
	b.on, b.short = true, false
	b.buf = append(spilled, b.buf...)
	b.live += inFlight
	b.read, b.pages, b.inMem = store.BacklogPos{}, nil, 0
}

// backlogStep does the lane's next backlog operation: write what it spilled, delete the pages
// it delivered, read the next page when it needs one; then rejoin the stream when it caught
// up. Each operation's end calls it again.
func (e *engine) backlogStep(l *lane) {
	b := &l.bl
	switch {
	case b.busy:
	case b.recount:
		e.recountBacklog(l)
	case !b.on && len(b.pages) == 0:
	case len(b.buf) > 0 && (b.live == 0 || b.fair && len(b.since) == 0) && e.leading() && e.writeSpilled(l):
	case len(b.since) > 0 && b.live == 0 && e.leading() && e.sinceStep(l):
	case e.trim(l):
	case b.live > 0:
	// a short page read everything there was up to its bound: read again once the bound moved
	case b.on && l.active && b.inMem < backlogLow && !(b.short && b.readTo == b.through()) && !e.now.Before(b.readAt):
		e.readPage(l, b.read, b.through())
	default:
		e.rejoin(l)
	}
}

// writeSpilled writes spilled events into the backlog and then settles them; if the relay
// stops first they stay unconfirmed, and the stream sends them again.
//
// backlogStep calls it only once no attempt that was under way when the lane spilled (live) is
// left. Such an attempt's event comes before the events spilled after it, and a relay that
// dies before the attempt settles must not leave a backlog whose entries skip that event: the
// next leader reads the backlog at once, while its stream sends the event again only later, so
// it would deliver the later events first and then write the earlier one behind what it read
// (an endpoints torture run found this after a failover). Holding them costs the slot nothing,
// as it cannot confirm past the unsettled attempt anyway; the lane keeps at most a request
// timeout's worth of events in memory meanwhile.
//
// A lane that spilled for its fair share of the buffer (fair) does not wait: it writes the
// events of those attempts too (stored), so that no entry skips them either, and what it holds
// settles at once instead of after a request timeout. Such an event is settled by the write or
// by its delivery, whichever comes first; delivered, it is sent again from the backlog (at least
// once, in order).
//
// While a replay --since's rows are being written, only the events committed before its request
// are: it reports false when there are none.
func (e *engine) writeSpilled(l *lane) bool {
	b := &l.bl
	its := b.buf
	b.buf = nil
	if len(b.since) > 0 {
		its, b.buf = splitBefore(its, b.since[0].tx.CommitLSN)
		if len(its) == 0 {
			return false
		}
	}
	if b.live > 0 {
		stored := l.storeInFlight()
		e.tracef("write %s: %d events of attempts under way too", l.name, len(stored))
		its = append(its, stored...)
	}
	sortItems(its)
	es := make([]store.BacklogEntry, len(its))
	for i, it := range its {
		es[i] = store.BacklogEntry{Pos: position(it.m, it.tx), EventID: it.m.ID, Attempts: it.attempt, Mark: e.fan[it.m] == nil}
	}
	b.busy, b.writing = true, its
	id, bl := l.id, e.cfg.backlog
	if e.cfg.trace != nil {
		for _, en := range es {
			e.tracef("write %s %s mark %v", l.name, en.EventID, en.Mark)
		}
	}
	e.durably("record events in an endpoint's backlog", func(ctx context.Context) error { return bl.Spill(ctx, id, es) }, func() {
		b.busy, b.writing = false, nil
		if b.entries == 0 && !b.recount { // the first entries: the backlog is as old as the oldest of them
			b.oldest = oldestOf(its)
		}
		e.tracef("written %s %d entries up to %v", l.name, len(es), es[len(es)-1].Pos)
		if last := es[len(es)-1].Pos; b.written.Less(last) {
			b.written = last
		}
		if !b.recount {
			b.entries += int64(len(es))
		}
		if b.removed { // removed while this was written: forget it again
			e.dropStored(id, false)
		}
		for _, it := range its {
			e.settle(l, it)
		}
		e.m.EventsSpilled.Add(float64(len(its)))
		e.backlogStep(l)
	})
	return true
}

// readPage reads the next page of the backlog into the lane's queues.
func (e *engine) readPage(l *lane, after, through store.BacklogPos) {
	b := &l.bl
	b.busy = true
	gen, reads, id, bl := l.gen, b.reads, l.id, e.cfg.backlog
	history, pipeline := e.history(), e.cfg.pipeline
	e.do("read an endpoint's backlog", true, func(ctx context.Context) (any, error) {
		evs, err := bl.Page(ctx, id, after, through, backlogPageSize)
		if err != nil {
			return nil, err
		}
		return backlogRead{evs, deliveredHere(ctx, history, pipeline, id, evs)}, nil
	}, func(v any, _ error) {
		b.busy = false
		defer e.backlogStep(l)
		read, _ := v.(backlogRead)
		evs := read.evs
		e.tracef("read %s after %v through %v: %d entries (read %v gen %d/%d active %v)", l.name, after, through, len(evs), b.read, gen,
			l.gen, l.active)
		if b.read != after || l.gen != gen || b.reads != reads || !l.active { // disabled meanwhile: read again from its start later
			return
		}
		short := len(evs) < backlogPageSize
		if n := b.visible(evs, e.now); n < len(evs) {
			// read again from the entry whose event was not found, at the next tick
			evs, short, b.readAt = evs[:n], false, e.now.Add(backlogTick)
		}
		b.short, b.readTo = short, through
		if len(evs) == 0 {
			return
		}
		pg := &backlogPage{high: evs[len(evs)-1].Pos}
		b.read = pg.high
		b.pages = append(b.pages, pg)
		var tx *cdc.Tx
		var parked []*item
		for _, ev := range evs {
			if ev.Message == nil {
				e.log.Error().Str("lane", l.name).Str("event_id", ev.EventID).Msg("an event of the endpoint's backlog is no longer " +
					"in outbox_events (deleted by hand?); it cannot be delivered and is skipped")
				continue
			}
			if ev.Pos.Replayed() {
				ev.Message.Sequence = resentSequence(ev.Message, ev.Pos)
			} else {
				ev.Message.Sequence = envelope.Sequence(uint64(ev.Pos.LSN), ev.Pos.Idx)
				if read.had[ev.EventID] {
					e.skipRead(l, ev)
					continue
				}
			}
			if tx == nil || tx.CommitLSN != ev.Pos.LSN {
				tx = &cdc.Tx{CommitLSN: ev.Pos.LSN} // for the log lines; it settles against its page, not the stream
			}
			it := e.newItem(ev.Message, tx, kindBacklog)
			it.attempt, it.mark, it.page, it.resent = ev.Attempts, ev.Mark, pg, ev.Pos.Replayed()
			pg.left++
			pg.n++
			b.inMem++
			if !l.add(it) {
				parked = append(parked, it)
			}
		}
		e.parkNow(l, parked, func() {})
	})
}

// visible returns how many entries of a page read at now to take: those before the first whose
// event was not found (Message nil). The stream can hand over a transaction a moment before its
// commit is visible to other sessions (longer on a loaded server), and an entry spilled from it
// at once can be read in that moment: its event is read again until it shows, not skipped as
// lost. Only when the page's first entry has not been found for backlogInvisible is it taken
// (readPage skips it as deleted), with the entries not found right after it.
func (b *laneBacklog) visible(evs []store.BacklogEvent, now time.Time) int {
	n := 0
	if len(evs) > 0 && evs[0].Message != nil {
		b.invisible = ""
	}
	if len(evs) > 0 && evs[0].Message == nil {
		if b.invisible != evs[0].EventID {
			b.invisible, b.invisibleSince = evs[0].EventID, now
		}
		if now.Sub(b.invisibleSince) < backlogInvisible {
			return 0
		}
		b.invisible = ""
		for n < len(evs) && evs[n].Message == nil {
			n++
		}
	}
	for ; n < len(evs); n++ {
		if evs[n].Message == nil {
			return n
		}
	}
	return n
}

// trim deletes the pages read whose events are all settled, oldest first; it reports whether it
// started to.
func (e *engine) trim(l *lane) bool {
	b := &l.bl
	n := 0
	var upTo store.BacklogPos
	for n < len(b.pages) && b.pages[n].left <= 0 {
		upTo = b.pages[n].high
		n++
	}
	if n == 0 {
		return false
	}
	b.busy = true
	id, bl := l.id, e.cfg.backlog
	e.do("delete delivered entries of an endpoint's backlog", true, func(ctx context.Context) (any, error) {
		return bl.Trim(ctx, id, upTo)
	}, func(v any, _ error) {
		b.busy = false
		gone, _ := v.(int64)
		e.tracef("trimmed %s up to %v: %d", l.name, upTo, gone)
		if len(b.pages) >= n && b.pages[n-1].high == upTo { // not read again from the start meanwhile
			b.pages = b.pages[n:]
		}
		if !b.recount {
			b.entries = max(b.entries-gone, 0)
			e.emptied(l)
		}
		e.backlogStep(l)
	})
	return true
}

// recountBacklog reads again how many entries l's backlog holds, no other operation of it
// being under way: resyncBacklogs read the sizes while one was (simulation seed 4897: a trim
// under way, already seen by that read, was taken off again, and the backlog, holding an event
// still owed, counted empty; the next write then took its own events for the oldest).
func (e *engine) recountBacklog(l *lane) {
	b := &l.bl
	b.busy, b.recount = true, false
	id, bl := l.id, e.cfg.backlog
	e.do("count an endpoint's backlog", false, func(ctx context.Context) (any, error) { return bl.Sizes(ctx) }, func(v any, err error) {
		b.busy = false
		if err != nil { // counted again at the next backlog tick
			b.recount = true
			return
		}
		sizes, _ := v.(map[string]store.BacklogSize)
		e.tracef("recount %s: %d entries (%d known)", l.name, sizes[id].Entries, b.entries)
		b.entries = sizes[id].Entries
		if b.entries == 0 {
			e.emptied(l)
		} else if b.oldest.IsZero() {
			e.refreshOldest()
		}
		e.backlogStep(l)
	})
}

// rejoin makes the lane take the live stream again once it read everything written to its
// backlog and its last attempt succeeded: the events spilled and not written yet, all after
// what it read, are queued behind it.
func (e *engine) rejoin(l *lane) {
	b := &l.bl
	if !b.on || !l.active || b.busy || b.live > 0 || !b.short || b.read.Less(b.written) || l.health.Failing() || len(b.since) > 0 {
		return
	}
	b.on, b.fair = false, false
	its := b.buf
	b.buf = nil
	e.tracef("rejoin %s: %d spilled (read %v written %v)", l.name, len(its), b.read, b.written)
	var parked []*item
	for _, it := range its {
		if !l.add(it) {
			parked = append(parked, it) // its aggregate was parked meanwhile: parked as a live event is
		}
	}
	e.parkNow(l, parked, func() {})
	if b.rejoined = b.entries > 0; b.rejoined {
		// What it read is not all delivered yet (a paused endpoint delivers none of it): it is
		// caught up once the last of it is, and the backlog is empty (emptied).
		n, _ := l.undelivered()
		e.log.Info().Str("lane", l.name).Int("undelivered", n).Int64("backlog", b.entries).
			Msg("endpoint read its whole backlog; it takes the live stream again behind what it still has to deliver")
		return
	}
	e.log.Info().Str("lane", l.name).Int("queued", len(its)).Msg("endpoint caught up with its backlog; it takes the live stream again")
}

// emptied notes a backlog that a trim or a drop left without entries: its oldest is forgotten,
// and a lane that rejoined the stream before it delivered what it read is caught up now.
func (e *engine) emptied(l *lane) {
	b := &l.bl
	if b.entries > 0 {
		return
	}
	b.oldest = time.Time{}
	if b.rejoined && !b.on {
		b.rejoined = false
		e.log.Info().Str("lane", l.name).Msg("endpoint caught up with its backlog: it is empty, and the endpoint takes the live stream")
	}
}

// oldestOf returns when the oldest of its was committed (or created, when that is unknown).
func oldestOf(its []*item) time.Time {
	var t time.Time
	for _, it := range its {
		if at := it.since(); !at.IsZero() && (t.IsZero() || at.Before(t)) {
			t = at
		}
	}
	return t
}

// refreshOldest reads when the first entry of each backlog was created, for the lanes that have
// a backlog; it runs at each status save, off the delivery path. A backlog written meanwhile
// into an empty one keeps what its write set (the read saw none).
func (e *engine) refreshOldest() {
	bl := e.cfg.backlog
	var ids []string
	for _, l := range e.lanes {
		if l.bl.entries > 0 {
			ids = append(ids, l.id)
		}
	}
	if bl == nil || len(ids) == 0 {
		return
	}
	e.do("read the oldest events of the endpoints' backlogs", false, func(ctx context.Context) (any, error) {
		return bl.Oldest(ctx, ids)
	}, func(v any, err error) {
		if err != nil && !e.stopping {
			e.log.Warn().Err(err).Msg("reading the oldest events of the endpoints' backlogs failed; their age is read again at the next status save")
		}
		oldest, _ := v.(map[string]time.Time)
		for id, t := range oldest {
			if l := e.byID[id]; l != nil && l.bl.entries > 0 {
				l.bl.oldest = t
			}
		}
	})
}

// dropBacklog forgets the backlog of a removed lane: the events spilled and not written are
// given up (release: their rows are marked done once no endpoint owes them), and the entries
// are deleted (dropStored).
func (e *engine) dropBacklog(l *lane) {
	bl := e.cfg.backlog
	if bl == nil {
		return
	}
	b := &l.bl
	b.removed, b.on, b.fair = true, false, false
	e.dropSince(l, nil)
	its := b.buf
	b.buf, b.pages, b.inMem, b.entries, b.oldest, b.rejoined = nil, nil, 0, 0, time.Time{}, false
	for _, it := range its {
		e.release(l, it, "the endpoint was removed")
	}
	e.dropStored(l.id, true)
}

// dropStored deletes the stored backlog of removed endpoint id (holding the intake while it
// does when hold is set), and settles the rows of the entries it deleted: the endpoint owes
// them no more, so a row whose entry marks it (the event went to this endpoint alone) is
// marked done at once, and any other once the slot confirmed past it (every other endpoint it
// went to settled it), as release does for an event in memory. Without this a removal strands
// the rows it alone was owed: pending for ever. (The rows a replay --since wrote keep their
// record, as when delivered.)
func (e *engine) dropStored(id string, hold bool) {
	bl := e.cfg.backlog
	const what = "drop a removed endpoint's backlog"
	run := func(ctx context.Context) (any, error) { return bl.Drop(ctx, id) }
	settle := func(v any) {
		es, _ := v.([]store.BacklogEntry)
		e.tracef("dropped %s %d entries", id, len(es))
		if e.marks == nil {
			return
		}
		for _, en := range es {
			if en.Pos.Replayed() {
				continue
			}
			seq, retries := envelope.Sequence(uint64(en.Pos.LSN), en.Pos.Idx), max(en.Attempts-1, 0)
			if en.Mark {
				e.marks.Done(en.EventID, seq, retries)
			} else {
				e.markOnceConfirmedAt(en.EventID, seq, en.Pos.LSN, retries)
			}
		}
	}
	if hold {
		e.hold(what, run, settle)
	} else {
		e.do(what, true, run, func(v any, _ error) { settle(v) })
	}
}

// resyncBacklogs makes the lanes follow the backlogs as they are now, at the start of a new
// streaming session: another relay that led the slot meanwhile may have spilled an endpoint
// this one delivers live (such a lane spills what it holds: its backlog comes first in stream
// order, and reads the backlog), or delivered, deleted or dropped (a removal) what this one
// read of a backlog (each lane reads its backlog again: reread).
func (e *engine) resyncBacklogs(then func()) {
	bl := e.cfg.backlog
	if bl == nil {
		then()
		return
	}
	e.hold("read the endpoints' backlogs", func(ctx context.Context) (any, error) { return bl.Sizes(ctx) }, func(v any) {
		sizes := v.(map[string]store.BacklogSize)
		for _, l := range e.lanes {
			e.reread(l)
		}
		for _, id := range sortedIDs(sizes) {
			l, sz := e.byID[id], sizes[id]
			if l == nil && e.ep != nil && sz.Entries > 0 { // an endpoint created later in the stream
				if e.ep.backlogs == nil {
					e.ep.backlogs = map[string]store.BacklogSize{}
				}
				e.ep.backlogs[id] = sz
			}
			if l == nil || sz.Entries == 0 {
				continue
			}
			on := l.bl.on
			if !on {
				e.spill(l, "another relay spilled it while it led the slot", false)
			}
			if l.bl.written.Less(sz.Last) {
				l.bl.written, l.bl.short = sz.Last, false
			}
			l.bl.entries = sz.Entries
			l.bl.recount = l.bl.busy
			if !on && !l.active { // disabled: it reads the backlog from its start once enabled
				l.bl.on = true
			}
		}
		e.refreshOldest() // another relay may have written or emptied them
		then()
	})
}

// reread forgets what l read of its backlog and has not started, to read it again from its
// start: another relay that led the slot meanwhile may have delivered and deleted those entries,
// or dropped the backlog with a removal of the endpoint and delivered its later events; sent
// now, they would go out after those. What is under way finishes (at worst a duplicate).
func (e *engine) reread(l *lane) {
	b := &l.bl
	if len(b.pages) == 0 && !b.busy {
		return
	}
	its := l.takeOut(func(it *item) bool { return it.kind != kindBacklog })
	e.tracef("reread %s: %d dropped", l.name, len(its))
	b.reads++
	b.read, b.pages, b.inMem, b.short = store.BacklogPos{}, nil, 0, false
	e.wake(l)
}
