package publisher

import (
	"context"
	"slices"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// Progress across a restart. The slot confirms a transaction only once every endpoint its
// events route to has settled them, so while one endpoint fails (before it spills) the slot
// stays behind what the others delivered. A relay that starts or takes over is sent everything
// after the confirmed position again; sent to every endpoint, that would be a flood of
// duplicates to every partner for one partner's incident. Two records say what the previous
// leader delivered: the status marks (an event delivered to every endpoint it routes to is
// done) and the delivery log (each delivery, per endpoint: store.DeliveryHistory). The engine
// looks both up for the transactions the stream sends again (cdc.Tx.Resent), a batch at a
// time, and routes each event only to the endpoints that do not have it (queueEvent). The log
// is asked too by a lane reading its backlog (readPage: entries delivered but not deleted before
// a restart, or read again after another relay led), by a backfill page (backfillPage) and by a
// replay of parked aggregates that a previous leader carried out (replayAggregate); a relay that
// streams again after another led asks about what it still holds (recheckHeld); and a streamed
// event sent again at or before the last entry of its endpoint's backlog is settled there
// (settledInBacklog).
//
// The records are written in batches, off the delivery path, so what the previous leader
// delivered in its last moments (the attempts under way when it died, and the deliveries its
// delivery log had not written yet: up to its Interval, 1s) is sent again. A lookup that fails
// sends everything again: duplicates are allowed, loss is not. Skipping never loses an event:
// a mark or a delivery-log entry is written only after the endpoint's 2xx.

// Resume skips events that another session delivered but had not confirmed when it ended: a
// killed relay, the leader before a failover, or this process before the server's crash restart
// moved the slot back. The server resends everything after the slot's confirmed position; the
// status marks say which of those rows every endpoint got, the delivery log which endpoints got
// them. Only transactions committed before their streaming session started (cdc.Tx.Resent) are
// checked, and each session stops checking once Batch events in a row were found delivered
// nowhere (the previous leader did not get that far). It reduces duplicates; correctness never
// depends on it (marks and the log are written only after delivery).
type Resume struct {
	// Delivered returns which of ids are marked delivered. Nil: the marks are not looked up.
	Delivered func(ctx context.Context, ids []string) (map[string]bool, error)
	// History, if set, says which endpoints each event was delivered to (the delivery log;
	// pgstore.DeliveryLog implements it): an event some of its endpoints have is sent only to
	// the others, and a backlog's entries delivered already are skipped. Nil: only the marks
	// are looked up, and an event not marked goes to every endpoint again.
	History store.DeliveryHistory
	// Batch is the most events checked per query. If zero, 1000.
	Batch int
}

// prior is what a lookup found an earlier process delivered of some resent transactions'
// events: marked done (delivered everywhere it routes), or delivered to some endpoints.
type prior struct {
	marked map[string]bool
	to     map[string][]string // sorted endpoint ids, by event id
}

// done reports whether event id is marked delivered (p may be nil: nothing looked up).
func (p *prior) done(id string) bool { return p != nil && p.marked[id] }

// endpoints returns the endpoints event id was delivered to, sorted.
func (p *prior) endpoints(id string) []string {
	if p == nil {
		return nil
	}
	return p.to[id]
}

// found reports whether the lookup found event id delivered anywhere.
func (p *prior) found(id string) bool { return p.done(id) || len(p.endpoints(id)) > 0 }

// withoutPrior returns lanes (routeTo's) without those whose endpoint had m (sorted ids); m is
// then delivered, marked and settled by the others alone, or at once when none is left (send).
func (e *engine) withoutPrior(m *envelope.Message, lanes []*lane, had []string) []*lane {
	out := lanes[:0]
	for _, l := range lanes {
		if _, ok := slices.BinarySearch(had, l.id); ok {
			e.tracef("skip %s to %q: delivered", m.ID, l.id)
			continue
		}
		out = append(out, l)
	}
	if len(out) == 0 {
		e.m.EventsSkipped.Inc()
	}
	return out
}

// resumeActive reports whether tx may hold events an earlier process delivered.
func (e *engine) resumeActive(tx *cdc.Tx) bool {
	return e.in.resume && (tx.Resent && tx.Session != e.in.doneSession || e.in.recheck[tx])
}

// resumeBatch is how many events a lookup asks about at most.
func (e *engine) resumeBatch() int {
	if n := e.cfg.resume.Batch; n > 0 {
		return n
	}
	return 1000
}

// checkResent looks up which events of the resent transactions waiting (up to the batch size)
// an earlier process delivered, and to which endpoints; the intake waits for the answer. A
// lookup that fails delivers them again: duplicates are allowed, loss is not.
func (e *engine) checkResent() {
	limit := e.resumeBatch()
	var check []*cdc.Tx
	var ids []string
	for _, tx := range e.in.txs {
		if !e.resumeActive(tx) || len(check) > 0 && len(ids) >= limit {
			break
		}
		check = append(check, tx)
		for _, m := range tx.Events {
			ids = append(ids, m.ID)
		}
	}
	if e.in.checked == nil {
		e.in.checked = map[*cdc.Tx]*prior{}
	}
	record := func(p *prior) {
		for _, tx := range check {
			e.in.checked[tx] = p
			delete(e.in.recheck, tx)
		}
	}
	if len(ids) == 0 {
		// Only control records: they say nothing about whether later transactions were
		// delivered, so the checks go on.
		record(&prior{})
		return
	}
	marked, history, pipeline := e.cfg.resume.Delivered, e.cfg.resume.History, e.cfg.pipeline
	e.in.held++
	e.do("look up what an earlier process delivered", false, func(ctx context.Context) (any, error) {
		return lookUpPrior(ctx, marked, history, pipeline, ids)
	}, func(v any, err error) {
		e.in.held--
		p, _ := v.(*prior)
		if p == nil {
			p = &prior{}
		}
		if err != nil {
			e.log.Warn().Err(err).Int("events", len(ids)).Msg("looking up what the previous process delivered failed; " +
				"the events it may have delivered are sent again (duplicates, not loss)")
		}
		record(p)
		e.countQuiet(check[len(check)-1].Session, ids, p, err == nil)
	})
}

// lookUpPrior asks the marks, then the delivery log about the events not marked. What it found
// before an error is kept.
func lookUpPrior(ctx context.Context, marked func(context.Context, []string) (map[string]bool, error),
	history store.DeliveryHistory, pipeline string, ids []string) (*prior, error) {
	p := &prior{}
	var err error
	if marked != nil {
		if p.marked, err = marked(ctx, ids); err != nil {
			return p, err
		}
	}
	if history == nil {
		return p, nil
	}
	rest := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" || p.marked[id] })
	p.to, err = history.DeliveredTo(ctx, pipeline, rest)
	return p, err
}

// countQuiet counts the events in a row of session that the lookups found delivered nowhere
// (ids in stream order), and ends the session's checks once a whole batch's worth were: the
// previous leader got no further (what it delivered lies between the slot's confirmed position
// and there). One batch finding nothing is not enough: the first transactions sent again are
// often those of the endpoint that held the slot back, which the others may not route to.
func (e *engine) countQuiet(session uint64, ids []string, p *prior, ok bool) {
	in := &e.in
	if in.quietIn != session {
		in.quietIn, in.quiet = session, 0
	}
	for _, id := range ids {
		if p.found(id) {
			in.quiet = 0
		} else {
			in.quiet++
		}
	}
	if ok && in.quiet >= e.resumeBatch() {
		in.doneSession = session
	}
	if len(p.marked)+len(p.to) > 0 {
		e.log.Info().Int("events", len(ids)).Int("delivered_everywhere", len(p.marked)).Int("delivered_somewhere", len(p.to)).
			Msg("events sent again after a restart or takeover were delivered already by the previous process: " +
				"each goes only to the endpoints that do not have it")
	}
}

// history is the delivery log read back, nil if the engine has none.
func (e *engine) history() store.DeliveryHistory {
	if e.cfg.resume == nil {
		return nil
	}
	return e.cfg.resume.History
}

// backlogRead is a page read from a lane's backlog, and which of its events the delivery log
// says the endpoint has.
type backlogRead struct {
	evs []store.BacklogEvent
	had map[string]bool
}

// deliveredHere returns which events of evs the delivery log says endpoint id of pipeline has:
// entries delivered before a restart and not deleted yet, or read again once another relay led
// the slot (not a replay since a time's rows: those are sent again on purpose, readPage). A
// lookup that fails finds none (they are sent again).
func deliveredHere(ctx context.Context, history store.DeliveryHistory, pipeline, id string, evs []store.BacklogEvent) map[string]bool {
	if history == nil || len(evs) == 0 {
		return nil
	}
	ids := make([]string, 0, len(evs))
	for _, ev := range evs {
		if ev.Message != nil && !ev.Pos.Replayed() { // a replay --since's rows are re-sent on purpose
			ids = append(ids, ev.EventID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	to, err := history.DeliveredTo(ctx, pipeline, ids, id)
	if err != nil {
		return nil
	}
	had := map[string]bool{}
	for ev, eps := range to {
		if _, ok := slices.BinarySearch(eps, id); ok {
			had[ev] = true
		}
	}
	return had
}

// skipRead passes over an entry read from l's backlog that the endpoint has already: it is not
// sent, and its page is deleted without it. An entry of an event routed to this endpoint alone
// marks its row, as its delivery did (that mark may have been lost with the process).
func (e *engine) skipRead(l *lane, ev store.BacklogEvent) {
	e.tracef("skip read %s %s: delivered", l.name, ev.EventID)
	e.m.EventsSkipped.Inc()
	if ev.Mark && e.marks != nil {
		e.marks.Done(ev.EventID, ev.Message.Sequence, max(ev.Attempts-1, 0))
	}
}

// recheckHeld returns then preceded, in a new streaming session of a relay that streamed
// before, by a look at what another relay delivered meanwhile of what this one holds: while it
// was cut off from the slot (or stood by), another relay may have led and delivered to some
// endpoints the events that a failing endpoint kept the slot from confirming. The streamed
// events its lanes hold (not in flight) that the delivery log says their endpoint has are
// settled unsent; the events of the transaction being queued that are left are looked up with
// them, and the transactions it has not queued yet again (checkResent).
func (e *engine) recheckHeld(then func()) func() {
	history := e.history()
	if history == nil {
		return then
	}
	return func() {
		in := &e.in
		for _, tx := range in.txs {
			if in.recheck == nil {
				in.recheck = map[*cdc.Tx]bool{}
			}
			in.recheck[tx] = true
			delete(in.checked, tx)
		}
		var ids []string
		cur := in.cur // the transaction being queued: its events left are looked up again too
		if cur != nil {
			for _, m := range cur.Events[in.next:] {
				ids = append(ids, m.ID)
			}
		}
		for _, l := range e.lanes {
			for _, q := range l.keys {
				for i := range q.len() {
					if it := q.at(i); it.kind == kindLive || it.kind == kindReplay {
						ids = append(ids, it.m.ID)
					}
				}
			}
			for _, it := range l.bl.buf {
				ids = append(ids, it.m.ID)
			}
		}
		if len(ids) == 0 {
			then()
			return
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		pipeline := e.cfg.pipeline
		in.held++
		e.do("look up what another relay delivered meanwhile", false, func(ctx context.Context) (any, error) {
			return history.DeliveredTo(ctx, pipeline, ids)
		}, func(v any, err error) {
			in.held--
			if to, _ := v.(map[string][]string); err == nil {
				e.settleHeld(to)
				if cur != nil && in.cur == cur {
					p := &prior{to: to}
					if old := in.checked[cur]; old != nil {
						p.marked = old.marked
					}
					if in.checked == nil {
						in.checked = map[*cdc.Tx]*prior{}
					}
					in.checked[cur] = p
				}
			}
			then()
		})
	}
}

// settleHeld settles unsent the streamed and replayed events the lanes hold that to says their
// endpoint has; one in flight is settled if its attempt fails (dropHad).
func (e *engine) settleHeld(to map[string][]string) {
	n := 0
	for _, l := range e.lanes {
		has := func(it *item) bool {
			_, ok := slices.BinarySearch(to[it.m.ID], l.id)
			return (it.kind == kindLive || it.kind == kindReplay) && ok
		}
		had := func(it *item) bool { return !it.inflight && has(it) }
		for _, it := range l.queuedItems() {
			if it.inflight && has(it) {
				it.had = true // settled if its attempt fails (dropHad)
			}
		}
		var its []*item
		if slices.ContainsFunc(l.queuedItems(), had) {
			its = l.takeOut(func(it *item) bool { return !had(it) })
		}
		buf := l.bl.buf[:0]
		for _, it := range l.bl.buf {
			if had(it) {
				its = append(its, it)
			} else {
				buf = append(buf, it)
			}
		}
		clear(l.bl.buf[len(buf):])
		l.bl.buf = buf
		for _, it := range its {
			e.tracef("skip held %s to %q: delivered", it.m.ID, l.id)
			e.settleHad(l, it)
			n++
		}
	}
	if n > 0 {
		e.log.Info().Int("deliveries", n).Msg("another relay led the slot while this one was cut off from it, and delivered " +
			"events this one held to some of their endpoints; they are not sent to those again")
	}
}

// settleHad settles unsent an event another relay delivered to l's endpoint: its mark, when
// every lane it went to has it (a replayed one keeps its record, as observeDelivered does).
func (e *engine) settleHad(l *lane, it *item) {
	if c := e.fan[it.m]; c != nil {
		c.delivered++
	} else if e.marks != nil && it.kind == kindLive {
		e.marks.Done(it.m.ID, it.m.Sequence, it.attempt)
	}
	e.settle(l, it)
}

// ofStream reports whether it came with a transaction of the stream: a streamed event, or one a
// replay request queued (it belongs to the request's transaction).
func ofStream(it *item) bool {
	return it.kind == kindLive || it.kind == kindReplay || it.kind == kindSince
}

// dropHad settles, instead of retrying them, the events of l whose failed attempt b was in
// flight when this relay learned that another relay had settled them while it led: the slot
// confirmed past their transaction (dropConfirmed leaves what is under way to finish), or the
// delivery log says their endpoint has them (recheckHeld). It reports whether it did; the
// other events of the lane are queued again, their attempts counted.
func (e *engine) dropHad(l *lane, b *batch) bool {
	drop := func(it *item) bool { return it.had || ofStream(it) && e.settledElsewhere(it.tx) }
	if !slices.ContainsFunc(b.items, drop) {
		return false
	}
	for _, it := range l.takeOut(func(it *item) bool { return !drop(it) }) {
		e.tracef("skip failed %s to %q: settled by another relay", it.m.ID, l.id)
		if it.had {
			e.settleHad(l, it)
		} else {
			e.settle(l, it)
		}
	}
	return true
}

// queuedItems returns the events queued in l's keys.
func (l *lane) queuedItems() []*item {
	var its []*item
	for _, q := range l.keys {
		for i := range q.len() {
			its = append(its, q.at(i))
		}
	}
	return its
}

// settledInBacklog settles unsent a streamed event sent again at or before the last entry
// written to l's backlog (by this relay or the one before): whoever wrote that entry had
// settled every earlier event of the endpoint first (writeSpilled), so this one is in the
// backlog, read or to be read, or was delivered, parked or dropped by a disable. Queued, it
// would reach the endpoint twice: once from the backlog, once from the stream (after the lane
// rejoined), or written again after its entry was delivered and deleted.
func (e *engine) settledInBacklog(l *lane, it *item) bool {
	b := &l.bl
	if it.kind != kindLive || e.cfg.backlog == nil || b.written.LSN == 0 || b.written.Less(position(it.m, it.tx)) {
		return false
	}
	e.tracef("skip %s to %q: at or before its backlog's last entry %v", it.m.ID, l.id, b.written)
	e.settle(l, it)
	return true
}

// notDeliveredHere returns ms without the events the delivery log says endpoint id of pipeline
// has (all of them if the lookup fails).
func notDeliveredHere(ctx context.Context, history store.DeliveryHistory, pipeline, id string, ms []*envelope.Message) []*envelope.Message {
	if history == nil || len(ms) == 0 {
		return ms
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	to, err := history.DeliveredTo(ctx, pipeline, ids, id)
	if err != nil || len(to) == 0 {
		return ms
	}
	return slices.DeleteFunc(ms, func(m *envelope.Message) bool { return len(to[m.ID]) > 0 })
}
