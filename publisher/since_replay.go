package publisher

import (
	"context"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// sincePage is how many rows a replay --since holds at once.
const sincePage = 4096

// sinceRun is the replay --since under way, if any: the publisher handles one at a time, and the
// stream waits behind it.
type sinceRun struct {
	left countdown // replayed events of the current page not yet settled
}

// replaySince handles a replay --since request of tx at its place in the stream. It reads the rows
// page by page in replay order (store.SinceCursor) and queues each page behind what is queued for its
// aggregates, which is everything committed before the request; it waits for a page to settle
// before reading the next, and takes nothing from the stream meanwhile, so the replay goes out
// ahead of every event committed after the request, with bounded memory. The events belong to
// the request's transaction, which is therefore not confirmed before the last page is settled;
// after each page the position is recorded, so a relay restarted in the middle meets the request
// again and resumes after the last recorded page. If ctx ends first, the request is not
// acknowledged.
func (p *Publisher) replaySince(ctx context.Context, tx *cdc.Tx, req *cdc.ReplayRequest) {
	ss := p.cfg.Store
	if ss == nil || !p.mine(req.Pipeline) {
		p.log.Info().Int64("replay", req.SinceRequest).Str("pipeline", req.Pipeline).
			Msg("replay request for another pipeline; ignored")
		p.acker.AckControl(tx)
		return
	}
	var st store.SinceState
	if !p.durably(ctx, "read replay request", func(ctx context.Context) (err error) {
		st, err = ss.SinceState(ctx, req.SinceRequest)
		return err
	}) {
		return
	}
	if st.Done {
		p.log.Info().Int64("replay", st.ID).Msg("replay request already complete; skipped")
		p.acker.AckControl(tx)
		return
	}
	if !p.drainAhead(ctx) {
		return
	}
	p.log.Info().Int64("replay", st.ID).Time("since", st.Since).Int64("events", st.Total).Int64("sent", st.Sent).
		Msg("replay since started")
	defer p.m.ReplayPending.Set(0)
	for {
		n, ok := p.sincePage(ctx, ss, &st, tx)
		if !ok {
			return // stopping: the request stays unconfirmed and resumes at the next start
		}
		if n == 0 {
			break
		}
	}
	st.Done = true
	if !p.durably(ctx, "record replay progress", func(ctx context.Context) error { return ss.SinceProgress(ctx, st) }) {
		return
	}
	p.log.Info().Int64("replay", st.ID).Int64("events", st.Sent).Msg("replay since complete")
	p.acker.AckControl(tx)
}

// marksWait bounds how long a replay waits for the done-marks of what was delivered before it.
const marksWait = 10 * time.Second

// drainAhead waits until every event queued before the request is settled and its done-mark
// written, so that the rows the replay reads include everything delivered before the request
// (a row is selected as delivered by its mark). It gives up waiting for marks after marksWait
// (they are advisory: a database that refuses them must not hold the replay); it reports false
// if ctx ends first.
func (p *Publisher) drainAhead(ctx context.Context) bool {
	flushed, _ := p.marks.(interface{ Flushed() bool })
	var marking time.Time
	for {
		if p.sched.empty() {
			if flushed == nil || flushed.Flushed() {
				return true
			}
			if marking.IsZero() {
				marking = time.Now()
			} else if time.Since(marking) > marksWait {
				p.log.Warn().Dur("waited", marksWait).Msg("replay since: done-marks still pending; rows delivered just before the request may be left out")
				return true
			}
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// sincePage replays the next page and records the progress; it returns the page's size, and
// false if ctx ended first.
func (p *Publisher) sincePage(ctx context.Context, ss store.Replays, st *store.SinceState, tx *cdc.Tx) (int, bool) {
	var ms []*envelope.Message
	var next store.SinceCursor
	if !p.durably(ctx, "read rows to replay", func(ctx context.Context) (err error) {
		ms, next, err = ss.SincePage(ctx, *st, sincePage, tx.CommitLSN)
		return err
	}) {
		return 0, false
	}
	if len(ms) == 0 {
		return 0, true
	}
	read := len(ms)
	if p.accept != nil {
		ms = slices.DeleteFunc(ms, func(m *envelope.Message) bool { return !p.accept(m) })
	}
	p.acker.Grow(tx, ms)
	p.since.left.Add(len(ms))
	var parked []*item
	for _, m := range ms {
		if it := (&item{m: m, tx: tx, since: true}); !p.sched.add(it) {
			parked = append(parked, it) // its aggregate is parked: held, and re-sent by its replay
		}
	}
	p.settleParked(ctx, parked)
	select {
	case <-p.since.left.Zero():
	case <-ctx.Done():
		return 0, false
	}
	st.Sent += int64(read)
	st.After = next
	p.m.ReplayPending.Set(float64(max(st.Total-st.Sent, 0)))
	if !p.durably(ctx, "record replay progress", func(ctx context.Context) error { return ss.SinceProgress(ctx, *st) }) {
		return 0, false
	}
	p.log.Info().Int64("replay", st.ID).Int64("sent", st.Sent).Int64("events", st.Total).Msg("replay since progress")
	return read, true
}
