package memstore

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/store"
)

// Endpoints returns the store.Endpoints of pipeline.
func (db *DB) Endpoints(pipeline string) store.Endpoints {
	return endpoints{db: db, pipeline: pipeline}
}

type endpoints struct {
	db       *DB
	pipeline string
}

func (e endpoints) log() *versionLog {
	l := e.db.versions[e.pipeline]
	if l == nil {
		l = &versionLog{}
		e.db.versions[e.pipeline] = l
	}
	return l
}

func (e endpoints) Versions(context.Context) (pglogrepl.LSN, bool, []store.EndpointVersion, error) {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	l := e.log()
	if len(l.markers) == 0 {
		return 0, false, nil, nil
	}
	marker := l.markers[len(l.markers)-1].LSN
	var out []store.EndpointVersion
	for _, v := range l.vs {
		if v.LSN >= marker {
			out = append(out, store.EndpointVersion{ID: v.ID, LSN: v.LSN, Row: slices.Clone(v.Row)})
		}
	}
	return marker, true, out, nil
}

func (e endpoints) Bootstrap(context.Context) error {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	l := e.log()
	if len(l.markers) > 0 {
		return nil
	}
	l.markers = append(l.markers, store.EndpointVersion{})
	for id, row := range e.db.endpoints {
		l.add(store.EndpointVersion{ID: id, Row: slices.Clone(row)})
	}
	return nil
}

// add inserts v unless a version of its endpoint at its LSN is recorded, keeping the log in
// LSN order, then id (bytewise).
func (l *versionLog) add(v store.EndpointVersion) {
	i, found := slices.BinarySearchFunc(l.vs, v, func(a, b store.EndpointVersion) int {
		return cmp.Or(cmp.Compare(a.LSN, b.LSN), strings.Compare(a.ID, b.ID))
	})
	if !found {
		l.vs = slices.Insert(l.vs, i, v)
	}
}

var errMarkerID = errors.New("an endpoint version needs an endpoint id ('' marks a bootstrap)")

func (e endpoints) Record(_ context.Context, v store.EndpointVersion) error {
	if v.ID == "" {
		return errMarkerID
	}
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	v.Row = slices.Clone(v.Row)
	e.log().add(v)
	return nil
}

func (e endpoints) Prune(_ context.Context, confirmed pglogrepl.LSN) error {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	l := e.log()
	var marker pglogrepl.LSN
	if n := len(l.markers); n > 0 {
		marker = l.markers[n-1].LSN
		l.markers = l.markers[n-1:]
	}
	// latest[id] is the endpoint's newest version at or below confirmed; newest its newest.
	latest, newest := map[string]pglogrepl.LSN{}, map[string]pglogrepl.LSN{}
	for _, v := range l.vs {
		newest[v.ID] = v.LSN
		if v.LSN <= confirmed {
			latest[v.ID] = v.LSN
		}
	}
	l.vs = slices.DeleteFunc(l.vs, func(v store.EndpointVersion) bool {
		return v.LSN < marker || v.LSN <= confirmed && (v.LSN < latest[v.ID] || v.Row == nil && newest[v.ID] == v.LSN)
	})
	return nil
}

func (e endpoints) Parked(context.Context) (map[string][]store.Aggregate, error) {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	out := map[string][]store.Aggregate{}
	for lane, aggs := range e.db.parked {
		id, ok := strings.CutPrefix(lane, e.pipeline+"/")
		if !ok || len(aggs) == 0 {
			continue
		}
		for a := range aggs {
			out[id] = append(out[id], a)
		}
		slices.SortFunc(out[id], func(a, b store.Aggregate) int { return cmp.Or(cmp.Compare(a.Type, b.Type), cmp.Compare(a.ID, b.ID)) })
	}
	return out, nil
}

func (e endpoints) SaveStatus(_ context.Context, st []store.EndpointStatus) error {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	m := e.db.status[e.pipeline]
	if m == nil {
		m = map[string]store.EndpointStatus{}
		e.db.status[e.pipeline] = m
	}
	for _, s := range st {
		s.Backlog = 0 // not saved
		m[s.ID] = s
	}
	return nil
}

func (e endpoints) ForgetStatus(_ context.Context, id string) error {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	delete(e.db.status[e.pipeline], id)
	return nil
}

func (e endpoints) FailingSince(context.Context) (map[string]time.Time, error) {
	e.db.mu.Lock()
	defer e.db.mu.Unlock()
	out := map[string]time.Time{}
	for id, s := range e.db.status[e.pipeline] {
		if id != "" && !s.FailingSince.IsZero() {
			out[id] = s.FailingSince
		}
	}
	return out, nil
}

// Statuses returns the saved status of pipeline's endpoints (the heartbeat, id "", included).
func (db *DB) Statuses(pipeline string) map[string]store.EndpointStatus {
	db.mu.Lock()
	defer db.mu.Unlock()
	out := map[string]store.EndpointStatus{}
	for id, s := range db.status[pipeline] {
		out[id] = s
	}
	return out
}
