package memstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// Pipeline returns the store.Pipeline of pipeline name (or endpoint lane "<pipeline>/<id>"); with
// ownState its failed and parked events are its own (pgstore.Pipeline.OwnState), else they are
// the rows' status.
func (db *DB) Pipeline(name string, ownState bool) store.Pipeline {
	if name == "" {
		name = "default"
	}
	return pipeline{db: db, name: name, own: ownState}
}

type pipeline struct {
	db   *DB
	name string
	own  bool
}

func (p pipeline) Parked(context.Context) ([]store.Aggregate, error) {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	var out []store.Aggregate
	for a := range p.db.parked[p.name] {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b store.Aggregate) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.ID, b.ID)) })
	return out, nil
}

// event returns pipeline's own record of event id, creating it.
func (p pipeline) event(id string) *pipeEvent {
	evs := p.db.pipeEvents[p.name]
	if evs == nil {
		evs = map[string]*pipeEvent{}
		p.db.pipeEvents[p.name] = evs
	}
	e := evs[id]
	if e == nil {
		e = &pipeEvent{}
		evs[id] = e
	}
	return e
}

func (p pipeline) DeadLetter(_ context.Context, m *envelope.Message, attempts int, lastErr string) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	r := p.db.rows[m.ID]
	if r == nil {
		return errNotVisible
	}
	if p.own {
		e := p.event(m.ID)
		e.status, e.retries, e.lastErr, e.seq = "failed", attempts-1, lastErr, m.Sequence
	} else {
		r.status, r.retries, r.lastErr, r.seq = "failed", attempts-1, lastErr, m.Sequence
	}
	aggs := p.db.parked[p.name]
	if aggs == nil {
		aggs = map[store.Aggregate]parkedRow{}
		p.db.parked[p.name] = aggs
	}
	p.db.inserted++ // the parked_at order
	aggs[store.Aggregate{Type: m.AggregateType, ID: m.AggregateID}] = parkedRow{firstID: m.ID, reason: lastErr, at: p.db.inserted}
	return nil
}

func (p pipeline) Abandoned(_ context.Context, m *envelope.Message, attempts int, lastErr string) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	if p.db.rows[m.ID] == nil {
		return errNotVisible
	}
	e := p.event(m.ID)
	e.status, e.retries, e.lastErr, e.seq = "abandoned", attempts-1, lastErr, m.Sequence
	return nil
}

func (p pipeline) Park(_ context.Context, ms []*envelope.Message) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	missing := false
	for _, m := range ms {
		r := p.db.rows[m.ID]
		switch {
		case r == nil:
			missing = true
		case p.own:
			e := p.event(m.ID)
			e.status, e.seq = "parked", m.Sequence
		default:
			r.status, r.seq = "parked", m.Sequence
		}
	}
	if missing {
		return errNotVisible
	}
	return nil
}

func (p pipeline) Replayable(_ context.Context, agg store.Aggregate, at pglogrepl.LSN) ([]*envelope.Message, error) {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	type found struct {
		r   *row
		seq string
	}
	var fs []found
	for id, r := range p.db.rows {
		if r.m.AggregateType != agg.Type || r.m.AggregateID != agg.ID {
			continue
		}
		status, seq := r.status, r.seq
		if p.own {
			e := p.db.pipeEvents[p.name][id]
			if e == nil {
				continue
			}
			status, seq = e.status, e.seq
		}
		if status == "failed" || status == "parked" {
			fs = append(fs, found{r, seq})
		}
	}
	slices.SortFunc(fs, func(a, b found) int { // a row without a sequence last, as NULL sorts in PostgreSQL
		return cmp.Or(cmp.Compare(empty(a.seq), empty(b.seq)), cmp.Compare(a.seq, b.seq),
			a.r.m.CreatedAt.Compare(b.r.m.CreatedAt), cmp.Compare(a.r.insert, b.r.insert))
	})
	out := make([]*envelope.Message, len(fs))
	for i, f := range fs {
		seq := f.seq
		if seq == "" {
			seq = envelope.Sequence(uint64(at), 0)
		}
		out[i] = f.r.message(seq)
	}
	return out, nil
}

func (p pipeline) Unpark(_ context.Context, agg store.Aggregate) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	delete(p.db.parked[p.name], agg)
	if !p.own {
		return nil
	}
	for id, e := range p.db.pipeEvents[p.name] {
		r := p.db.rows[id]
		if r != nil && r.m.AggregateType == agg.Type && r.m.AggregateID == agg.ID && (e.status == "failed" || e.status == "parked") {
			delete(p.db.pipeEvents[p.name], id)
		}
	}
	return nil
}

func (p pipeline) BackfillPage(_ context.Context, slot string, after int64, limit int, at pglogrepl.LSN) ([]*envelope.Message, int64, error) {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	var out []*envelope.Message
	last := after
	for _, b := range p.db.backfills[slot] {
		if len(out) == limit {
			break
		}
		r := p.db.rows[b.id]
		if b.pos <= after || r == nil || r.status != "pending" && !p.own {
			continue
		}
		out, last = append(out, r.message(envelope.Sequence(uint64(at), int(b.pos)))), b.pos
	}
	return out, last, nil
}

func (p pipeline) BackfillDone(_ context.Context, slot string) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	delete(p.db.backfills, slot)
	return nil
}

func (p pipeline) SinceState(_ context.Context, id int64) (store.SinceState, error) {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	st := p.db.replays[id]
	if st == nil {
		return store.SinceState{ID: id}, errNoReplay(id)
	}
	return *st, nil
}

func (p pipeline) SincePage(_ context.Context, st store.SinceState, limit int, at pglogrepl.LSN) ([]*envelope.Message, store.SinceCursor, error) {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	after := st.After
	if after.ID == "" {
		after = store.SinceCursor{Sequence: after.Sequence, Insert: beforeAny.Insert, ID: beforeAny.ID}
	}
	type found struct {
		r *row
		c store.SinceCursor
	}
	var fs []found
	for _, r := range p.db.rows {
		m := &r.m
		switch {
		case m.CreatedAt.Before(st.Since), !st.Until.IsZero() && !m.CreatedAt.Before(st.Until),
			st.AggregateType != "" && m.AggregateType != st.AggregateType, st.EventType != "" && m.EventType != st.EventType, st.EventID != "" && m.ID != st.EventID,
			r.status != "done" && r.status != "failed" && r.status != "parked":
			continue
		}
		c := store.SinceCursor{Sequence: r.seq, Insert: r.insert, ID: m.ID}
		if compareCursor(c, after) > 0 {
			fs = append(fs, found{r, c})
		}
	}
	slices.SortFunc(fs, func(a, b found) int { return compareCursor(a.c, b.c) })
	if len(fs) > limit {
		fs = fs[:limit]
	}
	out := make([]*envelope.Message, len(fs))
	next := st.After
	for i, f := range fs {
		seq := f.r.seq
		if seq == "" {
			seq = envelope.Sequence(uint64(at), int(f.r.insert))
		}
		out[i], next = f.r.message(seq), f.c
	}
	return out, next, nil
}

func (p pipeline) SinceProgress(_ context.Context, st store.SinceState) error {
	p.db.mu.Lock()
	defer p.db.mu.Unlock()
	r := p.db.replays[st.ID]
	if r == nil || r.Done {
		return nil // an UPDATE of no row; a complete request stays complete
	}
	r.Sent, r.After, r.Done = st.Sent, st.After, st.Done
	return nil
}

// empty is 1 for an empty sequence, which sorts last, else 0.
func empty(seq string) int {
	if seq == "" {
		return 1
	}
	return 0
}
