package publisher

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/store"
)

// The simulation's invariants, as the torture checks them, per (event, endpoint) pair ("" is
// the one destination of a pipeline without endpoints), from the endpoint's version as of the
// commit of the event's transaction (an endpoint change applies to the whole transaction that
// commits it):
//
//   - nothing lost: every pair routed at commit (enabled or paused, and subscribed) is delivered
//     by the end, unless a later removal of the endpoint let the relay abandon it (a disable
//     keeps what the endpoint is owed until it is enabled);
//   - nothing outside its subscription: no delivery of a pair that was not routed at commit;
//   - nothing while paused: a pair routed while its endpoint was paused is not delivered before
//     the change that ended the pause was committed;
//   - order: per (endpoint, aggregate), first deliveries in commit order (duplicates allowed;
//     a shadow's event that one relay gave up and another sent again may come after later
//     ones, as documented: sentAgainAfterGiveUp);
//   - confirm: the slot's confirmed position never passes a transaction with a pair that is
//     neither delivered, nor in the endpoint's backlog, nor dead-lettered (a later removal
//     excusing it);
//   - nothing stranded: once the workload ends, the destinations recover, disabled endpoints are
//     enabled and parked aggregates replayed, everything settles: the slot confirms the whole
//     log, no lane holds an event, no backlog holds an entry, nothing is parked;
//   - recovery isolated (sim_since_test.go): the intake never waits for the deliveries of a
//     replay --since to an endpoint, which goes through the endpoint's backlog; its
//     re-sends stay within the endpoint's tenant, and every request taken is complete at the end.
//   - gauges: an endpoint whose backlog holds an event it is owed is reported as owing events,
//     as old as that one at least, and with a backlog (checkGauges);
//   - notify: the operator is told of each disable of an endpoint once (checkNotified);
//   - parked prefix: when a relay dies, what is parked (or dead-lettered) of each (endpoint,
//     aggregate) is the start of the aggregate's events routed there, but for those delivered:
//     a replay delivers it ahead of everything else of the aggregate, so a hole would send the
//     event missing from it after later ones (checkParkedPrefix).

type pairKey struct{ endpoint, id string }

// delivered records that a destination applied event id (resent: re-sent by a replay --since).
func (w *world) delivered(proc int, ep, id string, resent bool) {
	w.deliveries = append(w.deliveries, delivery{endpoint: ep, id: id, at: w.now, resent: resent, proc: proc})
	w.tracef("delivered %q %s resent %v", ep, id, resent)
	if resent {
		return
	}
	if w.got == nil {
		w.got = map[pairKey]bool{}
	}
	w.got[pairKey{ep, id}] = true
}

// position is an event's place in the stream: backfill events (no transaction) first.
func (w *world) position(ev *eventInfo) store.BacklogPos {
	if ev.tx == nil {
		return store.BacklogPos{Idx: ev.idx}
	}
	return store.BacklogPos{LSN: ev.tx.commit, Idx: ev.idx}
}

// stateAt returns endpoint id's row as of the commit of the event's transaction (nil: it did
// not exist): a change applies to every event of the transaction that commits it, written
// before or after it.
func (w *world) stateAt(id string, ev *eventInfo) *endpoint.Row {
	var row *endpoint.Row
	pos := w.position(ev)
	for _, c := range w.eps.history {
		if c.id == id && (c.commit <= pos.LSN || c.commit == 0) {
			row = c.row
		}
	}
	return row
}

// routed reports whether ev went to endpoint id at its commit.
func (w *world) routed(id string, ev *eventInfo) bool {
	if w.eps == nil {
		return id == ""
	}
	row := w.stateAt(id, ev)
	return row != nil && row.State != endpoint.Disabled && row.Subscribed(ev.m.TenantID, ev.m.EventType, ev.m.AggregateType)
}

// pausedUntil reports whether endpoint id was paused at ev's commit and, if so, when the change
// that ended the pause was committed (the far future when none did).
func (w *world) pausedUntil(id string, ev *eventInfo) (time.Time, bool) {
	if w.eps == nil {
		return time.Time{}, false
	}
	if row := w.stateAt(id, ev); row == nil || row.State != endpoint.Paused {
		return time.Time{}, false
	}
	pos := w.position(ev)
	for _, c := range w.eps.history {
		if c.id == id && c.commit > pos.LSN && (c.row == nil || c.row.State != endpoint.Paused) {
			return c.when, true
		}
	}
	return time.Unix(math.MaxInt32, 0), true
}

// excused reports whether a removal of endpoint id was committed after ev's transaction, or a
// shadow pipeline gave ev up (recorded it abandoned). A disable excuses nothing: what the
// endpoint was owed at the disable is kept and delivered once it is enabled (every endpoint is
// enabled at the end).
func (w *world) excused(id string, ev *eventInfo) bool {
	if w.eps == nil {
		// A shadow gives an event up after its last attempt and settles it at once; the
		// record of it is best effort (it never holds the slot for its own bookkeeping).
		o := w.opts
		return w.abandoned[ev.m.ID] || o.shadow && o.maxAttempts > 0 && w.tries[ev.m.ID] >= o.maxAttempts
	}
	pos := w.position(ev)
	for _, c := range w.eps.history {
		if c.id == id && c.commit > pos.LSN && c.row == nil {
			return true
		}
	}
	return false
}

// sentAgainAfterGiveUp reports whether d is a shadow pipeline's event that one relay gave up
// (abandoned after its last attempt) and another relay sent afterwards. The shadow's contract
// (docs/guides/pipelines.md, Config.Shadow) lets that one go out after later events of its
// aggregate: its abandon is recorded best effort, and a relay that reads it again (from the
// slot or the backlog, before the slot confirmed past it or its page was deleted) sends it.
// The relay that gave it up never sends it again.
func (w *world) sentAgainAfterGiveUp(d delivery) bool {
	g, ok := w.gaveUp[d.id]
	return ok && w.opts.shadow && w.eps == nil && g.proc != d.proc && !d.at.Before(g.at)
}

// endpointIDs are every endpoint that ever existed ("" without endpoints).
func (w *world) endpointIDs() []string {
	if w.eps == nil {
		return []string{""}
	}
	seen := map[string]bool{}
	var ids []string
	for _, c := range w.eps.history {
		if !seen[c.id] {
			seen[c.id] = true
			ids = append(ids, c.id)
		}
	}
	slices.Sort(ids)
	return ids
}

func laneName(id string) string {
	if id == "" {
		return simPipeline
	}
	return simPipeline + "/" + id
}

// safe reports whether a pair's event is delivered or kept durably for the endpoint: in its
// backlog, or dead-lettered (failed or parked) for its lane.
func (w *world) safe(id string, ev *eventInfo, delivered map[pairKey]bool) bool {
	if delivered[pairKey{id, ev.m.ID}] {
		return true
	}
	ctx := context.Background()
	pos := w.position(ev)
	after := store.BacklogPos{LSN: pos.LSN, Idx: pos.Idx - 1} // (a replay --since's entries sort below index 0)
	if es, _ := w.db.Backlog(simPipeline).Page(ctx, id, after, pos, 1); len(es) == 1 && es[0].EventID == ev.m.ID {
		return true
	}
	ms, _ := w.db.Pipeline(laneName(id), w.eps != nil).Replayable(ctx, store.Aggregate{Type: ev.m.AggregateType, ID: ev.m.AggregateID}, 0)
	for _, m := range ms {
		if m.ID == ev.m.ID {
			return true
		}
	}
	return false
}

// confirmStep sends the leader's status update: the slot confirms what its tracker says may be,
// and every transaction passed now is checked.
func (w *world) confirmStep() {
	defer w.schedule(100*time.Millisecond, "confirm", w.confirmStep)
	p := w.leader
	if p == nil || !p.alive || !p.streaming {
		return
	}
	c := p.tr.Confirmable()
	if c <= w.slot {
		return
	}
	w.slot = c
	w.tracef("confirm %s", c)
	delivered := w.deliveredSet()
	for ; w.checked < len(w.wal) && w.wal[w.checked].end <= w.slot; w.checked++ {
		tx := w.wal[w.checked]
		for i, m := range tx.events {
			ev := &eventInfo{m: m, tx: tx, idx: i}
			for _, id := range w.endpointIDs() {
				if w.routed(id, ev) && !w.excused(id, ev) && !w.safe(id, ev, delivered) {
					w.failf("confirm: the slot confirmed %s past transaction %s whose event %s is neither delivered to %q nor "+
						"in its backlog nor dead-lettered", w.slot, tx.commit, m.ID, id)
				}
			}
		}
	}
}

func (w *world) deliveredSet() map[pairKey]bool { return w.got }

// settled reports whether everything settled after the workload ended.
func (w *world) settled() bool { return w.unsettled(false) == "" }

// pending says what is not settled yet ("" when everything is).
func (w *world) pending() string { return w.unsettled(true) }

// unsettled says what is not settled yet ("" when everything is); only whether, unless detail.
func (w *world) unsettled(detail bool) string {
	p := w.leader
	switch {
	case p == nil || !p.alive || !p.streaming:
		return "no process leads the slot"
	case len(w.wal) > 0 && w.slot < w.wal[len(w.wal)-1].end && !detail:
		return "the slot is behind"
	case len(w.wal) > 0 && w.slot < w.wal[len(w.wal)-1].end:
		return fmt.Sprintf("the slot confirmed %s of %s (tracker: %d transactions outstanding; %s)", w.slot,
			w.wal[len(w.wal)-1].end, p.tr.Outstanding(), p.e.describe())
	case !p.marks.Flushed():
		return "marks not written"
	case len(p.e.laterMarks) > 0:
		return "marks wait for the slot's confirmation"
	}
	for _, l := range p.e.lanes {
		// (A lane may still spill with nothing in its backlog: it rejoins the stream after its
		// next success, which an idle endpoint does not have.)
		if l.queued > 0 || len(l.bl.buf) > 0 {
			return fmt.Sprintf("lane %s holds %d events, %d spilled, spilling %v", l.name, l.queued, len(l.bl.buf), l.bl.on)
		}
	}
	ctx := context.Background()
	ids := []string{""}
	if w.eps != nil {
		// A removed endpoint's dead letters stay, for `outbox-relay endpoint remove` to drop; so
		// does what a relay cut off from the slot wrote to its backlog after the leader removed
		// it, until a relay starts and drops it.
		ids = w.eps.ids()
	}
	// An entry a relay wrote while cut off from the slot may stay behind the leader's back, but
	// only for an event the endpoint got anyway (the leader had it from its own stream); it is
	// delivered again once a relay starts (or streams again) and reads it.
	delivered := w.deliveredSet()
	w.stale = 0
	for _, id := range ids {
		es, _ := w.db.Backlog(simPipeline).Page(ctx, id, store.BacklogPos{}, store.BacklogPos{LSN: math.MaxUint64, Idx: math.MaxInt32}, 1<<20)
		for _, en := range es {
			if en.Pos.Replayed() {
				return fmt.Sprintf("the backlog of %q holds event %s of a replay --since, not delivered", id, en.EventID)
			}
			if !delivered[pairKey{id, en.EventID}] {
				return fmt.Sprintf("the backlog of %q holds event %s, not delivered", id, en.EventID)
			}
			w.stale++
		}
	}
	for _, id := range ids {
		if parked, _ := w.db.Pipeline(laneName(id), w.eps != nil).Parked(ctx); len(parked) > 0 {
			return fmt.Sprintf("lane %s has parked aggregates %v", laneName(id), parked)
		}
	}
	return ""
}

// checkEnd checks what was delivered once everything settled: nothing lost, nothing outside
// its subscription, first deliveries in order.
func (w *world) checkEnd() {
	delivered := w.deliveredSet()
	ids := make([]string, 0, len(w.events))
	for id := range w.events {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		ev := w.events[id]
		for _, ep := range w.endpointIDs() {
			if w.routed(ep, ev) && !w.excused(ep, ev) && !delivered[pairKey{ep, id}] {
				w.failf("lost: event %s (%s %s/%s at %v) was never delivered to %q", id, ev.m.EventType, ev.m.AggregateType,
					ev.m.AggregateID, w.position(ev), ep)
			}
		}
	}
	type aggKey struct{ endpoint, agg string }
	last := map[aggKey]store.BacklogPos{}
	lastID := map[aggKey]string{}
	first := map[pairKey]bool{}
	for _, d := range w.deliveries {
		ev := w.events[d.id]
		if d.resent || !w.routed(d.endpoint, ev) && w.recoveredAfter(d.endpoint, ev) {
			// a re-send (one of a parked aggregate is parked again, then replayed with it)
			w.checkResent(d, ev)
			continue
		}
		if !w.routed(d.endpoint, ev) {
			w.failf("outside: event %s (%s, tenant %q) delivered to %q, which it was not routed to at its commit %v",
				d.id, ev.m.EventType, ev.m.TenantID, d.endpoint, w.position(ev))
			continue
		}
		if end, paused := w.pausedUntil(d.endpoint, ev); paused && d.at.Before(end) {
			w.failf("paused: event %s (%v) delivered to %q at %s, while paused, before its resume was committed at %s",
				d.id, w.position(ev), d.endpoint, d.at.Sub(w.start), end.Sub(w.start))
		}
		if first[pairKey{d.endpoint, d.id}] {
			continue
		}
		first[pairKey{d.endpoint, d.id}] = true
		k := aggKey{d.endpoint, ev.m.AggregateType + "/" + ev.m.AggregateID}
		pos := w.position(ev)
		if prev, ok := last[k]; ok && pos.Less(prev) && w.sentAgainAfterGiveUp(d) {
			w.tracef("order: %q got event %s (%v) of %s after %s (%v): a shadow gave it up before, another relay sent it again",
				d.endpoint, d.id, pos, k.agg, lastID[k], prev)
			continue
		} else if ok && pos.Less(prev) {
			w.failf("order: %q got event %s (%v) of %s after %s (%v)", d.endpoint, d.id, pos, k.agg, lastID[k], prev)
		}
		last[k], lastID[k] = pos, d.id
	}
	w.checkSincesDone()
	if *simRows {
		w.checkRowsDone()
	}
	if len(w.fails) > 0 {
		w.tracef("fails: %s", strings.Join(w.fails, "; "))
	}
}

// describe says what the engine holds, for a failure message.
func (e *engine) describe() string {
	in := &e.in
	var b strings.Builder
	fmt.Fprintf(&b, "intake: %d waiting, held %d, until %v, %d steps, current %v; busy %d, runq %d, paused %v; now %s deadline %s",
		len(in.txs), in.held, in.until != nil, len(in.steps), in.cur != nil, e.busy, len(e.runq), e.paused,
		e.now.Format(time.StampMicro), e.deadline().Format(time.StampMicro))
	for _, l := range e.lanes {
		fmt.Fprintf(&b, "; lane %s: active %v paused %v gone %v queued %d ready %d formed %d busy %d/%d open %v spill %v buf %d live %d pages %d",
			l.name, l.active, l.paused, l.gone, l.queued, l.ready.len(), len(l.formed), l.busy, l.maxInFlight, l.health.Open(),
			l.bl.on, len(l.bl.buf), l.bl.live, len(l.bl.pages))
		fmt.Fprintf(&b, " wakeAt %s limitUntil %s inRunq %v batching %+v startable %v", l.wakeAt.Format(time.StampMicro),
			l.limitUntil.Format(time.StampMicro), l.inRunq, l.batching, l.startable())
	}
	return b.String()
}

// --- progress across a restart: no pair delivered twice but for want of knowing ---
//
// An (event, endpoint) pair that a relay delivered is not delivered again after a crash or a
// takeover, except when the relay that sends it again could not know: the first attempt was
// in flight when its process died (the answer came to nobody), its answer was lost (the
// receiver applied it, the relay saw a failure), or the delivery log had not recorded it yet
// when the re-sender looked (the log is written in batches: a process that dies loses what it
// had not written; a record written after the lookup is not seen). A replay since a time
// re-sends on purpose. Any other second delivery fails the run: the re-sender looked, or should
// have looked (its streaming session began after the record was written), and sent it anyway.

// pairLog is every pair's applied deliveries and when the delivery log first recorded one.
type pairLog struct {
	since    map[pairKey]bool // pairs a replay since a time selected (re-sent on purpose, or parked and replayed later)
	applied  map[pairKey][]pairDelivery
	recorded map[pairKey]time.Time
	lag      *rand.Rand // how long a delivery log takes to write (its own source: the seed's draws stay as they were)
}

type pairDelivery struct {
	dead  bool // its process was dead when the answer came: the attempt was in flight when it died
	known bool // a 2xx to a live process: it learned of it
}

func (w *world) lagRand() *rand.Rand {
	if w.pairs.lag == nil {
		w.pairs.lag = rand.New(rand.NewPCG(w.seed, 38))
	}
	return w.pairs.lag
}

// dupCounts counts the pairs delivered again, by what excused them.
type dupCounts struct {
	inFlight   int // the earlier attempt was in flight when its process died
	lostAnswer int // the earlier attempt was applied, its answer lost (a failure to the relay)
	unrecorded int // delivered, but its process died before its delivery log wrote it
	late       int // recorded after the process that sent it again looked, or began its session
	since      int // re-sent by a replay since a time
	failed     int // the process that sent it again could not look it up (the store refused)
}

func (d *dupCounts) add(o dupCounts) {
	d.inFlight += o.inFlight
	d.lostAnswer += o.lostAnswer
	d.unrecorded += o.unrecorded
	d.late += o.late
	d.since += o.since
	d.failed += o.failed
}

func (d dupCounts) String() string {
	return fmt.Sprintf("pairs delivered again: %d in flight at a kill, %d answers lost, %d unrecorded at a kill, %d recorded "+
		"after the re-sender looked, %d replays since, %d lookups refused",
		d.inFlight, d.lostAnswer, d.unrecorded, d.late, d.since, d.failed)
}

// procSeen is what a process knew of earlier deliveries, and its delivery log.
type procSeen struct {
	log      simLog
	looked   map[pairKey][]time.Time // when it looked each pair up in the delivery log (anyEndpoint: every endpoint)
	sessions []time.Time             // when each of its streaming sessions began
	refusals []time.Time             // when a lookup of what an earlier process delivered was refused
}

// refused notes a store operation the simulated database refused.
func (s *procSeen) refused(o *op, now time.Time) {
	if strings.HasPrefix(o.what, "look up") {
		s.refusals = append(s.refusals, now)
	}
}

// sessionAt returns when the process's session at t began.
func (s *procSeen) sessionAt(t time.Time) time.Time {
	var at time.Time
	for _, b := range s.sessions {
		if !b.After(t) {
			at = b
		}
	}
	return at
}

// knewBy returns the last time up to t (an attempt's start) that the process looked event id
// up, or began the session of t: a record written before either is one it should have seen
// (what it holds from an earlier session it looks up again as the session begins).
func (s *procSeen) knewBy(ep, id string, t time.Time, kind itemKind) time.Time {
	at := s.sessionAt(t)
	looked := s.looked[pairKey{ep, id}] // a backlog's page or a replay asks about its endpoint
	if kind == kindLive || kind == kindBackfill {
		looked = s.looked[pairKey{anyEndpoint, id}] // the stream's and the backfill's events, about every endpoint
	}
	for _, l := range looked {
		if !l.After(t) && l.After(at) {
			at = l
		}
	}
	return at
}

// anyEndpoint stands for every endpoint in procSeen.looked.
const anyEndpoint = "*"

// refusedIn reports whether a lookup was refused in the session of t, up to t.
func (s *procSeen) refusedIn(t time.Time) bool {
	from := s.sessionAt(t)
	for _, r := range s.refusals {
		if !r.Before(from) && !r.After(t) {
			return true
		}
	}
	return false
}

// checkNotified checks that the operator was told of endpoint id's disables once each: a relay
// that finds the endpoint disabled already (another relay, leading or cut off from the slot, got
// there first) does not report it again.
func (w *world) checkNotified(id string) {
	if w.notified[id] > w.disables[id] {
		w.failf("notify: %d endpoint.disabled notifications for endpoint %q, which the relays disabled %d times",
			w.notified[id], id, w.disables[id])
	}
}

// checkGauges checks, every second, what the leading relay reports of each endpoint (its status,
// which `status --endpoints` and the endpoint series show) against the stores: an endpoint whose
// backlog holds an event it is still owed (neither delivered to it nor dead-lettered, nor of an
// aggregate parked for its lane: those are reported as parked) owes at least one event, counts among the endpoints with a backlog
// (endpoints_spilling), and its oldest undelivered event, when it has one and the backlog's age
// is known, is no younger than that event. It checks only what the relay can know: the endpoints whose backlog no other
// relay wrote to since this one's streaming session began (it reads the backlogs then).
func (w *world) checkGauges() {
	defer w.schedule(time.Second, "gauges", w.checkGauges)
	p := w.leader
	if p == nil || !p.alive || !p.streaming || w.eps == nil || !w.opts.backlog || !p.e.leading() {
		return
	}
	for _, l := range p.e.lanes {
		if w.foreignSpill(l.id, p) {
			continue
		}
		owed := w.firstOwed(l)
		if owed == nil {
			continue
		}
		st := p.e.status(l)
		switch {
		case st.Undelivered < 1 || !l.hasBacklog():
			w.failf("gauges: p%d reports endpoint %q owing %d events (with a backlog: %v), but its backlog holds event %s, "+
				"not delivered", p.id, l.id, st.Undelivered, l.hasBacklog(), owed.m.ID)
		case l.bl.entries > 0 && l.bl.oldest.IsZero():
			// the backlog's age is being read (at start, after another relay led, or again at
			// the next status save after a read that failed): what is in memory shows meanwhile
		case !st.OldestUndelivered.IsZero() && st.OldestUndelivered.After(owed.m.CreatedAt):
			w.failf("gauges: p%d reports endpoint %q's oldest undelivered event at %s, after event %s of its backlog (%s)",
				p.id, l.id, st.OldestUndelivered.Sub(w.start), owed.m.ID, owed.m.CreatedAt.Sub(w.start))
		}
	}
}

// foreignSpill reports whether a process other than p wrote to endpoint id's backlog since p
// last read the backlogs: when its streaming session began, or, before it took a transaction
// (leading then, with nothing of the stream to write), when it started (seed 3972: a relay cut
// off before its first transaction leads again after others wrote).
func (w *world) foreignSpill(id string, p *proc) bool {
	known := p.since
	if p.e.in.session == 0 {
		known = p.started
	}
	for q, at := range w.spilled[id] {
		if q != p.id && !at.Before(known) {
			return true
		}
	}
	return false
}

// simHistory is the delivery log read back by a process: it notes when it looked each event up.
type simHistory struct{ p *proc }

func (h simHistory) DeliveredTo(ctx context.Context, pipeline string, ids []string, endpoints ...string) (map[string][]string, error) {
	eps := endpoints
	if len(eps) == 0 {
		eps = []string{anyEndpoint}
	}
	for _, id := range ids {
		for _, ep := range eps {
			k := pairKey{ep, id}
			h.p.seen.looked[k] = append(h.p.seen.looked[k], h.p.w.now)
		}
	}
	return h.p.w.db.DeliveryHistory().DeliveredTo(ctx, pipeline, ids, endpoints...)
}

// simLog is a process's delivery log as pgstore.DeliveryLog writes it: a delivery is queued
// once the attempt's answer reaches the process, written a moment later, lost if the process
// dies first.
type simLog struct {
	w     *world
	fresh []store.DeliveryAttempt // the deliveries of the attempt being made (Send records them at once)
	dead  bool
}

func (l *simLog) Failed(a store.DeliveryAttempt) { l.w.db.DeliveryLog().Failed(a) }

func (l *simLog) Delivered(a store.DeliveryAttempt) { l.fresh = append(l.fresh, a) }

// sentAttempt is what the simulation notes of an attempt as it is made.
type sentAttempt struct {
	items []sentItem
	log   []store.DeliveryAttempt
}

type sentItem struct {
	kind          itemKind
	resent        bool      // a replay since a time's re-send read from the endpoint's backlog
	created, sent time.Time // when the engine decided to send it to the lane (the item was made), and sent it
}

func (p *proc) sent(a *attempt) *sentAttempt {
	s := &sentAttempt{log: p.seen.log.fresh}
	p.seen.log.fresh = nil
	for _, it := range a.b.items {
		s.items = append(s.items, sentItem{kind: it.kind, resent: it.resent, created: it.at, sent: p.w.now})
	}
	return s
}

// answered queues the attempt's deliveries in the process's delivery log, which writes them a
// moment later unless the process dies first.
func (p *proc) answered(s *sentAttempt) {
	if !p.alive || len(s.log) == 0 {
		return
	}
	w := p.w
	w.schedule(time.Duration(w.lagRand().IntN(300))*time.Millisecond, "delivery log", func() {
		if p.seen.log.dead {
			return
		}
		dl := w.db.DeliveryLog()
		for _, a := range s.log {
			dl.Delivered(a)
			k := pairKey{a.Endpoint, a.EventID}
			if _, ok := w.pairs.recorded[k]; !ok {
				w.pairs.recorded[k] = w.now
			}
		}
	})
}

// checkDup checks a delivery the receiver applied against the pair's earlier ones.
func (w *world) checkDup(p *proc, ep, id string, it sentItem, delivered bool) {
	if w.pairs.applied == nil {
		w.pairs.applied, w.pairs.recorded = map[pairKey][]pairDelivery{}, map[pairKey]time.Time{}
	}
	k := pairKey{ep, id}
	before := w.pairs.applied[k]
	w.pairs.applied[k] = append(before, pairDelivery{dead: !p.alive, known: delivered && p.alive})
	if len(before) == 0 {
		return
	}
	d := &w.dups
	rec, ok := w.pairs.recorded[k]
	last := before[len(before)-1]
	// A streamed event is looked up before it is queued, and again, if it is still held, when its
	// relay streams again after another led (recheckHeld): what was known as it was sent counts.
	// One read from a backlog or the backfill, or replayed, is looked up as it is read.
	at := it.created
	if it.kind == kindLive {
		at = it.sent
	}
	knew := p.seen.knewBy(ep, id, at, it.kind)
	switch {
	case it.kind == kindSince || it.resent || it.kind == kindReplay && w.pairs.since[k]:
		d.since++
	case !ok && last.dead:
		d.inFlight++
	case !ok && !last.known:
		d.lostAnswer++
	case !ok:
		d.unrecorded++
	case !rec.Before(knew):
		d.late++
	case p.seen.refusedIn(at):
		// refused as it was sent, or as it was routed: a streamed event in flight when its
		// relay streams again is not looked up then (recheckHeld), and sent again if that
		// attempt fails
		d.failed++
	default:
		w.failf("duplicate: %q got event %s again (p%d, %s item made at %s) though the delivery log recorded it at %s, "+
			"before p%d looked it up or began its session (%s)", ep, id, p.id, kindName(it.kind), it.created.Sub(w.start),
			rec.Sub(w.start), p.id, knew.Sub(w.start))
	}
}

func kindName(k itemKind) string {
	return [...]string{"live", "replay", "since", "backfill", "backlog"}[k]
}

// sinceNoted notes the events a replay since a time selects for a lane (endpoint ep): sent on
// purpose again, or parked behind a dead letter and sent by a replay of the aggregate later.
type sinceNoted struct {
	store.Pipeline
	w  *world
	ep string
}

func (s sinceNoted) SincePage(ctx context.Context, st store.SinceState, limit int, at pglogrepl.LSN) ([]*envelope.Message, store.SinceCursor, error) {
	ms, cur, err := s.Pipeline.SincePage(ctx, st, limit, at)
	if s.w.pairs.since == nil {
		s.w.pairs.since = map[pairKey]bool{}
	}
	for _, m := range ms {
		s.w.pairs.since[pairKey{s.ep, m.ID}] = true
	}
	return ms, cur, err
}

// firstOwed returns the first event of lane l's backlog (not a replay's re-send) that is neither delivered to it nor
// dead-lettered or parked (or being parked: its aggregate is parked) for it (nil: none).
// Parked events are reported as parked aggregates, not as undelivered.
func (w *world) firstOwed(l *lane) *eventInfo {
	id := l.id
	ctx := context.Background()
	max := store.BacklogPos{LSN: math.MaxUint64, Idx: math.MaxInt32}
	after := store.BacklogPos{}
	for {
		page, _ := w.db.Backlog(simPipeline).Page(ctx, id, after, max, 50)
		for _, en := range page {
			ev := w.events[en.EventID]
			if en.Pos.Idx < 0 {
				continue // written by a replay --since (store.ReplayIdx): a re-send, not owed
			}
			if ev != nil && !w.got[pairKey{id, en.EventID}] && !w.deadLettered(id, ev) &&
				!l.parked[cdc.Aggregate{Type: ev.m.AggregateType, ID: ev.m.AggregateID}] {
				return ev
			}
		}
		if len(page) < 50 {
			return nil
		}
		after = page[len(page)-1].Pos
	}
}

// deadLettered reports whether ev is failed or parked in endpoint id's lane.
func (w *world) deadLettered(id string, ev *eventInfo) bool {
	ms, _ := w.db.Pipeline(laneName(id), true).Replayable(context.Background(),
		store.Aggregate{Type: ev.m.AggregateType, ID: ev.m.AggregateID}, 0)
	for _, m := range ms {
		if m.ID == ev.m.ID {
			return true
		}
	}
	return false
}

// checkParkedPrefix checks, when a relay dies, that no event of an (endpoint, aggregate) is
// missing from what is parked of it while a later one is parked: an event routed to the
// endpoint before the last one parked is parked too, or delivered, or excused.
func (w *world) checkParkedPrefix() {
	ctx := context.Background()
	var evs []*eventInfo
	for _, ev := range w.events {
		evs = append(evs, ev)
	}
	slices.SortFunc(evs, func(a, b *eventInfo) int {
		pa, pb := w.position(a), w.position(b)
		return cmp.Or(cmp.Compare(pa.LSN, pb.LSN), cmp.Compare(pa.Idx, pb.Idx))
	})
	for _, id := range w.endpointIDs() {
		st := w.db.Pipeline(laneName(id), w.eps != nil)
		for _, agg := range w.simAggregates() {
			ms, _ := st.Replayable(ctx, agg, 0)
			if len(ms) == 0 {
				continue
			}
			in := map[string]bool{}
			var last store.BacklogPos
			for _, m := range ms {
				in[m.ID] = true
				if ev := w.events[m.ID]; ev != nil && last.Less(w.position(ev)) {
					last = w.position(ev)
				}
			}
			for _, ev := range evs {
				if !w.position(ev).Less(last) {
					break
				}
				if ev.m.AggregateType != agg.Type || ev.m.AggregateID != agg.ID || in[ev.m.ID] || w.got[pairKey{id, ev.m.ID}] || !w.routed(id, ev) || w.excused(id, ev) {
					continue
				}
				w.failf("parked: %q has events of %s/%s parked up to %v, but not %s (%v), neither delivered nor parked",
					id, agg.Type, agg.ID, last, ev.m.ID, w.position(ev))
				return
			}
		}
	}
}

// simAggregates are the aggregates the workload writes to.
func (w *world) simAggregates() []store.Aggregate {
	var out []store.Aggregate
	for _, typ := range []string{"order", "invoice"} {
		for _, id := range w.aggs {
			out = append(out, store.Aggregate{Type: typ, ID: id})
		}
	}
	return out
}

// checkRowsDone checks, with -sim.rows, that no row is left pending that no endpoint owes
// (issue 38 point 2: a removal strands none): once everything settled, every row is marked, but
// one an endpoint's backlog still names (a stale entry, delivered again later) and one whose
// last delivery (or, delivered nowhere, its commit) came before a process was killed or cut off
// from the slot: the marks are advisory, and those a process held die with it. It found the
// rows a removal dropped with the backlog (seed 126 without dropStored's marks). It is off by
// default: seeds 305 and 689 (the first ones) still leave rows pending by another cause, entries
// a relay writes to a spilling endpoint's backlog behind what it has read (events re-sent by the
// slot that another process delivered), trimmed unsent, so that no process marks their rows.
func (w *world) checkRowsDone() {
	last := map[string]time.Time{}
	for _, d := range w.deliveries {
		if d.at.After(last[d.id]) {
			last[d.id] = d.at
		}
	}
	// A stale entry of a backlog (unsettled) is still owed: it is delivered again, then marked.
	owed := map[string]bool{}
	if w.eps != nil {
		for _, ep := range w.eps.ids() {
			es, _ := w.db.Backlog(simPipeline).Page(context.Background(), ep, store.BacklogPos{},
				store.BacklogPos{LSN: math.MaxUint64, Idx: math.MaxInt32}, 1<<20)
			for _, en := range es {
				owed[en.EventID] = true
			}
		}
	}
	ids := make([]string, 0, len(w.events))
	for id := range w.events {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	left := 0
	for _, id := range ids {
		if w.db.Status(id) != "pending" || owed[id] {
			continue
		}
		ev := w.events[id]
		at, ok := last[id]
		if !ok {
			at = ev.tx.at
		}
		if len(w.losses) > 0 && !w.losses[len(w.losses)-1].Before(at) {
			continue // a process died (or was cut off) since: its marks may be lost
		}
		if left++; left <= 3 {
			w.failf("pending: the row of event %s (%s %s/%s at %v), last delivered or committed at %s, is left pending with no "+
				"process lost since", id, ev.m.EventType, ev.m.AggregateType, ev.m.AggregateID, w.position(ev), at.Sub(w.start))
		}
	}
	if left > 3 {
		w.failf("pending: %d more rows left pending with no process lost since", left-3)
	}
}
