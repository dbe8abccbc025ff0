package memstore

import (
	"context"
	"slices"

	"github.com/outbox-relay/outbox-relay/store"
)

// Backlog returns the store.Backlog of pipeline's endpoints.
func (db *DB) Backlog(pipeline string) store.Backlog { return backlog{db: db, pipeline: pipeline} }

type backlog struct {
	db       *DB
	pipeline string
}

func (b backlog) entries(endpoint string, create bool) map[store.BacklogPos]store.BacklogEntry {
	eps := b.db.backlogs[b.pipeline]
	if eps == nil && create {
		eps = map[string]map[store.BacklogPos]store.BacklogEntry{}
		b.db.backlogs[b.pipeline] = eps
	}
	es := eps[endpoint]
	if es == nil && create {
		es = map[store.BacklogPos]store.BacklogEntry{}
		eps[endpoint] = es
	}
	return es
}

// sorted returns endpoint's entries in stream order.
func (b backlog) sorted(endpoint string) []store.BacklogEntry {
	var out []store.BacklogEntry
	for _, e := range b.entries(endpoint, false) {
		out = append(out, e)
	}
	slices.SortFunc(out, func(x, y store.BacklogEntry) int {
		switch {
		case x.Pos.Less(y.Pos):
			return -1
		case y.Pos.Less(x.Pos):
			return 1
		}
		return 0
	})
	return out
}

func (b backlog) Spill(_ context.Context, endpoint string, es []store.BacklogEntry) error {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	have := b.entries(endpoint, true)
	for _, e := range es {
		if _, ok := have[e.Pos]; !ok {
			have[e.Pos] = e
		}
	}
	return nil
}

func (b backlog) Page(_ context.Context, endpoint string, after, through store.BacklogPos, limit int) ([]store.BacklogEvent, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	var out []store.BacklogEvent
	for _, e := range b.sorted(endpoint) {
		if len(out) == limit || through.Less(e.Pos) {
			break
		}
		if !after.Less(e.Pos) {
			continue
		}
		ev := store.BacklogEvent{BacklogEntry: e}
		if r := b.db.rows[e.EventID]; r != nil {
			ev.Message = r.message("")
		}
		out = append(out, ev)
	}
	return out, nil
}

func (b backlog) Trim(_ context.Context, endpoint string, upTo store.BacklogPos) (int64, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	var n int64
	es := b.entries(endpoint, false)
	for pos := range es {
		if !upTo.Less(pos) {
			delete(es, pos)
			n++
		}
	}
	return n, nil
}

func (b backlog) Drop(_ context.Context, endpoint string) error {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	delete(b.db.backlogs[b.pipeline], endpoint)
	return nil
}

func (b backlog) Sizes(context.Context) (map[string]store.BacklogSize, error) {
	b.db.mu.Lock()
	defer b.db.mu.Unlock()
	out := map[string]store.BacklogSize{}
	for id := range b.db.backlogs[b.pipeline] {
		es := b.sorted(id)
		if len(es) > 0 {
			out[id] = store.BacklogSize{Entries: int64(len(es)), Last: es[len(es)-1].Pos}
		}
	}
	return out, nil
}
