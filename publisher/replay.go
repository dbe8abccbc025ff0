package publisher

import (
	"context"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// What the intake carries out besides queuing events: replays of parked aggregates, replays
// since a time, and the backfill of a new slot. Each goes at its place in the stream and holds
// the intake until it has queued (and, for pages, settled) what it stands for.

const (
	// sincePage is how many rows a replay --since holds at once.
	sincePage = 4096
	// backfillPage is how many backfill events are held at once.
	backfillPage = 4096
	// marksWait bounds how long a replay --since waits for the done-marks of what was delivered
	// before it.
	marksWait = 10 * time.Second
)

// replayLane returns the lane a replay request names, or nil (logged) when it names none here:
// another pipeline's (every slot carries every message), or an endpoint that does not exist or
// is disabled.
func (e *engine) replayLane(req *cdc.ReplayRequest) *lane {
	name := req.Pipeline
	if name == "" {
		name = DefaultPipeline
	}
	if e.ep == nil {
		if name == e.cfg.pipeline {
			return e.single
		}
		if req.SinceRequest != 0 {
			e.log.Info().Int64("replay", req.SinceRequest).Str("pipeline", req.Pipeline).Msg("replay request for another pipeline; ignored")
		}
		return nil
	}
	id, ok := strings.CutPrefix(name, e.cfg.pipeline+"/")
	l := e.byID[id]
	switch {
	case !ok && name == e.cfg.pipeline:
		e.log.Warn().Msg("replay request names the pipeline, which delivers to endpoints: a replay names one " +
			"endpoint's lane, <pipeline>/<endpoint id>; ignored")
	case !ok:
		// another pipeline's request
	case l == nil:
		e.log.Warn().Str("endpoint", id).Msg("replay request for an endpoint that does not exist (removed before the request " +
			"committed); ignored: nothing is owed to it")
	case !l.active:
		e.log.Warn().Str("endpoint", id).Msg("replay request for an endpoint that is disabled; ignored: `outbox-relay endpoint enable " +
			id + "`, then replay again")
	default:
		return l
	}
	return nil
}

// replay handles a replay request for parked aggregates of l at its place in the stream: each
// one it names gets its failed and parked events queued, in commit order, ahead of everything
// later; they belong to the request's transaction, which is not confirmed before they settle.
// Before it reads an aggregate's events, it waits for the dead letters and parks being written
// for l, so that it reads them; parks decided while it reads wait for it (parkNow).
func (e *engine) replay(l *lane, tx *cdc.Tx, aggs []cdc.Aggregate) {
	steps := make([]func(), 0, len(aggs)+1)
	for _, agg := range aggs {
		steps = append(steps, func() {
			e.waitUntil(func() bool { return l.parkOps == 0 }, func() { e.replayAggregate(l, tx, agg) })
		})
	}
	e.first(append(steps, func() { e.acker.AckControl(tx) })...)
}

func (e *engine) replayAggregate(l *lane, tx *cdc.Tx, agg cdc.Aggregate) {
	e.tracef("replay %s %v parked %v", l.name, agg, l.parked[agg])
	if !l.parked[agg] || l.store == nil {
		e.log.Info().Str("lane", l.name).Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).
			Msg("replay request for an aggregate that is not parked; ignored")
		return
	}
	st, history, pipeline, id := l.store, e.history(), e.cfg.pipeline, l.id
	l.replayReads++
	e.hold("load replay", func(ctx context.Context) (any, error) {
		ms, err := st.Replayable(ctx, storeAggregate(agg), tx.CommitLSN)
		if err != nil {
			return nil, err
		}
		// A dead letter or a parked event is recorded delivered only once a replay delivered it:
		// a previous leader carried this request out (or part of it) before it died.
		return notDeliveredHere(ctx, history, pipeline, id, ms), nil
	},
		func(v any) {
			ms, _ := v.([]*envelope.Message)
			defer func() {
				if l.replayReads--; l.replayReads == 0 {
					e.parkDeferred(l)
				}
			}()
			e.acker.Grow(tx, ms)
			its := make([]*item, len(ms))
			for i, m := range ms {
				its[i] = e.newItem(m, tx, kindReplay)
			}
			if e.cfg.trace != nil {
				e.tracef("unpark %s %v: %v", l.name, agg, itemIDs(its))
			}
			l.unpark(agg, its)
			if len(ms) == 0 {
				e.holdWrite("unpark aggregate", func(ctx context.Context) error { return st.Unpark(ctx, storeAggregate(agg)) }, nil)
			}
			e.log.Info().Str("lane", l.name).Str("aggregate_type", agg.Type).Str("aggregate_id", agg.ID).Int("events", len(ms)).
				Msg("replaying")
		})
}

// replaySince handles a replay --since request of tx for l at its place in the stream: to an
// endpoint, through its backlog (sincebacklog.go), the intake going on meanwhile. Else it waits
// until every event queued before the request is settled and marked, then reads the rows page
// by page in replay order and queues each page behind what is queued for its aggregates; it
// waits for a page to settle before reading the next, and takes nothing from the stream
// meanwhile, so the replay goes out ahead of every event committed after the request, with
// bounded memory. The events belong to the request's transaction, which is therefore not
// confirmed before the last page is settled; after each page the position is recorded, so a
// relay restarted in the middle meets the request again and resumes after the last page.
func (e *engine) replaySince(l *lane, tx *cdc.Tx, id int64) {
	st := l.store
	if st == nil {
		e.acker.AckControl(tx)
		return
	}
	if e.sinceThroughBacklog(l, tx, id) {
		return
	}
	e.hold("read replay request", func(ctx context.Context) (any, error) { return st.SinceState(ctx, id) }, func(v any) {
		s := v.(store.SinceState)
		if s.Done {
			e.log.Info().Int64("replay", s.ID).Msg("replay request already complete; skipped")
			e.acker.AckControl(tx)
			return
		}
		e.marksWait = time.Time{}
		e.waitUntil(func() bool { return e.drained(l) }, func() {
			if e.sinceDone(tx, s.ID) {
				return
			}
			e.log.Info().Int64("replay", s.ID).Time("since", s.Since).Int64("events", s.Total).Int64("sent", s.Sent).
				Msg("replay since started")
			e.sincePage(l, tx, s)
		})
	})
}

// drained reports whether l holds nothing and the done-marks of what it delivered are written,
// so that the rows a replay reads include everything delivered before the request (a row is
// selected as delivered by its mark). It gives up waiting for marks after marksWait: they are
// advisory, and a database that refuses them must not hold the replay.
func (e *engine) drained(l *lane) bool {
	if l.queued > 0 {
		return false
	}
	f, ok := e.marks.(interface{ Flushed() bool })
	if !ok || f.Flushed() {
		return true
	}
	if e.marksWait.IsZero() {
		e.marksWait = e.now
	} else if e.now.Sub(e.marksWait) > marksWait {
		e.log.Warn().Dur("waited", marksWait).Msg("replay since: done-marks still pending; rows delivered just before the request may be left out")
		return true
	}
	if !e.polling { // look again soon: the marks flush on their own
		e.polling = true
		e.after(e.now.Add(10*time.Millisecond), func() { e.polling = false })
	}
	return false
}

// sincePage replays the next page, waits for it to settle and records the progress.
func (e *engine) sincePage(l *lane, tx *cdc.Tx, s store.SinceState) {
	type page struct {
		ms   []*envelope.Message
		next store.SinceCursor
	}
	st := l.store
	e.hold("read rows to replay", func(ctx context.Context) (any, error) {
		ms, next, err := st.SincePage(ctx, s, sincePage, tx.CommitLSN)
		return page{ms, next}, err
	}, func(v any) {
		p := v.(page)
		if e.sinceDone(tx, s.ID) {
			return
		}
		if len(p.ms) == 0 {
			s.Done = true
			e.sinceProgress(l, tx, s, func() {
				e.m.ReplayPending.Set(0)
				e.log.Info().Int64("replay", s.ID).Int64("events", s.Sent).Msg("replay since complete")
				e.acker.AckControl(tx)
			})
			return
		}
		read := len(p.ms)
		var ms []*envelope.Message
		for _, m := range p.ms {
			if l.id == "" || l.row.Subscribed(m.TenantID, m.EventType, m.AggregateType) {
				ms = append(ms, m)
			}
		}
		e.acker.Grow(tx, ms)
		e.sinceLeft += len(ms)
		for _, m := range ms {
			e.queueIn(l, e.newItem(m, tx, kindSince))
		}
		e.flushParked()
		e.waitUntil(func() bool { return e.sinceLeft == 0 }, func() {
			if e.sinceDone(tx, s.ID) {
				return
			}
			s.Sent, s.After = s.Sent+int64(read), p.next
			e.m.ReplayPending.Set(float64(max(s.Total-s.Sent, 0)))
			e.sinceProgress(l, tx, s, func() {
				e.log.Info().Int64("replay", s.ID).Int64("sent", s.Sent).Int64("events", s.Total).Msg("replay since progress")
				e.sincePage(l, tx, s)
			})
		})
	})
}

// sinceProgress records a replay's progress s, then does then, only while this relay leads: one
// cut off from the slot waits until it streams again, and stops there if another relay carried
// the request out meanwhile (sinceDone), instead of recording its stale progress over the
// other's (which would show the request incomplete). A write under way when the relay is cut
// off cannot undo a completion either: the store leaves a complete request as it is.
func (e *engine) sinceProgress(l *lane, tx *cdc.Tx, s store.SinceState, then func()) {
	st := l.store
	e.waitUntil(e.leading, func() {
		if e.sinceDone(tx, s.ID) {
			return
		}
		e.holdWrite("record replay progress", func(ctx context.Context) error { return st.SinceProgress(ctx, s) }, then)
	})
}

// sinceDone reports whether the slot confirmed past a replay since a time's transaction while
// another relay led (settledElsewhere), and then acknowledges its control record and stops
// the replay here: that relay carried it out, and this one's progress, recorded now, would undo
// the request's completion (its Done) and send its rows again.
func (e *engine) sinceDone(tx *cdc.Tx, id int64) bool {
	if !e.settledElsewhere(tx) {
		return false
	}
	e.tracef("since dropped %d: the slot confirmed past it while another relay led", id)
	e.acker.AckControl(tx)
	return true
}

// backfill delivers the rows recorded when the slot was created (pending rows the stream will
// never carry), page by page in their recorded order, before anything from the stream is
// queued; so per aggregate they go out before its streamed events. Delivered rows are marked
// done like any other, so a restart resumes with what is still pending.
func (e *engine) backfill() {
	if e.cfg.backfillSlot == "" || e.cfg.store == nil {
		return
	}
	e.backfillPage(&cdc.Tx{Backfill: true}, 0, 0)
}

func (e *engine) backfillPage(tx *cdc.Tx, after int64, total int) {
	type page struct {
		ms   []*envelope.Message
		last int64
		had  map[string][]string // the endpoints an earlier process delivered each to (progress.go)
	}
	st, slot, history, pipeline := e.cfg.store, e.cfg.backfillSlot, e.history(), e.cfg.pipeline
	e.hold("read the backfill", func(ctx context.Context) (any, error) {
		ms, last, err := st.BackfillPage(ctx, slot, after, backfillPage, 0)
		if err != nil || history == nil || len(ms) == 0 {
			return page{ms, last, nil}, err
		}
		ids := make([]string, len(ms))
		for i, m := range ms {
			ids[i] = m.ID
		}
		had, _ := history.DeliveredTo(ctx, pipeline, ids) // a lookup that fails sends them again
		return page{ms, last, had}, nil
	}, func(v any) {
		p := v.(page)
		if len(p.ms) == 0 {
			if total > 0 {
				e.log.Info().Int("events", total).Msg("backfill complete")
			}
			e.bestEffort("forget the backfill", func(ctx context.Context) error { return st.BackfillDone(ctx, slot) })
			return
		}
		for _, m := range p.ms {
			lanes := e.routeTo(m)
			if had := p.had[m.ID]; len(had) > 0 && len(lanes) > 0 {
				lanes = e.withoutPrior(m, lanes, had)
			}
			e.backfillLeft += len(lanes)
			e.send(tx, m, lanes, kindBackfill)
		}
		e.flushParked()
		e.waitUntil(func() bool { return e.backfillLeft == 0 }, func() {
			total += len(p.ms)
			e.log.Info().Int("delivered", total).Msg("backfill progress")
			e.backfillPage(tx, p.last, total)
		})
	})
}

func storeAggregate(a cdc.Aggregate) store.Aggregate { return store.Aggregate(a) }
