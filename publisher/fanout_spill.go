package publisher

import (
	"context"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// The backlog off the WAL. An endpoint whose oldest undelivered event has waited its
// spill_after, or that holds SpillSize events while it makes no progress, spills: the events
// it holds go to its backlog (BacklogStore) in stream order, and so does every event routed to
// it from then on; an event settles for the slot once its entry is written, so the slot
// confirms past an endpoint that is down. Attempts under way when it spilled finish; one that
// fails goes to the backlog too, and nothing is written before they have all settled (no entry
// may skip an event that is neither delivered nor in the backlog). Once they are all settled,
// the endpoint reads its backlog in pages into its queues (bounded memory), delivers them as
// any other event (retries, circuit breaker, dead letters), and deletes each page delivered.
// When it has read everything written and its last attempt succeeded, it rejoins the live
// stream: the events routed to it that were not written yet are queued behind what it read,
// and the next ones are queued as they come.
//
// Order per aggregate holds because the backlog is read in stream order into the same per-key
// queues, nothing is read before every earlier event of the endpoint is in the backlog (the
// attempts under way settled, the events taken from the queues written), and the endpoint
// rejoins only once everything written was read. A relay that stops at any point loses
// nothing: what was not written is not confirmed, so the stream sends it again, and an entry
// written twice (the same position) is kept once. Entries delivered but not deleted yet are
// sent again (at least once, in order). A relay that starts again, or streams again after
// another led the slot, knows each endpoint as it was where the stream starts, which can be
// before entries of its backlog: it reads no entry at or past the endpoint's next version not
// applied yet (a pause must hold what was committed after it), nor past what it knows was
// written (through).
//
// One goroutine per Fanout (backlogLoop) writes, reads, deletes and decides for every endpoint;
// nothing grows with the number of endpoints but the endpoints that spilled.

// BacklogStore keeps the endpoints' backlogs; PGBacklogStore implements it on the relay's
// tables for one pipeline.
type BacklogStore interface {
	// Spill records entries of endpoint's backlog; an entry of a position recorded already is
	// kept as it is.
	Spill(ctx context.Context, endpoint string, es []BacklogEntry) error
	// Page returns up to limit entries of endpoint's backlog after position after and up to
	// position through, in order, with their events.
	Page(ctx context.Context, endpoint string, after, through BacklogPos, limit int) ([]BacklogEvent, error)
	// Trim forgets endpoint's entries up to position upTo, and returns how many it forgot.
	Trim(ctx context.Context, endpoint string, upTo BacklogPos) (int64, error)
	// Drop forgets endpoint's whole backlog (it was removed).
	Drop(ctx context.Context, endpoint string) error
	// Sizes returns the backlog of each endpoint that has one (read once at start).
	Sizes(ctx context.Context) (map[string]BacklogSize, error)
}

// BacklogPos is an event's stream position: its commit LSN and its index in the transaction.
type BacklogPos struct {
	LSN pglogrepl.LSN
	Idx int
}

func (a BacklogPos) less(b BacklogPos) bool { return a.LSN < b.LSN || a.LSN == b.LSN && a.Idx < b.Idx }

// BacklogEntry is an event in an endpoint's backlog: its position, its id, the attempts made
// before it was spilled, and whether its delivery marks its row done (it was routed to this
// endpoint alone).
type BacklogEntry struct {
	Pos      BacklogPos
	EventID  string
	Attempts int
	Mark     bool
}

// BacklogEvent is an entry with its event; Message is nil when the row is gone from
// outbox_events.
type BacklogEvent struct {
	BacklogEntry
	Message *envelope.Message
}

// BacklogSize is how many entries an endpoint's backlog holds and the position of its last.
type BacklogSize struct {
	Entries int64
	Last    BacklogPos
}

const (
	// backlogPage is how many entries an endpoint reads from its backlog at once; it reads the
	// next page once fewer than backlogLow of those it read are undelivered.
	backlogPageSize = 1000
	backlogLow      = backlogPageSize / 2
	// backlogTick is how often the backlog loop writes, reads and deletes; spillCheck is how
	// often it looks for endpoints to spill.
	backlogTick = 50 * time.Millisecond
	// backlogInvisible is how long a lane waits for an entry's event to become visible (see
	// readPage) before it takes the event for deleted and skips it.
	backlogInvisible = 10 * time.Second
	spillCheck       = time.Second
	// spillStall is how long an endpoint holding SpillSize events must have delivered nothing
	// for the size to spill it (a busy endpoint holds many events and delivers them).
	spillStall = time.Second
)

// laneBacklog is a lane's side of the backlog; mu guards it.
type laneBacklog struct {
	mu sync.Mutex
	// on: the events routed to the lane are spilled (buf) instead of queued.
	on bool
	// buf are the events spilled and not written yet; writing is set while a write is under way.
	buf     []*item
	writing bool
	// written is the position of the last entry written (or found at start), read that of the
	// last entry read; short is set when the last page read was not full, readTo is how far
	// that read could go (see through).
	written, read, readTo BacklogPos
	short                 bool
	// before is the commit LSN of the endpoint's first version not applied yet (0: none): its
	// entries from there on are not read before it is (see through).
	before pglogrepl.LSN
	// live counts the attempts of streamed events that were under way when the lane spilled
	// (or was disabled), not settled yet: nothing is read before they are.
	live int
	// pages are the pages read and not yet deleted, oldest first; inMem counts their events
	// not settled.
	pages []*backlogPage
	inMem int
	// entries is how many entries the backlog holds, as far as this process knows.
	entries int64
	removed bool
	// invisible is the event of the next entry to read when its row was not found, and
	// invisibleSince when that was first seen (see readPage).
	invisible      string
	invisibleSince time.Time
}

// backlogPage is a page read from a lane's backlog: its last position and its events not
// settled yet.
type backlogPage struct {
	l    *lane
	high BacklogPos
	left int
}

// position returns m's stream position (from its sequence; tx's commit LSN if it has none).
func position(m *envelope.Message, tx *cdc.Tx) BacklogPos {
	s := m.Sequence
	if len(s) == envelope.SequenceLen && s[16] == '-' {
		lsn, err1 := strconv.ParseUint(s[:16], 16, 64)
		idx, err2 := strconv.ParseUint(s[17:], 16, 32)
		if err1 == nil && err2 == nil {
			return BacklogPos{LSN: pglogrepl.LSN(lsn), Idx: int(idx)}
		}
	}
	return BacklogPos{LSN: tx.CommitLSN}
}

func sortByPosition(its []*item) {
	slices.SortStableFunc(its, func(a, b *item) int {
		pa, pb := position(a.m, a.tx), position(b.m, b.tx)
		switch {
		case pa.less(pb):
			return -1
		case pb.less(pa):
			return 1
		}
		return 0
	})
}

// add routes m of tx to the lane: spilled while the lane spills, else queued.
func (l *lane) add(ctx context.Context, tx *cdc.Tx, m *envelope.Message) {
	b := &l.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.on && !tx.Backfill {
		b.buf = append(b.buf, &item{m: m, tx: tx, at: time.Now()})
		return
	}
	l.pub.add(ctx, tx, m)
}

// spillAfter is the lane's spill_after: its row's, else the pipeline's.
func (l *lane) spillAfter() time.Duration {
	if d := l.spillAfterRow.Load(); d > 0 {
		return time.Duration(d)
	}
	return l.f.cfg.SpillAfter
}

// spillDue reports why the lane should spill now ("" if it should not).
func (l *lane) spillDue(now time.Time) string {
	p := l.cur.Load()
	if p == nil {
		return ""
	}
	n, since := p.sched.waiting()
	if n == 0 {
		return ""
	}
	if after := l.spillAfter(); now.Sub(since) >= after {
		return "its oldest undelivered event waited " + after.String()
	}
	l.mu.Lock()
	progress := l.st.lastSuccess
	if progress.Before(l.started) {
		progress = l.started
	}
	l.mu.Unlock()
	if n >= l.f.cfg.SpillSize && now.Sub(progress) >= spillStall {
		return "it holds " + strconv.Itoa(n) + " events and delivered none for " + spillStall.String()
	}
	return ""
}

// spill moves what the lane holds to its backlog and spills what is routed to it from now on.
// Called from the backlog loop; Run's goroutine adds under b.mu, so nothing is queued after it.
func (l *lane) spill(why string) {
	b := &l.bl
	b.mu.Lock()
	p := l.cur.Load()
	if b.on || p == nil || p.sched.special() {
		b.mu.Unlock()
		return
	}
	b.on, b.short = true, false
	its, inFlight := p.sched.spillQueued()
	sortByPosition(its)
	b.buf = append(its, b.buf...)
	b.live += inFlight
	b.mu.Unlock()
	p.log.Warn().Str("why", why).Int("events", len(its)).Int("in_flight", inFlight).
		Msg("endpoint spills to its backlog: its events are recorded off the WAL, the slot confirms past them, " +
			"and it delivers them from the backlog in order")
}

// spillFailed takes a failed attempt of an event of the stream that was under way when the
// lane spilled (or was disabled) into the backlog; it reports false if the lane does not spill.
func (l *lane) spillFailed(p *Publisher, it *item) bool {
	if l.f.cfg.Backlog == nil || it.backlog {
		return false
	}
	b := &l.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.on || b.removed {
		return false
	}
	p.sched.done(it)
	if it.counted {
		it.counted = false
		b.live--
	}
	b.buf = append(b.buf, it.respilled())
	return true
}

// respilled is a copy of an item whose attempt failed, for the backlog: the worker that made the
// attempt still holds it as in flight until it releases it, so the lane must not queue the same
// item again meanwhile (a rejoin would: it would then be in flight twice, and a spill could take
// it out of its key's queue while its second attempt is under way).
func (it *item) respilled() *item {
	return &item{m: it.m, tx: it.tx, attempt: it.attempt, at: it.at}
}

// spillRetired keeps in the backlog what a lane being disabled holds: the events of the stream
// are spilled, those read from the backlog are forgotten (they are still in it: it is read again
// from its start when the endpoint is enabled). It returns false without a BacklogStore.
func (l *lane) spillRetired(its []*item, inFlight int) bool {
	if l.f.cfg.Backlog == nil {
		return false
	}
	b := &l.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	var spilled []*item
	for _, it := range its {
		if !it.backlog {
			spilled = append(spilled, it)
		}
	}
	sortByPosition(spilled)
	if len(spilled) == 0 && inFlight == 0 && b.entries == 0 && !b.on {
		return true // nothing to keep: enabled again, it takes the live stream at once
	}
	b.on, b.short = true, false
	b.buf = append(spilled, b.buf...)
	b.live += inFlight
	b.read, b.pages, b.inMem = BacklogPos{}, nil, 0
	return true
}

// backlogSettled counts a settled event read from the backlog against its page.
func (f *Fanout) backlogSettled(it *item) {
	pg := it.page
	b := &pg.l.bl
	b.mu.Lock()
	pg.left--
	if slices.Contains(b.pages, pg) {
		b.inMem--
	}
	b.mu.Unlock()
}

// backlogLoop writes, reads and deletes the endpoints' backlogs and decides which endpoint
// spills and which rejoins, until ctx ends.
func (f *Fanout) backlogLoop(ctx context.Context) {
	t := time.NewTicker(backlogTick)
	defer t.Stop()
	lastCheck := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.mu.RLock()
		lanes := make([]*lane, 0, len(f.lanes))
		for _, l := range f.lanes {
			lanes = append(lanes, l)
		}
		f.mu.RUnlock()
		check := time.Since(lastCheck) >= spillCheck
		if check {
			lastCheck = time.Now()
		}
		for _, l := range lanes {
			if ctx.Err() != nil {
				return
			}
			if check {
				l.bl.mu.Lock()
				on := l.bl.on
				l.bl.mu.Unlock()
				if why := l.spillDue(time.Now()); !on && why != "" {
					l.spill(why)
				}
			}
			l.backlogStep(ctx)
		}
	}
}

// backlogStep writes what the lane spilled, deletes the pages it delivered, reads the next page
// when it needs one, and rejoins the stream when it caught up.
func (l *lane) backlogStep(ctx context.Context) {
	b := &l.bl
	b.mu.Lock()
	if !b.on && len(b.pages) == 0 {
		b.mu.Unlock()
		return
	}
	live := b.live
	var its []*item
	if live == 0 { // nothing is written past an attempt still under way (see writeSpilled)
		its = b.buf
		b.buf, b.writing = nil, len(its) > 0
	}
	b.mu.Unlock()
	if len(its) > 0 && !l.writeSpilled(ctx, its) {
		return
	}
	l.trim(ctx)
	if live > 0 {
		return // attempts under way when it spilled: read nothing before they are settled
	}
	b.mu.Lock()
	p := l.cur.Load()
	through := b.through()
	// a short page read everything there was up to its bound: read again once the bound moved
	need := b.on && p != nil && b.inMem < backlogLow && !(b.short && b.readTo == through)
	after := b.read
	b.mu.Unlock()
	if need {
		l.readPage(ctx, p, after, through)
	}
	l.rejoin(ctx)
}

// through is how far the lane may read its backlog now; b.mu is held. Not past what this
// process knows was written (another relay that led the slot meanwhile may have written more,
// read once resyncBacklogs has brought the endpoint's versions up to there), and not at or
// past its first version not applied yet: after a restart the stream starts again before
// entries written then, and the endpoint is what it was at the stream's position; an entry
// committed while it was paused must wait for the pause to apply, not be delivered at once.
func (b *laneBacklog) through() BacklogPos {
	t := b.written
	if b.before > 0 && b.before <= t.LSN {
		t = BacklogPos{LSN: b.before - 1, Idx: math.MaxInt32}
	}
	return t
}

// writeSpilled writes spilled events into the backlog and then settles them; it reports false
// if ctx ended first (they stay unconfirmed, and the stream sends them again).
//
// backlogStep calls it only once no attempt that was under way when the lane spilled (live) is
// left. Such an attempt's event comes before the events spilled after it, and a relay that
// dies before the attempt settles must not leave a backlog whose entries skip that event: the
// next leader reads the backlog at once, while its stream sends the event again only later, so
// it would deliver the later events first and then write the earlier one behind what it read
// (an endpoints torture run found this after a failover). Holding them costs the slot nothing,
// as it cannot confirm past the unsettled attempt anyway; the lane keeps at most a request
// timeout's worth of events in memory meanwhile.
func (l *lane) writeSpilled(ctx context.Context, its []*item) bool {
	f := l.f
	sortByPosition(its)
	es := make([]BacklogEntry, len(its))
	f.fanMu.Lock()
	for i, it := range its {
		es[i] = BacklogEntry{Pos: position(it.m, it.tx), EventID: it.m.ID, Attempts: it.attempt, Mark: f.fan[it.m] == nil}
	}
	f.fanMu.Unlock()
	if !f.durably(ctx, "record events in an endpoint's backlog", func(ctx context.Context) error {
		return f.cfg.Backlog.Spill(ctx, l.id, es)
	}) {
		return false
	}
	b := &l.bl
	b.mu.Lock()
	b.writing = false
	if last := es[len(es)-1].Pos; b.written.less(last) {
		b.written = last
	}
	b.entries += int64(len(es))
	removed := b.removed
	b.mu.Unlock()
	if removed { // removed while this was written: forget it again
		_ = f.durably(ctx, "drop a removed endpoint's backlog", func(ctx context.Context) error { return f.cfg.Backlog.Drop(ctx, l.id) })
	}
	for _, it := range its {
		f.settled(nil, it)
	}
	f.m.EventsSpilled.Add(float64(len(its)))
	return true
}

// readPage reads the next page of the backlog into the lane's queues.
func (l *lane) readPage(ctx context.Context, p *Publisher, after, through BacklogPos) {
	f := l.f
	var evs []BacklogEvent
	if !f.durably(ctx, "read an endpoint's backlog", func(ctx context.Context) (err error) {
		evs, err = f.cfg.Backlog.Page(ctx, l.id, after, through, backlogPageSize)
		return err
	}) {
		return
	}
	b := &l.bl
	b.mu.Lock()
	if b.read != after || l.cur.Load() != p { // disabled meanwhile: read again from its start later
		b.mu.Unlock()
		return
	}
	short := len(evs) < backlogPageSize
	if n := b.visible(evs, time.Now()); n < len(evs) {
		evs, short = evs[:n], false // read again from the entry whose event was not found
	}
	b.short, b.readTo = short, through
	if len(evs) == 0 {
		b.mu.Unlock()
		return
	}
	pg := &backlogPage{l: l, high: evs[len(evs)-1].Pos}
	b.read = pg.high
	b.pages = append(b.pages, pg)
	var its []*item
	now := time.Now()
	var tx *cdc.Tx
	for _, e := range evs {
		if e.Message == nil {
			p.log.Error().Str("event_id", e.EventID).Msg("an event of the endpoint's backlog is no longer in outbox_events " +
				"(deleted by hand?); it cannot be delivered and is skipped")
			continue
		}
		e.Message.Sequence = envelope.Sequence(uint64(e.Pos.LSN), e.Pos.Idx)
		if tx == nil || tx.CommitLSN != e.Pos.LSN {
			tx = &cdc.Tx{CommitLSN: e.Pos.LSN} // for the log lines; it settles against its page, not the stream
		}
		its = append(its, &item{m: e.Message, tx: tx, attempt: e.Attempts, at: now, backlog: true, mark: e.Mark, page: pg})
	}
	pg.left = len(its)
	b.inMem += len(its)
	b.mu.Unlock()
	var parked []*item
	for _, it := range its {
		if !p.sched.add(it) {
			parked = append(parked, it)
		}
	}
	p.settleParked(ctx, parked)
}

// visible returns how many entries of a page read at now to take: those before the first whose
// event was not found (Message nil). The stream can hand over a transaction a moment before its
// commit is visible to other sessions (longer on a loaded server), and an entry spilled from it
// at once can be read in that moment: its event is read again until it shows, not skipped as
// lost. Only when the page's first entry has not been found for backlogInvisible is it taken
// (readPage skips it as deleted), with the entries not found right after it. b.mu is held.
func (b *laneBacklog) visible(evs []BacklogEvent, now time.Time) int {
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

// trim deletes the pages read whose events are all settled, oldest first.
func (l *lane) trim(ctx context.Context) {
	b := &l.bl
	b.mu.Lock()
	n := 0
	var upTo BacklogPos
	for n < len(b.pages) && b.pages[n].left <= 0 {
		upTo = b.pages[n].high
		n++
	}
	b.mu.Unlock()
	if n == 0 {
		return
	}
	var gone int64
	if !l.f.durably(ctx, "delete delivered entries of an endpoint's backlog", func(ctx context.Context) (err error) {
		gone, err = l.f.cfg.Backlog.Trim(ctx, l.id, upTo)
		return err
	}) {
		return
	}
	b.mu.Lock()
	if len(b.pages) >= n && b.pages[n-1].high == upTo { // not read again from the start meanwhile
		b.pages = b.pages[n:]
	}
	b.entries = max(b.entries-gone, 0)
	b.mu.Unlock()
}

// rejoin makes the lane take the live stream again once it read everything written to its
// backlog and its last attempt succeeded: the events spilled and not written yet, all after
// what it read, are queued behind it.
func (l *lane) rejoin(ctx context.Context) {
	b := &l.bl
	b.mu.Lock()
	p := l.cur.Load()
	if !b.on || p == nil || b.writing || b.live > 0 || !b.short || b.read.less(b.written) {
		b.mu.Unlock()
		return
	}
	l.mu.Lock()
	failing := l.st.failures > 0 || l.st.lastSuccess.Before(l.started) // no success yet since it started
	l.mu.Unlock()
	if failing {
		b.mu.Unlock()
		return
	}
	b.on = false
	var parked []*item
	for _, it := range b.buf {
		if !p.sched.add(it) {
			parked = append(parked, it) // its aggregate was parked meanwhile: parked as a live event is
		}
	}
	n := len(b.buf)
	b.buf = nil
	b.mu.Unlock()
	p.settleParked(ctx, parked)
	p.log.Info().Int("queued", n).Msg("endpoint caught up with its backlog; it takes the live stream again")
}

// backlogState returns the entries of the lane's backlog and whether it spills.
func (l *lane) backlogState() (int64, bool) {
	b := &l.bl
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.entries + int64(len(b.buf)), b.on
}

// dropBacklog forgets the backlog of a removed lane: the events spilled and not written are
// settled without being sent, and the entries are deleted.
func (l *lane) dropBacklog(ctx context.Context) {
	if l.f.cfg.Backlog == nil {
		return
	}
	b := &l.bl
	b.mu.Lock()
	b.removed, b.on = true, false
	its := b.buf
	b.buf, b.pages, b.inMem, b.entries = nil, nil, 0, 0
	b.mu.Unlock()
	for _, it := range its {
		l.f.settled(nil, it)
	}
	_ = l.f.durably(ctx, "drop a removed endpoint's backlog", func(ctx context.Context) error { return l.f.cfg.Backlog.Drop(ctx, l.id) })
}

// boundBacklogs gives each lane the commit LSN of its first version still pending (see
// through); called from Run's goroutine whenever pending changes.
func (f *Fanout) boundBacklogs() {
	if f.cfg.Backlog == nil {
		return
	}
	first := map[string]pglogrepl.LSN{}
	for _, v := range f.pending { // in LSN order
		if _, ok := first[v.ID]; !ok {
			first[v.ID] = v.LSN
		}
	}
	for id, l := range f.lanes { // Run's goroutine writes lanes: no lock to read
		l.bl.mu.Lock()
		l.bl.before = first[id]
		l.bl.mu.Unlock()
	}
}

// resyncBacklogs makes the lanes follow the backlogs as they are now, at the start of a new
// streaming session: another relay that led the slot meanwhile may have spilled an endpoint
// this one delivers live. Such a lane spills what it holds (its backlog comes first in stream
// order) and reads the backlog. It reports false if ctx ended first.
func (f *Fanout) resyncBacklogs(ctx context.Context) bool {
	if f.cfg.Backlog == nil {
		return true
	}
	var sizes map[string]BacklogSize
	if !f.durably(ctx, "read the endpoints' backlogs", func(ctx context.Context) (err error) {
		sizes, err = f.cfg.Backlog.Sizes(ctx)
		return err
	}) {
		return false
	}
	for id, sz := range sizes {
		l := f.lanes[id] // Run's goroutine writes lanes: no lock to read
		if l == nil || sz.Entries == 0 {
			continue
		}
		l.bl.mu.Lock()
		on := l.bl.on
		l.bl.mu.Unlock()
		if !on {
			l.spill("another relay spilled it while it led the slot")
		}
		b := &l.bl
		b.mu.Lock()
		if b.written.less(sz.Last) {
			b.written, b.short = sz.Last, false
		}
		if !on && l.pub == nil { // disabled: it reads the backlog from its start once enabled
			b.on = true
		}
		b.mu.Unlock()
	}
	return true
}
