package publisher

import (
	"cmp"
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/store"
)

// endpointState is what a pipeline with endpoints adds: the versions of the endpoints, applied
// each at its place in the stream, and the routing of events to them.
//
//   - Routing. Each event goes to every endpoint that is not disabled and whose subscription
//     matches it (tenant, event-type patterns, aggregate types), as the endpoints stood when the
//     event's transaction committed: changes of outbox_endpoints reach the stream as
//     transactional logical messages (the table's trigger), each applied in commit order, before
//     the first event of its own transaction (controlsInOrder: a change applies to the whole
//     transaction that commits it), and recorded in the versions log (store.Endpoints), from
//     which a relay that starts or takes over knows the endpoints as of every transaction it is
//     sent again.
//   - Lanes. Each endpoint is a lane of its own, named "<pipeline>/<endpoint id>", with its own
//     destination (its URL, secrets, scheme and format), in-flight cap, rate limit, batching,
//     dead letters and parked aggregates. The lanes share the engine's workers.
//   - Confirmation. Each (event, endpoint) delivery settles against the event's transaction, so
//     the slot confirms a transaction once every endpoint its events route to has delivered them
//     or recorded them durably (parked, dead-lettered, abandoned, in its backlog).
type endpointState struct {
	e       *engine
	pending []store.EndpointVersion // loaded, not applied yet, in LSN order
	// doomed are the endpoints that a pending version disables or removes (findDoomed).
	doomed map[string]bool
	// parked and backlogs are the endpoints' parked aggregates and backlogs read at start, for
	// the lanes that start then (a lane started later reads its own parked aggregates).
	parked   map[string][]cdc.Aggregate
	backlogs map[string]store.BacklogSize
	route    router
	// first is each endpoint's first version not applied yet, as boundBacklogs last found it:
	// what a lane made meanwhile bounds its backlog reads by.
	first map[string]pglogrepl.LSN
}

// router indexes the lanes that may receive events by tenant, so that routing an event looks
// at the endpoints of its tenant and those without one, not at every endpoint. It is rebuilt
// after a change (rare), before the next event is routed.
type router struct {
	dirty    bool
	built    bool
	any      []*lane            // endpoints without a tenant: every tenant's events
	byTenant map[string][]*lane // endpoints of one tenant
}

// routeTo returns the lanes m goes to.
func (e *engine) routeTo(m *envelope.Message) []*lane {
	if e.ep == nil {
		return e.routed[:1]
	}
	s := e.ep
	r := &s.route
	if r.dirty || !r.built {
		r.dirty, r.built = false, true
		r.any, r.byTenant = nil, map[string][]*lane{}
		for _, l := range e.lanes {
			switch {
			case !l.active:
			case l.row.TenantID == "":
				r.any = append(r.any, l)
			default:
				r.byTenant[l.row.TenantID] = append(r.byTenant[l.row.TenantID], l)
			}
		}
	}
	dst := e.routed[:0]
	match := func(ls []*lane) {
		for _, l := range ls {
			if l.row.Subscribed(m.TenantID, m.EventType, m.AggregateType) && !s.doomed[l.id] {
				dst = append(dst, l)
			}
		}
	}
	match(r.any)
	if m.TenantID != "" {
		match(r.byTenant[m.TenantID])
	}
	e.routed = dst
	return dst
}

// load reads the versions log (bootstrapping it from the table when the pipeline has none) and
// applies the versions of its bootstrap, the endpoints as they were when the log began; it
// reads the endpoints' parked aggregates, backlogs and the failing since of their status. The
// intake takes nothing from the stream before it is done.
func (s *endpointState) load() {
	e := s.e
	ep := e.cfg.endpoints
	type versions struct {
		marker pglogrepl.LSN
		boot   bool
		vs     []store.EndpointVersion
	}
	e.hold("read the endpoint versions", func(ctx context.Context) (any, error) {
		marker, boot, vs, err := ep.Versions(ctx)
		return versions{marker, boot, vs}, err
	}, func(v any) {
		got := v.(versions)
		if !got.boot {
			e.holdWrite("record the endpoints", ep.Bootstrap, func() { e.first(s.load) })
			return
		}
		s.pending = sortVersions(got.vs)
		s.boundBacklogs() // before any lane reads its backlog: by its first version, whatever applies it
		e.hold("read the endpoints' parked aggregates", func(ctx context.Context) (any, error) { return ep.Parked(ctx) },
			func(v any) {
				s.parked = map[string][]cdc.Aggregate{}
				for id, aggs := range v.(map[string][]store.Aggregate) {
					for _, a := range aggs {
						s.parked[id] = append(s.parked[id], cdc.Aggregate(a))
					}
				}
			})
		if bl := e.cfg.backlog; bl != nil {
			e.hold("read the endpoints' backlogs", func(ctx context.Context) (any, error) { return bl.Sizes(ctx) },
				func(v any) { s.backlogs = v.(map[string]store.BacklogSize) })
		}
		// findDoomed bounds each lane's backlog by its versions still pending, also when none
		// is applied here (applyPending then does nothing): a backlog written while the
		// endpoint was paused waits for that pause, met again in the stream, and its resume.
		e.first(func() { s.applyPending(got.marker + 1) }, s.findDoomed, s.loaded)
	})
}

// loaded finishes the start: the lanes of the endpoints the log begins with exist now.
func (s *endpointState) loaded() {
	e := s.e
	s.parked = nil
	e.hold("read when the endpoints began failing", func(ctx context.Context) (any, error) {
		return e.cfg.endpoints.FailingSince(ctx)
	}, func(v any) {
		for id, at := range v.(map[string]time.Time) {
			if l := e.byID[id]; l != nil && l.active {
				l.health.Resume(at)
			}
		}
	})
	later := map[string]bool{} // endpoints a pending version creates: their lanes take their backlogs then
	for _, v := range s.pending {
		later[v.ID] = later[v.ID] || v.Row != nil
	}
	for _, id := range sortedIDs(s.backlogs) { // an endpoint removed with a backlog left (a removal not applied here)
		if e.byID[id] == nil && !later[id] {
			e.log.Warn().Str("endpoint", id).Int64("events", s.backlogs[id].Entries).Msg("a backlog of an endpoint that no longer exists; dropped")
			e.dropStored(id, true)
			delete(s.backlogs, id)
		}
	}
	e.refreshOldest() // the backlogs found at start: their age, before the first status save
	e.log.Info().Int("endpoints", len(e.lanes)).Int("versions", len(s.pending)).Msg("endpoints loaded")
}

func sortVersions(vs []store.EndpointVersion) []store.EndpointVersion {
	slices.SortStableFunc(vs, func(a, b store.EndpointVersion) int { return cmp.Compare(a.LSN, b.LSN) })
	return vs
}

func sortedIDs[V any](m map[string]V) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// applyPending applies the loaded versions committed before lsn, each as a step of the intake.
func (s *endpointState) applyPending(lsn pglogrepl.LSN) {
	n := 0
	for n < len(s.pending) && s.pending[n].LSN < lsn {
		n++
	}
	if n == 0 {
		return
	}
	vs := s.pending[:n:n]
	// A copy of the rest, so that the versions taken (their rows) are not kept alive by
	// pending's array once applied: at start that is every endpoint's row.
	s.pending = append([]store.EndpointVersion(nil), s.pending[n:]...)
	s.boundBacklogs(vs...) // until the steps below have applied them (findDoomed bounds again then)
	steps := make([]func(), 0, n+1)
	for _, v := range vs {
		steps = append(steps, func() { s.apply(v) })
	}
	s.e.first(append(steps, s.findDoomed)...)
}

// findDoomed notes the endpoints that the versions still pending remove. A relay that led the
// slot before this one applied those removals already, and settled without sending what it held
// for the endpoint then. An event resent from before such a removal is therefore not routed to
// that endpoint again: the removal drops it in any case. (A pending disable dooms nothing: what
// an endpoint is owed at its disable is kept in its backlog and delivered once it is enabled,
// so an event resent from before it is routed to it, and kept at the disable, unless the relay
// that applied it wrote it to the backlog already: an entry written twice is kept once.) It
// also bounds what each lane reads of its backlog by its versions still pending
// (boundBacklogs).
func (s *endpointState) findDoomed() {
	clear(s.doomed)
	for _, v := range s.pending {
		if v.Row == nil {
			if s.doomed == nil {
				s.doomed = map[string]bool{}
			}
			s.doomed[v.ID] = true
		}
	}
	s.boundBacklogs()
}

// dropOvertaken settles, unsent, what a lane holds from before this streaming session when a
// removal of its endpoint is still pending (findDoomed: events sent again from before it are not
// routed to the endpoint either): all it holds (an attempt of them under way that fails is
// settled too: the lane's generation moves on). Another relay that led meanwhile may have
// applied the removal already.
//
// What a lane kept at a disable applied here and has not written yet (it did not lead then) it
// keeps, and writes once it leads: the slot did not confirm past those events (dropConfirmed
// settles those it did), so no relay settled them, or one did by keeping them at the same
// disable, in the same backlog (an entry written twice is kept once; written again after that
// relay delivered and deleted it, it is a duplicate, after the first delivery, which was in
// order). Dropped, they would be lost: the stream sends them again, but this relay routes them
// with the endpoint as it stands, disabled, when it applied the disable already.
func (s *endpointState) dropOvertaken() {
	e := s.e
	for _, l := range e.lanes {
		var its []*item
		if s.doomed[l.id] { // a removal pending: it comes after all the lane holds
			// (a replay's events too: their request's transaction comes before the removal)
			its = append(l.takeOut(func(it *item) bool { return it.kind != kindLive && it.kind != kindReplay }), l.bl.buf...)
			l.bl.buf = nil
			l.gen++
			e.reread(l) // what it read of its backlog stays there: not settled (deleted) by a failure
		}
		for _, it := range its {
			if it.kind != kindReplay { // a dead letter or park, which the removal deals with
				e.recordAbandoned(l, it, "another relay led the slot and moved the endpoint on while this one held the event")
			}
			e.settle(l, it)
		}
		if len(its) > 0 {
			e.tracef("drop overtaken %s: %d", l.name, len(its))
			e.log.Info().Str("lane", l.name).Int("events", len(its)).
				Msg("another relay led the slot and changed the endpoint while this one was cut off from it; the events this one held for it are not sent (that relay dealt with them)")
		}
	}
}

// boundBacklogs gives each lane the commit LSN of its first version still pending, or of
// those in toApply, versions about to be applied as steps of the intake (see
// laneBacklog.through).
func (s *endpointState) boundBacklogs(toApply ...store.EndpointVersion) {
	first := map[string]pglogrepl.LSN{}
	for _, vs := range [][]store.EndpointVersion{toApply, s.pending} {
		for _, v := range vs {
			if l := s.e.byID[v.ID]; l != nil && pglogrepl.LSN(l.applied) >= v.LSN {
				continue // applied already
			}
			if f, ok := first[v.ID]; !ok || v.LSN < f {
				first[v.ID] = v.LSN
			}
		}
	}
	s.first = first
	for _, l := range s.e.lanes {
		l.bl.before = first[l.id]
	}
}

// resync makes the endpoints what the versions log says they were just before lsn, the commit
// of a new streaming session's first transaction, then calls then. Another process may have led
// the slot meanwhile (this one stood by, or lost its connection) and recorded changes this one
// never applied, which the stream does not send again when they are before the slot's position;
// the changes after lsn wait in pending for their commit, as at start. An endpoint whose version
// is the one applied already is left as it is (its queued events with it).
func (s *endpointState) resync(lsn pglogrepl.LSN, then func()) {
	e := s.e
	ep := e.cfg.endpoints
	e.hold("read the endpoint versions", func(ctx context.Context) (any, error) {
		_, _, vs, err := ep.Versions(ctx)
		return vs, err
	}, func(v any) {
		vs := sortVersions(v.([]store.EndpointVersion))
		latest := map[string]store.EndpointVersion{}
		n := 0
		for ; n < len(vs) && vs[n].LSN < lsn; n++ {
			latest[vs[n].ID] = vs[n]
		}
		// Caught up in the middle of a transaction (followSession), the lanes may have applied
		// versions of its own control records, at lsn: those stand.
		// (A copy: vs's array would keep every endpoint's row of vs[:n] alive.)
		s.pending = slices.DeleteFunc(append([]store.EndpointVersion(nil), vs[n:]...), func(v store.EndpointVersion) bool {
			l := e.byID[v.ID]
			return l != nil && pglogrepl.LSN(l.applied) >= v.LSN
		})
		s.findDoomed()
		s.dropOvertaken()
		var apply []store.EndpointVersion
		later := map[string]bool{}
		for _, v := range s.pending {
			later[v.ID] = true
		}
		for _, l := range e.lanes {
			// No version before lsn: removed meanwhile, unless a later one follows (the log
			// forgot the ones it superseded: Prune).
			if _, ok := latest[l.id]; !ok && !later[l.id] && pglogrepl.LSN(l.applied) < lsn {
				apply = append(apply, store.EndpointVersion{ID: l.id, LSN: pglogrepl.LSN(l.applied)}) // removed (and pruned) meanwhile
			}
		}
		var changed []store.EndpointVersion
		for _, id := range sortedIDs(latest) {
			v, l := latest[id], e.byID[id]
			if l == nil && v.Row == nil || l != nil && pglogrepl.LSN(l.applied) >= v.LSN {
				continue
			}
			changed = append(changed, v)
		}
		apply = append(apply, sortVersions(changed)...)
		// Until its versions are applied (the steps below), a lane reads no backlog entry
		// past the first version it has not applied (not only the latest, which the steps
		// jump to): one written while it was paused waits for that pause.
		unapplied := slices.Clone(apply)
		for _, v := range vs[:n] {
			if l := e.byID[v.ID]; l == nil || pglogrepl.LSN(l.applied) < v.LSN {
				unapplied = append(unapplied, v)
			}
		}
		s.boundBacklogs(unapplied...)
		steps := make([]func(), 0, len(apply)+2)
		for _, v := range apply {
			steps = append(steps, func() { s.apply(v) })
		}
		if len(apply) > 0 {
			e.log.Info().Int("endpoints_changed", len(apply)).Str("lsn", lsn.String()).
				Msg("endpoints brought up to date from the versions log (another relay led the slot meanwhile)")
		}
		e.first(append(steps, func() { s.boundBacklogs() }, then)...)
	})
}

// change applies an endpoint change met in the stream at tx's commit, once it is recorded in
// the versions log; if the relay stops before it is, the change stays unconfirmed.
func (s *endpointState) change(tx *cdc.Tx, ch *cdc.EndpointChange) {
	e := s.e
	var vs []store.EndpointVersion
	switch ch.Op {
	case cdc.EndpointUpsert:
		vs = []store.EndpointVersion{{ID: ch.ID, LSN: tx.CommitLSN, Row: ch.Row}}
	case cdc.EndpointDelete:
		vs = []store.EndpointVersion{{ID: ch.ID, LSN: tx.CommitLSN}}
	case cdc.EndpointTruncate:
		for _, l := range e.lanes {
			vs = append(vs, store.EndpointVersion{ID: l.id, LSN: tx.CommitLSN})
		}
	}
	// Recorded only while this relay leads the slot: one cut off from it may be behind the
	// leader, which may have pruned the versions log past this change (a removal, say) since;
	// recorded again, the change would come back to life.
	record := func(v store.EndpointVersion) {
		e.holdWrite("record an endpoint change", func(ctx context.Context) error { return e.cfg.endpoints.Record(ctx, v) },
			func() { e.first(func() { s.apply(v); s.applied(v) }) })
	}
	steps := make([]func(), 0, len(vs)+1)
	for _, v := range vs {
		steps = append(steps, func() {
			e.waitUntil(e.leading, func() {
				if !e.settledElsewhere(tx) { // else the relay that led meanwhile recorded it
					record(v)
				}
			})
		})
	}
	e.first(append(steps, func() { e.acker.AckControl(tx) })...)
}

// applied forgets v among the pending versions once the stream brought it (the versions read at
// a session's start include those of its own transactions): the bounds of the backlogs and the
// doomed endpoints follow at once, not at the next transaction.
func (s *endpointState) applied(v store.EndpointVersion) {
	n := len(s.pending)
	s.pending = slices.DeleteFunc(s.pending, func(p store.EndpointVersion) bool { return p.ID == v.ID && p.LSN == v.LSN })
	if len(s.pending) != n {
		s.findDoomed()
	}
}

// apply makes v the endpoint's state from now on in the stream.
func (s *endpointState) apply(v store.EndpointVersion) {
	e := s.e
	l := e.byID[v.ID]
	s.route.dirty = true
	e.tracef("apply %s@%s removed %v", v.ID, v.LSN, v.Row == nil)
	if v.Row == nil {
		if l == nil {
			if _, ok := s.backlogs[v.ID]; ok { // created and removed while another relay led the slot
				delete(s.backlogs, v.ID)
				e.dropStored(v.ID, true)
			}
			return
		}
		s.remove(l, v.LSN)
		return
	}
	var row endpoint.Row
	if err := json.Unmarshal(v.Row, &row); err != nil {
		e.log.Error().Err(err).Str("endpoint", v.ID).Str("lsn", v.LSN.String()).
			Msg("an endpoint change does not decode; the endpoint keeps its previous settings")
		return
	}
	if l == nil {
		l = s.newLane(v.ID)
	}
	l.applied = int64(v.LSN)
	s.update(l, row, v)
}

// newLane adds the lane of endpoint id, taking the backlog read at start if it has one.
func (s *endpointState) newLane(id string) *lane {
	e := s.e
	l := newLane(e, id, e.cfg.pipeline+"/"+id)
	l.store = e.cfg.laneStore(l.name)
	l.bl.before = s.first[id] // its reads wait for its versions still to apply (boundBacklogs)
	if b, ok := s.backlogs[id]; ok {
		delete(s.backlogs, id)
		if b.Entries > 0 {
			l.bl.on, l.bl.written, l.bl.entries = true, b.Last, b.Entries // it spilled before this start
		}
	}
	i, _ := slices.BinarySearchFunc(e.lanes, id, func(l *lane, id string) int { return strings.Compare(l.id, id) })
	e.lanes = slices.Insert(e.lanes, i, l)
	e.byID[id] = l
	return l
}

// remove retires a removed endpoint's lane: what it holds is settled without being sent, its
// backlog and status are dropped.
func (s *endpointState) remove(l *lane, lsn pglogrepl.LSN) {
	e := s.e
	l.removed = true
	e.retire(l, "the endpoint was removed", false)
	e.releaseDest(l)
	e.dropBacklog(l)
	i, _ := slices.BinarySearchFunc(e.lanes, l.id, func(l *lane, id string) int { return strings.Compare(l.id, id) })
	e.lanes = slices.Delete(e.lanes, i, i+1)
	delete(e.byID, l.id)
	e.holdWrite("forget a removed endpoint's status", func(ctx context.Context) error { return e.cfg.endpoints.ForgetStatus(ctx, l.id) }, nil)
	e.log.Info().Str("endpoint", l.id).Str("lsn", lsn.String()).Msg("endpoint removed")
}

// update makes l follow row (of version v).
func (s *endpointState) update(l *lane, row endpoint.Row, v store.EndpointVersion) {
	e := s.e
	before := l.row
	l.row = row
	if row.State == endpoint.Disabled {
		if l.active {
			reason := "the endpoint was disabled"
			if row.DisabledReason != "" {
				reason += ": " + row.DisabledReason
			}
			e.retire(l, reason, true)
			e.releaseDest(l)
			e.log.Info().Str("endpoint", l.id).Str("reason", row.DisabledReason).Msg("endpoint disabled")
		}
		return
	}
	fresh := !l.active
	if fresh {
		s.start(l)
	}
	if fresh || deliveryChanged(before, row) {
		l.raw = v.Row
		e.rebuild(l)
	}
	capped := row.MaxInFlight
	if capped <= 0 {
		capped = e.cfg.endpointMaxInFlight
	}
	l.maxInFlight = shareOf(capped, e.cfg.shard, e.cfg.shards)
	if e.cfg.shards > 1 && capped < e.cfg.shards && (fresh || before.MaxInFlight != row.MaxInFlight) {
		e.log.Warn().Str("endpoint", l.id).Int("max_in_flight", capped).Int("shards", e.cfg.shards).
			Msgf("the endpoint's max_in_flight is below the pipeline's shards: each shard keeps one request in flight, %d in all; "+
				"set its max_in_flight to %d or more (`outbox-relay endpoint update`)", e.cfg.shards, e.cfg.shards)
	}
	linger := row.Linger()
	if linger <= 0 {
		linger = NoLinger // batch_linger_ms 0: send what is ready at once
	}
	l.batching = Batch{MaxEvents: row.BatchMaxEvents, MaxBytes: row.BatchMaxBytes, Linger: linger}
	l.batching.defaults()
	l.setRateLimit(rateShare(row.RateLimit, e.cfg.shard, e.cfg.shards))
	e.refreshPause(l)
	e.wake(l)
	if fresh {
		e.log.Info().Str("endpoint", l.id).Str("state", row.State).Str("lsn", v.LSN.String()).Msg("endpoint active")
	}
}

// setRateLimit bounds the attempts l starts in any window of per to n (0: unlimited).
func (l *lane) setRateLimit(n int, per time.Duration) {
	switch {
	case n <= 0:
		l.limit = nil
	case l.limit == nil || len(l.limit.starts) != n || l.limit.per != per:
		l.limit = newWindowLimiter(n, per)
	}
}

// deliveryChanged reports whether a change needs a new destination.
func deliveryChanged(a, b endpoint.Row) bool {
	return a.URL != b.URL || a.Scheme != b.Scheme || a.Format != b.Format || a.AllowPrivateURL != b.AllowPrivateURL ||
		a.DenyPrivate != b.DenyPrivate || a.EgressProxy != b.EgressProxy || !reflect.DeepEqual(a.Secrets, b.Secrets)
}

// start makes l take events again (created, or enabled): a new run of its health, its parked
// aggregates (as read at start, or read now). It is active, taking events and reading its
// backlog, once it knows its parked aggregates: an event of one read before would go out
// ahead of the dead letter a replay re-sends.
func (s *endpointState) start(l *lane) {
	e := s.e
	l.gone = false
	l.gen++
	l.started = e.now
	l.health.Restart(e.now)
	if s.parked != nil {
		s.setParked(l, s.parked[l.id])
		l.active = true
		return
	}
	st := l.store
	e.hold("load parked aggregates", func(ctx context.Context) (any, error) { return st.Parked(ctx) }, func(v any) {
		var aggs []cdc.Aggregate
		for _, a := range v.([]store.Aggregate) {
			aggs = append(aggs, cdc.Aggregate(a))
		}
		s.setParked(l, aggs)
		l.active = true
		e.wake(l)
	})
}

func (s *endpointState) setParked(l *lane, aggs []cdc.Aggregate) {
	s.e.tracef("parked %s %v", l.name, aggs)
	for _, a := range aggs {
		l.parked[a] = true
	}
	s.e.m.ParkedAggregates.Add(float64(len(aggs)))
	if len(aggs) > 0 {
		s.e.log.Warn().Str("lane", l.name).Int("parked_aggregates", len(aggs)).Msg("aggregates are parked behind dead letters; " +
			"once the endpoint accepts them: " + s.e.replayCommand(l, "everything parked"))
	}
}

// retire stops l (its endpoint was disabled or removed); it takes nothing more until it starts
// again. With keep (a disable) and a backlog, what it holds goes to its backlog, to be delivered
// once it is enabled; else it is settled without being sent and recorded as abandoned (its dead
// letters and parked aggregates stay recorded for a replay). Attempts under way finish; one that
// fails is treated the same way.
func (e *engine) retire(l *lane, reason string, keep bool) {
	if !l.active {
		return
	}
	l.active = false
	e.tracef("retire %s keep %v", l.name, keep)
	its := l.takeOut(func(*item) bool { return false })
	e.m.ParkedAggregates.Sub(float64(len(l.parked)))
	clear(l.parked)
	clear(l.replaying)
	if keep && e.cfg.backlog != nil {
		// What a replay or a backfill re-sent is settled unsent: its aggregates stay parked in
		// the store (a replay once the endpoint is back re-sends them), a replay since a time is
		// asked again. The streamed events are kept.
		its = slices.DeleteFunc(its, func(it *item) bool {
			if it.kind == kindLive || it.kind == kindBacklog {
				return false
			}
			e.settle(l, it)
			return true
		})
		inFlight := 0
		for _, q := range l.keys {
			for i := range q.len() {
				if it := q.at(i); it.inflight && it.kind != kindBacklog && !it.counted {
					it.counted = true
					inFlight++
				}
			}
		}
		e.spillRetired(l, its, inFlight)
		if len(its) > 0 || inFlight > 0 {
			e.log.Info().Str("lane", l.name).Int("events", len(its)).Int("in_flight", inFlight).Str("reason", reason).
				Msg("the endpoint's events are kept in its backlog; `outbox-relay endpoint enable " + l.id + "` delivers them first, in order")
		}
		return
	}
	for _, it := range its {
		e.release(l, it, reason)
	}
	switch {
	case len(its) == 0:
	case !keep:
		e.log.Warn().Str("lane", l.name).Int("events", len(its)).Str("reason", reason).
			Msg("events queued for the endpoint were not sent; they are recorded as abandoned under its lane, and the " +
				"endpoint no longer exists: nothing is owed to it any more")
	default:
		e.log.Warn().Str("lane", l.name).Int("events", len(its)).Str("reason", reason).
			Msg("events queued for the endpoint were not sent (the pipeline has no backlog to keep them); they are recorded " +
				"as abandoned: after `outbox-relay endpoint enable " + l.id + "`, " + e.replayCommand(l, "the events since a time") + " re-sends them")
	}
}

// refreshPause holds l while the pipeline or the endpoint is paused, or the endpoint answered
// 410 Gone and its disable has not applied yet.
func (e *engine) refreshPause(l *lane) {
	l.paused = e.paused || l.gone || l.row.State == endpoint.Paused
	e.wake(l)
}

// rebuild builds l's destination from its row again (a change, or a secret that expired).
func (e *engine) rebuild(l *lane) {
	dest, release, at, err := e.cfg.open(l.id, l.raw)
	if err != nil {
		e.log.Error().Err(err).Str("endpoint", l.id).Msg("the endpoint cannot be delivered to; its events are retried until its row is fixed")
		dest, release, at = brokenDest{err: err}, nil, time.Time{}
	}
	old := l.release
	l.setDest(dest)
	l.release, l.rebuildAt = release, at
	if at.IsZero() {
		l.raw = nil // only a rebuild at rebuildAt reads it again; a new version brings its own
	}
	if old != nil {
		old()
	}
}

// releaseDest frees l's destination's connections.
func (e *engine) releaseDest(l *lane) {
	if l.release != nil {
		l.release()
	}
	l.release = nil
}

// setDest makes d l's destination, decorated with the metrics and the delivery log.
func (l *lane) setDest(d destination.Destination) {
	_, l.partial = d.(destination.PartialBatchDestination)
	l.dest = l.e.decorate(l, d)
}

// brokenDest fails every attempt with the reason the endpoint's destination cannot be built
// (a sealed secret without its key, a URL the guard refuses).
type brokenDest struct{ err error }

func (b brokenDest) Send(context.Context, *envelope.Message, int) destination.Result {
	return destination.Result{Err: b.err, Label: destination.ResultNetwork}
}

func (b brokenDest) SendBatch(context.Context, []*envelope.Message, int) destination.Result {
	return destination.Result{Err: b.err, Label: destination.ResultNetwork}
}
