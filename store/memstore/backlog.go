package memstore

import (
	"context"
	"slices"
	"time"

	"github.com/outbox-relay/outbox-relay/store"
)

// Backlog returns the store.Backlog of pipeline's endpoints.
func (db *DB) Backlog(pipeline string) store.Backlog { return backlog{db: db, pipeline: pipeline} }

var _ store.ReplayBacklog = backlog{}

type backlog struct {
	db       *DB
	pipeline string
}

// entries returns endpoint's entries, in stream order.
func (b backlog) entries(endpoint string) []store.BacklogEntry {
	return b.db.backlogs[b.pipeline][endpoint]
}

func (b backlog) set(endpoint string, es []store.BacklogEntry) {
	eps := b.db.backlogs[b.pipeline]
	if eps == nil {
		eps = map[string][]store.BacklogEntry{}
		b.db.backlogs[b.pipeline] = eps
	}
	eps[endpoint] = es
}

// search returns where pos is, or would be, among es.
func search(es []store.BacklogEntry, pos store.BacklogPos) (int, bool) {
	return slices.BinarySearchFunc(es, pos, func(e store.BacklogEntry, pos store.BacklogPos) int {
		switch {
		case e.Pos.Less(pos):
			return -1
		case pos.Less(e.Pos):
			return 1
		}
		return 0
	})
}

func (b backlog) Spill(_ context.Context, endpoint string, es []store.BacklogEntry) error {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	have := b.entries(endpoint)
	for _, e := range es {
		if i, ok := search(have, e.Pos); !ok {
			have = slices.Insert(have, i, e)
		}
	}
	b.set(endpoint, have)
	return nil
}

func (b backlog) SpillReplay(ctx context.Context, endpoint string, es []store.BacklogEntry, st store.SinceState) error {
	if err := b.Spill(ctx, endpoint, es); err != nil {
		return err
	}
	return pipeline{db: b.db}.SinceProgress(ctx, st)
}

func (b backlog) Page(_ context.Context, endpoint string, after, through store.BacklogPos, limit int) ([]store.BacklogEvent, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	var out []store.BacklogEvent
	es := b.entries(endpoint)
	i, ok := search(es, after)
	if ok {
		i++
	}
	for _, e := range es[i:] {
		if len(out) == limit || through.Less(e.Pos) {
			break
		}
		ev := store.BacklogEvent{BacklogEntry: e}
		if r := b.db.rows[e.EventID]; r != nil {
			ev.Message = r.message(r.seq)
		}
		out = append(out, ev)
	}
	return out, nil
}

func (b backlog) Trim(_ context.Context, endpoint string, upTo store.BacklogPos) (int64, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	es := b.entries(endpoint)
	n, ok := search(es, upTo)
	if ok {
		n++
	}
	if n > 0 {
		b.set(endpoint, slices.Clone(es[n:]))
	}
	return int64(n), nil
}

func (b backlog) Drop(_ context.Context, endpoint string) ([]store.BacklogEntry, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	es := b.db.backlogs[b.pipeline][endpoint]
	delete(b.db.backlogs[b.pipeline], endpoint)
	return slices.Clone(es), nil
}

func (b backlog) Sizes(context.Context) (map[string]store.BacklogSize, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	out := map[string]store.BacklogSize{}
	for id, es := range b.db.backlogs[b.pipeline] {
		if len(es) > 0 {
			out[id] = store.BacklogSize{Entries: int64(len(es)), Last: es[len(es)-1].Pos}
		}
	}
	return out, nil
}

func (b backlog) Oldest(_ context.Context, endpoints []string) (map[string]time.Time, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	out := map[string]time.Time{}
	for _, id := range endpoints {
		for _, e := range b.entries(id) {
			if r := b.db.rows[e.EventID]; r != nil {
				out[id] = r.m.CreatedAt
				break
			}
		}
	}
	return out, nil
}
