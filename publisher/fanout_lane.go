package publisher

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// lane is one endpoint of a Fanout: its row as of the stream's position, its publisher (nil
// while the endpoint is disabled) and what its status shows.
type lane struct {
	f       *Fanout
	id      string
	name    string // pipeline/id
	row     endpoint.Row
	applied pglogrepl.LSN             // the LSN of the version row is (Run's goroutine only)
	pub     *Publisher                // nil while disabled; Run's goroutine only
	cur     atomic.Pointer[Publisher] // pub, for the other goroutines
	dest    swapDest

	mu        sync.Mutex // guards what follows, read by the status saver, the metrics and rebuild
	raw       []byte     // the row's JSON, to build its destination again
	releaseFn func()
	rebuildAt time.Time
	gone      bool   // answered 410 Gone: held until its disable arrives through the stream
	state     string // the row's state, for the metrics and the pause
	paused    string // the row's paused_reason

	pauseMu sync.Mutex // makes refreshPause's read and its Pause or Resume one step
	st      laneStats

	bl laneBacklog // fanout_spill.go
	// spillAfterRow is the row's spill_after_ms as a duration (0: the pipeline's), for the backlog loop.
	spillAfterRow atomic.Int64
	started       time.Time  // when its publisher started (Run's goroutine writes it before the backlog loop sees the lane)
	h             laneHealth // fanout_health.go
}

type laneStats struct {
	lastSuccess, lastErrorAt time.Time
	lastError                string
	failures                 int
	saved                    EndpointStatus // what was saved last
	unsaved                  bool           // the last save failed
}

func newLane(f *Fanout, id string) *lane {
	l := &lane{f: f, id: id, name: f.cfg.Pipeline + "/" + id}
	if b, ok := f.backlogs[id]; ok {
		delete(f.backlogs, id)
		if b.Entries > 0 {
			l.bl.on, l.bl.written, l.bl.entries = true, b.Last, b.Entries // it spilled before this start
		}
	}
	return l
}

// update makes the lane follow row v.
func (l *lane) update(ctx context.Context, v EndpointVersion) {
	var row endpoint.Row
	if err := json.Unmarshal(v.Row, &row); err != nil {
		l.f.log.Error().Err(err).Str("endpoint", l.id).Str("lsn", v.LSN.String()).
			Msg("an endpoint change does not decode; the endpoint keeps its previous settings")
		return
	}
	before := l.row
	l.row = row
	l.spillAfterRow.Store(int64(time.Duration(row.SpillAfterMS) * time.Millisecond))
	l.mu.Lock()
	l.state, l.paused = row.State, row.PausedReason
	l.mu.Unlock()
	if row.State == endpoint.Disabled {
		if l.pub != nil {
			reason := "the endpoint was disabled"
			if row.DisabledReason != "" {
				reason += ": " + row.DisabledReason
			}
			l.retire(ctx, reason, true)
			l.release()
			l.f.log.Info().Str("endpoint", l.id).Str("reason", row.DisabledReason).Msg("endpoint disabled")
		}
		return
	}
	fresh := l.pub == nil
	if fresh {
		l.start(ctx)
	}
	if fresh || deliveryChanged(before, row) {
		l.mu.Lock()
		l.raw = v.Row
		l.mu.Unlock()
		l.rebuild(ctx)
	}
	maxInFlight := row.MaxInFlight
	if maxInFlight <= 0 {
		maxInFlight = l.f.cfg.EndpointMaxInFlight
	}
	linger := row.Linger()
	if linger <= 0 {
		linger = NoLinger // batch_linger_ms 0: send what is ready at once
	}
	l.pub.sched.setLimits(maxInFlight, row.RateLimit, Batch{MaxEvents: row.BatchMaxEvents, MaxBytes: row.BatchMaxBytes,
		Linger: linger})
	l.refreshPause()
	if fresh {
		l.f.log.Info().Str("endpoint", l.id).Str("state", row.State).Str("lsn", v.LSN.String()).Msg("endpoint active")
	}

}

// deliveryChanged reports whether a change needs a new destination.
func deliveryChanged(a, b endpoint.Row) bool {
	return a.URL != b.URL || a.Scheme != b.Scheme || a.Format != b.Format || a.AllowPrivateURL != b.AllowPrivateURL ||
		a.DenyPrivate != b.DenyPrivate || a.EgressProxy != b.EgressProxy || !reflect.DeepEqual(a.Secrets, b.Secrets)
}

// start gives the lane a publisher, with the aggregates parked for the endpoint.
func (l *lane) start(ctx context.Context) {
	f := l.f
	cfg := Config{RetryMin: f.cfg.RetryMin, RetryMax: f.cfg.RetryMax, MaxAttempts: f.cfg.MaxAttempts,
		ShutdownTimeout: f.cfg.ShutdownTimeout, Store: f.cfg.LaneStore(l.name), LogPayloads: f.cfg.LogPayloads,
		Logger: f.log.With().Str("endpoint", l.id).Logger(), Pipeline: l.name, OnGone: GonePause}
	cfg.RecordPause = func(ctx context.Context, reason string) error {
		l.mu.Lock()
		l.gone = true
		l.mu.Unlock()
		return l.goneDisable(ctx, reason)
	}
	cfg.defaults()
	sched := newScheduler()
	sched.parkedGauge = f.m.ParkedAggregates
	// marks is only read by a replay since a time, which waits for them to be written (the
	// fan marks, see deliveredMark).
	p := &Publisher{cfg: cfg, dest: &l.dest, acker: f.acker, marks: f.marks, sched: sched, log: cfg.Logger, m: f.m, fan: f, lane: l}
	sched.lane = &laneSched{pool: f.pool, owner: p, maxInFlight: f.cfg.EndpointMaxInFlight, inflight: map[*item]bool{}}
	p.accept = func(m *envelope.Message) bool { return l.row.Subscribed(m.TenantID, m.EventType, m.AggregateType) }
	l.mu.Lock()
	l.gone = false
	l.mu.Unlock()
	if aggs, ok := f.parked[l.id]; ok || f.parked != nil {
		sched.setParked(aggs) // read for every endpoint at start (none parked: absent)
		if len(aggs) > 0 {
			p.log.Warn().Int("parked_aggregates", len(aggs)).Msg("aggregates are parked behind dead letters; " +
				"replay them to the endpoint once it accepts them")
		}
	} else {
		p.loadParked(ctx)
	}
	l.mu.Lock()
	l.started = time.Now()
	l.mu.Unlock()
	l.pub = p
	l.cur.Store(p)
}

// retire stops the lane's publisher; the lane takes nothing more until it is started again.
// With keep (a disable) and a backlog, what it holds goes to its backlog, to be delivered once
// it is enabled; else it is settled without being sent (see Publisher.retire).
func (l *lane) retire(ctx context.Context, reason string, keep bool) {
	if l.pub == nil {
		return
	}
	if keep && l.f.cfg.Backlog != nil {
		b := &l.bl
		b.mu.Lock() // an attempt that fails meanwhile waits, and then finds the lane spilling
		its, inFlight := l.pub.sched.retireCounting()
		b.mu.Unlock()
		l.spillRetired(its, inFlight)
		if n := len(its); n > 0 || inFlight > 0 {
			l.pub.log.Info().Int("events", n).Int("in_flight", inFlight).Str("reason", reason).
				Msg("the endpoint's events are kept in its backlog; `outbox-relay endpoint enable` delivers them in order")
		}
	} else {
		l.pub.retire(ctx, reason)
	}
	l.pub = nil
	l.cur.Store(nil)
}

// release frees the destination's connections.
func (l *lane) release() {
	l.mu.Lock()
	rel := l.releaseFn
	l.releaseFn = nil
	l.mu.Unlock()
	if rel != nil {
		rel()
	}
	l.dest.set(nil)
}

// rebuild builds the destination from the row again (a change, or a secret that expired).
func (l *lane) rebuild(ctx context.Context) {
	l.mu.Lock()
	raw := l.raw
	l.mu.Unlock()
	dest, rel, at, err := l.f.cfg.Open(l.id, raw)
	if err != nil {
		l.f.log.Error().Err(err).Str("endpoint", l.id).Msg("the endpoint cannot be delivered to; its events are retried until its row is fixed")
		dest, rel, at = brokenDest{err: err}, nil, time.Time{}
	}
	l.mu.Lock()
	old := l.releaseFn
	l.releaseFn, l.rebuildAt = rel, at
	l.mu.Unlock()
	l.dest.set(dest)
	if old != nil {
		old()
	}
}

func (l *lane) rebuildDue(now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.rebuildAt.IsZero() && !now.Before(l.rebuildAt)
}

// refreshPause pauses the lane while the pipeline or the endpoint is paused, or the endpoint
// answered 410 Gone.
// It is called from Run's goroutine (a change) and from the pipeline's control (Pause, Resume).
func (l *lane) refreshPause() {
	l.pauseMu.Lock()
	defer l.pauseMu.Unlock()
	p := l.cur.Load()
	if p == nil {
		return
	}
	l.mu.Lock()
	gone, state, pausedReason := l.gone, l.state, l.paused
	l.mu.Unlock()
	pp, why := l.f.Paused()
	switch {
	case gone:
		p.Pause("the endpoint answered 410 Gone; it is being disabled")
	case state == endpoint.Paused:
		reason := "the endpoint is paused"
		if pausedReason != "" {
			reason += ": " + pausedReason
		}
		p.Pause(reason)
	case pp:
		p.Pause(why)
	default:
		p.Resume()
	}
}

// observe records an attempt's outcome for the status.
// After breakerFailures failed attempts in a row it opens the endpoint's circuit breaker (p is
// the lane's publisher), and the next success closes it; each transition is a log line.
func (l *lane) observe(p *Publisher, o Result) {
	l.mu.Lock()
	if o.ok() {
		l.st.lastSuccess, l.st.failures = time.Now(), 0
	} else {
		l.st.lastError, l.st.lastErrorAt = o.Reason(), time.Now()
		l.st.failures++
	}
	failures := l.st.failures
	l.mu.Unlock()
	l.health(p, o) // fanout_health.go: auto-disable and the transitions
	switch open := p.sched.breakerOpen(); {
	case o.ok() && open:
		p.sched.closeBreaker()
		p.log.Info().Msg("endpoint recovered: its circuit breaker closed, deliveries resume at full rate")
	case !o.ok() && !open && failures >= breakerFailures:
		p.sched.openBreaker()
		p.log.Warn().Int("failures_in_row", failures).Str("last_error", o.Reason()).
			Msg("endpoint keeps failing: its circuit breaker opened, it is probed with one attempt at a time, " +
				"1s apart doubling up to a minute, until one succeeds; its events wait, their attempts not counted")
	}
}

// status returns the endpoint's status now, and whether it differs from the one saved last.
func (l *lane) status() (EndpointStatus, bool) {
	st := EndpointStatus{ID: l.id, FailingSince: l.h.failingSince()}
	if p := l.cur.Load(); p != nil {
		n, oldest := p.sched.undelivered()
		st.Undelivered, st.OldestUndelivered = int64(n), oldest
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st.LastSuccess, st.LastError, st.LastErrorAt, st.FailuresInRow = l.st.lastSuccess, l.st.lastError, l.st.lastErrorAt, l.st.failures
	changed := l.st.unsaved || st != l.st.saved
	l.st.saved, l.st.unsaved = st, false
	return st, changed
}

func (l *lane) statusUnsaved() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.st.unsaved = true
}

// swapDest is a lane's destination, replaced when its row changes while attempts go on.
type swapDest struct{ d atomic.Pointer[destBox] }

type destBox struct{ d Destination }

func (s *swapDest) set(d Destination) {
	if d == nil {
		s.d.Store(nil)
		return
	}
	s.d.Store(&destBox{d})
}

// errNoDestination is what an attempt gets in the moment an endpoint is being released.
var errNoDestination = errors.New("the endpoint's destination is being replaced")

// SendBatch implements BatchDestination (the webhook is one).
func (s *swapDest) SendBatch(ctx context.Context, ms []*envelope.Message, attempt int) Result {
	b := s.d.Load()
	if b == nil {
		return Result{Err: errNoDestination, Label: ResultNetwork}
	}
	bd, ok := b.d.(BatchDestination)
	if !ok {
		return Result{Err: errors.New("the endpoint's destination sends one event per request"), Label: ResultNetwork}
	}
	return bd.SendBatch(ctx, ms, attempt)
}

// Send implements Destination.
func (s *swapDest) Send(ctx context.Context, m *envelope.Message, attempt int) Result {
	b := s.d.Load()
	if b == nil {
		return Result{Err: errNoDestination, Label: ResultNetwork}
	}
	return b.d.Send(ctx, m, attempt)
}

// brokenDest fails every attempt with the reason the endpoint's destination cannot be built
// (a sealed secret without its key, a URL the guard refuses).
type brokenDest struct{ err error }

func (b brokenDest) Send(context.Context, *envelope.Message, int) Result {
	return Result{Err: b.err, Label: ResultNetwork}
}

func (b brokenDest) SendBatch(context.Context, []*envelope.Message, int) Result {
	return Result{Err: b.err, Label: ResultNetwork}
}

// add queues m, an event of tx routed to this publisher's endpoint, behind the earlier events
// of its aggregate; an event of a parked aggregate is parked durably instead.
func (p *Publisher) add(ctx context.Context, tx *cdc.Tx, m *envelope.Message) {
	it := &item{m: m, tx: tx, at: time.Now()}
	if !p.sched.add(it) {
		p.settleParked(ctx, []*item{it})
	}
}

// retire stops the publisher of an endpoint that was disabled or removed: every event it holds
// and is not sending is settled without being sent, and recorded as abandoned with reason (its
// dead letters and parked aggregates stay recorded for a replay); an attempt under way that
// fails is settled the same way.
func (p *Publisher) retire(ctx context.Context, reason string) {
	its := p.sched.retire()
	for _, it := range its {
		p.abandonRetired(ctx, it, reason)
	}
	if len(its) > 0 {
		p.log.Warn().Int("events", len(its)).Str("reason", reason).
			Msg("events queued for the endpoint were not sent; they are recorded as abandoned, and a replay since a time for the endpoint re-sends them")
	}
}

// abandonRetired records it as abandoned (best effort: the endpoint is gone) and settles it.
func (p *Publisher) abandonRetired(ctx context.Context, it *item, reason string) {
	if p.cfg.Store != nil {
		rec, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		if err := p.cfg.Store.Abandoned(rec, it.m, it.attempt, reason); err != nil {
			p.log.Warn().Err(err).Str("event_id", it.m.ID).Msg("recording an event not sent to a retired endpoint failed")
		}
		cancel()
	}
	p.m.EventsAbandoned.Inc()
	p.settle(it)
}

// spillFailedBatch is spillFailed for a batch whose attempt failed: all or none of it.
func (l *lane) spillFailedBatch(p *Publisher, b *batch) bool {
	if l.f.cfg.Backlog == nil {
		return false
	}
	bl := &l.bl
	bl.mu.Lock()
	defer bl.mu.Unlock()
	if !bl.on || bl.removed {
		return false
	}
	for _, it := range b.items {
		if it.backlog {
			return false
		}
	}
	p.sched.doneBatch(b)
	for _, it := range b.items {
		if it.counted {
			it.counted = false
			bl.live--
		}
		bl.buf = append(bl.buf, it.respilled())
	}
	return true
}
