package publisher

import (
	"context"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/store"
)

// A replay --since through the lane's backlog. At the request's place in the stream the lane
// spills (what it holds goes to its backlog, and so does every event routed to it from then on),
// and the rows the request selects are written into the backlog at the request's commit LSN,
// with indexes below every event's (store.ReplayIdx), in the replay's order, page by page, each
// page with the request's progress in one write. The lane reads them back as any backlog: after
// the events it held before the request, before those committed after it; nothing of the lane
// is written past the request before its rows are all written (writeSpilled), nor read past them
// (through), and it rejoins the stream only once they are delivered. The intake goes on at once:
// the other lanes take the stream, and the slot confirms past the request once its rows are
// written (the request's control record is acknowledged then).
//
// A relay that stops in the middle meets the request again (its control record is not
// acknowledged) and goes on from the recorded progress, writing the same rows at the same
// positions (a position written already is kept). The request is recorded done once every row
// is in the backlog: from there the backlog delivers them, across restarts.

// sinceJob is a replay --since taken at its place in the stream whose rows are not all written
// to the lane's backlog yet.
type sinceJob struct {
	tx        *cdc.Tx // the request's transaction: its control record is acknowledged once all is written
	id        int64
	marksFrom time.Time // since when it waits for the done-marks of what was delivered before it
	started   bool      // a page was written
}

// sinceJobWrite is what a page of a replay --since wrote.
type sinceJobWrite struct {
	st      store.SinceState
	written int
	last    store.BacklogPos
}

// sinceThroughBacklog takes a replay --since request of tx for endpoint lane l through l's
// backlog, and reports false when it does not (a pipeline of one destination, whose replay holds
// only its own stream; a backlog that does not take replays): the intake then carries it out
// itself (replaySince), as documented for a pipeline: the rows not delivered yet at the request
// go out first and are re-sent with the rest. The rows are written only while this relay leads
// the slot (backlogStep); one cut off from it meanwhile drops the request when another relay
// confirmed past it (dropConfirmed), as it does the events it held.
func (e *engine) sinceThroughBacklog(l *lane, tx *cdc.Tx, id int64) bool {
	if _, ok := e.cfg.backlog.(store.ReplayBacklog); !ok || e.ep == nil || !l.active || l.bl.removed {
		return false
	}
	b := &l.bl
	if !b.on {
		e.spill(l, "a replay since a time goes through its backlog", true)
	}
	if place := (store.BacklogPos{LSN: tx.CommitLSN, Idx: store.ReplayIdx(0)}); !b.read.Less(place) {
		// It read entries of the request's own transaction already (written while the intake
		// waited for a park before the request): its rows go before them, so what was read is
		// read again after them (entries delivered meanwhile go out twice).
		e.reread(l)
		if !b.read.Less(place) { // nothing read left in memory: all of it was delivered and deleted
			b.read, b.short = before(place), false
		}
	}
	b.since = append(b.since, &sinceJob{tx: tx, id: id})
	e.tracef("since %s %d at %s", l.name, id, tx.CommitLSN)
	e.log.Info().Str("lane", l.name).Int64("replay", id).
		Msg("replay since: its rows go to the endpoint's backlog, after what it holds; the other endpoints go on")
	e.backlogStep(l)
	return true
}

// sinceStep writes the next page of the lane's first replay --since into its backlog, and
// reports whether it started to. Before the first page it waits for the done-marks of what was
// delivered before the request (a row is selected as delivered by its mark), up to marksWait;
// backlogTick looks again.
func (e *engine) sinceStep(l *lane) bool {
	b := &l.bl
	j := b.since[0]
	if !j.started && !e.marksFlushed(j) {
		return false
	}
	j.started = true
	b.busy = true
	rb, st, id := e.cfg.backlog.(store.ReplayBacklog), l.store, l.id
	row, place, tx := l.row, j.tx.CommitLSN, j.tx
	e.do("write a replay since a time into an endpoint's backlog", true, func(ctx context.Context) (any, error) {
		return writeSincePage(ctx, st, rb, id, row, tx, place, j.id)
	}, func(v any, _ error) {
		b.busy = false
		defer e.backlogStep(l)
		w, _ := v.(sinceJobWrite)
		if len(b.since) == 0 || b.since[0] != j { // dropped meanwhile (a removal, another relay confirmed past it)
			return
		}
		e.sinceWritten(l, j, w)
	})
	return true
}

// marksFlushed reports whether the done-marks queued so far are written, or j waited marksWait
// for them: they are advisory, and a database that refuses them must not hold the replay.
func (e *engine) marksFlushed(j *sinceJob) bool {
	f, ok := e.marks.(interface{ Flushed() bool })
	if !ok || f.Flushed() {
		return true
	}
	if j.marksFrom.IsZero() {
		j.marksFrom = e.now
	}
	if e.now.Sub(j.marksFrom) <= marksWait {
		return false
	}
	e.log.Warn().Dur("waited", marksWait).Msg("replay since: done-marks still pending; rows delivered just before the request may be left out")
	return true
}

// writeSincePage reads the request's state and its next page, and writes the rows of the page
// that the endpoint's subscription takes (row; every row for a pipeline's one destination, id
// "") into its backlog with the progress. The replay ends at its last row, or at the first row
// committed after the request (Until zero: up to the request): those the stream delivers.
func writeSincePage(ctx context.Context, st store.Pipeline, rb store.ReplayBacklog, id string, row endpoint.Row, tx *cdc.Tx,
	place pglogrepl.LSN, req int64) (any, error) {
	s, err := st.SinceState(ctx, req)
	if err != nil || s.Done {
		return sinceJobWrite{st: s}, err
	}
	ms, next, err := st.SincePage(ctx, s, sincePage, place)
	if err != nil {
		return nil, err
	}
	var es []store.BacklogEntry
	s.Done = len(ms) == 0
	for _, m := range ms {
		if position(m, tx).LSN > place {
			s.Done = true
			break
		}
		if id == "" || row.Subscribed(m.TenantID, m.EventType, m.AggregateType) {
			es = append(es, store.BacklogEntry{Pos: store.BacklogPos{LSN: place, Idx: store.ReplayIdx(s.Sent)}, EventID: m.ID})
		}
		s.Sent++
	}
	if !s.Done {
		s.After = next
	}
	if err := rb.SpillReplay(ctx, id, es, s); err != nil {
		return nil, err
	}
	w := sinceJobWrite{st: s, written: len(es)}
	if len(es) > 0 {
		w.last = es[len(es)-1].Pos
	}
	return w, nil
}

// sinceWritten takes what a page of j wrote: the lane may read up to there, and once the request
// is done its control record is acknowledged and the lane goes on past it.
func (e *engine) sinceWritten(l *lane, j *sinceJob, w sinceJobWrite) {
	b := &l.bl
	if w.written > 0 {
		if b.written.Less(w.last) {
			b.written = w.last
		}
		if !b.recount { // (else counted again: recountBacklog)
			b.entries += int64(w.written)
		}
		b.short = false
	}
	e.tracef("since written %s %d: %d up to %v done %v", l.name, j.id, w.written, w.last, w.st.Done)
	e.m.ReplayPending.Set(float64(max(w.st.Total-w.st.Sent, 0)))
	if !w.st.Done {
		return
	}
	b.since = b.since[1:]
	e.acker.AckControl(j.tx)
	e.log.Info().Str("lane", l.name).Int64("replay", j.id).Int64("rows", w.st.Sent).
		Msg("replay since: every row is in the endpoint's backlog; it delivers them in order, then rejoins the stream")
}

// dropSince forgets the lane's replays --since whose rows are not all written yet, acknowledging
// their control records: the endpoint was removed, or (settled) another relay led the slot past
// them meanwhile and carried them out.
func (e *engine) dropSince(l *lane, settled func(*cdc.Tx) bool) {
	keep := l.bl.since[:0]
	for _, j := range l.bl.since {
		if settled != nil && !settled(j.tx) {
			keep = append(keep, j)
			continue
		}
		e.tracef("since dropped %s %d", l.name, j.id)
		e.acker.AckControl(j.tx)
	}
	clear(l.bl.since[len(keep):])
	l.bl.since = keep
}

// splitBefore returns the items of its committed before lsn, and the others, in their order.
func splitBefore(its []*item, lsn pglogrepl.LSN) (before, rest []*item) {
	for _, it := range its {
		if position(it.m, it.tx).LSN < lsn {
			before = append(before, it)
		} else {
			rest = append(rest, it)
		}
	}
	return before, rest
}

// resentSequence is the X-Event-Sequence of a row a replay --since re-sends from the backlog: the
// one recorded with it, or for a row delivered before sequences were recorded, a new one at the
// request's commit rising with the replay's order.
func resentSequence(m *envelope.Message, p store.BacklogPos) string {
	if m.Sequence != "" {
		return m.Sequence
	}
	return envelope.Sequence(uint64(p.LSN), p.Idx-store.ReplayIdx(0))
}
