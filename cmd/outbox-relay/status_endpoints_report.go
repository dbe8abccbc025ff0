package main

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// staleStatus is how old a pipeline's heartbeat may be before status --endpoints says its relay
// stopped reporting: the relay writes it every few seconds.
const staleStatus = time.Minute

// heartbeatID is the endpoint id of a pipeline's heartbeat row in outbox_endpoint_status,
// written at every save whatever changed (as the versions log's bootstrap marker, no endpoint
// has this id). The relay writes an endpoint's row only when its figures change, so without a
// heartbeat an old updated_at means "quiet" as well as "stopped".
const heartbeatID = ""

// endpointReport is `status --endpoints`: the pipelines with endpoints, how recently each shard
// reported, and one line per (pipeline, endpoint).
type endpointReport struct {
	Warnings  []string             `json:"warnings"`
	Pipelines []endpointPipeline   `json:"pipelines"`
	Totals    map[string]int       `json:"totals"` // endpoints by state, failing, parked
	Endpoints []endpointStatusLine `json:"endpoints"`
	now       time.Time            // the database's clock, which wrote updated_at
}

// endpointPipeline is a pipeline that runs with endpoints: its shards (itself when not sharded)
// and when each last wrote its lanes' status.
type endpointPipeline struct {
	Name   string          `json:"name"`
	Shards []endpointShard `json:"shards"`
}

type endpointShard struct {
	Name string `json:"name"`
	// ReportedAt is its heartbeat's time when it writes one (Heartbeat), else the newest of its
	// status rows; null: none yet.
	ReportedAt *time.Time `json:"reported_at"`
	AgeSeconds *float64   `json:"age_seconds"`
	Heartbeat  bool       `json:"heartbeat"`
	// Stale: its heartbeat is over a minute old, so its relay is stopped or cannot write.
	Stale bool `json:"stale"`
	// Slot is its slot's name (from --config, --slot, or the relay's default), and Streamed
	// whether a process streams from it: null when no such slot exists.
	Slot     string `json:"slot"`
	Streamed *bool  `json:"streamed"`
}

// endpointStatusLine is one endpoint in one pipeline: its state, then what its lanes (one per
// shard) last reported, summed.
type endpointStatusLine struct {
	Pipeline   string     `json:"pipeline"` // "" when no pipeline has run with endpoints yet
	ID         string     `json:"id"`
	TenantID   *string    `json:"tenant_id"`
	State      string     `json:"state"` // enabled, paused, disabled; removed: reported, but no longer a row
	Reason     string     `json:"reason"`
	StateSince *time.Time `json:"state_since"`
	laneTotal
	ParkedAggregates int64 `json:"parked_aggregates"`
	// Backlog is the events in the endpoint's backlog (outbox_endpoint_backlog) in the pipeline,
	// over its shards: those it delivers from there, in order, before it rejoins the stream.
	Backlog int64 `json:"backlog"`
}

// laneTotal is what an endpoint's lanes reported, over the shards of a pipeline: counts summed,
// the oldest undelivered and the oldest report, the latest success and error, the longest run
// of failures.
type laneTotal struct {
	Undelivered              int64      `json:"undelivered"`
	OldestUndeliveredAt      *time.Time `json:"oldest_undelivered_at"`
	OldestUndeliveredSeconds *float64   `json:"oldest_undelivered_seconds"`
	LastSuccessAt            *time.Time `json:"last_success_at"`
	LastError                string     `json:"last_error"`
	LastErrorAt              *time.Time `json:"last_error_at"`
	FailuresInRow            int        `json:"failures_in_row"`
	// ReportedAt is the oldest updated_at of the endpoint's status rows, the time its figures
	// are as of (null: never reported); the oldest, so that one shard's old figures show.
	ReportedAt        *time.Time `json:"reported_at"`
	ReportedAgeSecond *float64   `json:"reported_age_seconds"`
}

func (l *laneTotal) add(s state.EndpointStatus) {
	l.Undelivered += s.Undelivered
	l.OldestUndeliveredAt = earliest(l.OldestUndeliveredAt, s.OldestUndelivered)
	l.LastSuccessAt = latest(l.LastSuccessAt, s.LastSuccess)
	if !s.LastErrorAt.IsZero() && (l.LastErrorAt == nil || s.LastErrorAt.After(*l.LastErrorAt)) {
		l.LastError, l.LastErrorAt = s.LastError, &s.LastErrorAt
	}
	l.FailuresInRow = max(l.FailuresInRow, s.FailuresInRow)
	l.ReportedAt = earliest(l.ReportedAt, s.UpdatedAt)
}

// shardName is a shard's name as relay.ShardName makes it: <pipeline>_s<i>of<n>.
var shardName = regexp.MustCompile(`^(.+)_s(\d+)of(\d+)$`)

// familyOf returns the pipeline a shard was split from, or name itself.
func familyOf(name string) string {
	m := shardName.FindStringSubmatch(name)
	if m == nil {
		return name
	}
	i, err1 := strconv.Atoi(m[2])
	n, err2 := strconv.Atoi(m[3])
	if err1 != nil || err2 != nil || i >= n {
		return name
	}
	return m[1]
}

// buildEndpointReport merges the rows: one line per endpoint and pipeline (the family of its
// shards), every endpoint of the table in every pipeline with endpoints, and the endpoints a
// pipeline reported that are no longer rows as removed.
func buildEndpointReport(now time.Time, states []state.EndpointState, lanes []state.EndpointStatus, pipes []string,
	parked, backlog map[string]int64) endpointReport {
	rep := endpointReport{now: now, Warnings: []string{}, Pipelines: []endpointPipeline{}, Endpoints: []endpointStatusLine{},
		Totals: map[string]int{"enabled": 0, "paused": 0, "disabled": 0, "failing": 0}}
	shards, totals := sumLanes(pipes, lanes, parked, backlog)
	families := rep.addPipelines(shards)
	known := map[string]bool{}
	for _, e := range states {
		known[e.ID] = true
		rep.Totals[e.State]++
	}
	if len(families) == 0 {
		families = []string{""}
		if len(states) > 0 {
			rep.Warnings = append(rep.Warnings, "no pipeline has run with endpoints yet: start one with `outbox-relay run --endpoints` "+
				"(or endpoints: true in the pipelines file)")
		}
	}
	for _, f := range families {
		for _, e := range states {
			rep.Endpoints = append(rep.Endpoints, line(f, e, totals[laneKey{f, e.ID}]))
		}
	}
	for k, t := range totals {
		if !known[k.id] {
			rep.Endpoints = append(rep.Endpoints, line(k.family, state.EndpointState{ID: k.id, State: "removed"}, t))
		}
	}
	rep.finish(parked, backlog)
	return rep
}

// laneKey is an endpoint in a pipeline (the family of its shards).
type laneKey struct{ family, id string }

// sumLanes returns every shard that runs with endpoints (those of pipes, of the status rows and
// of the lanes with parked aggregates or a backlog), with its heartbeat or newest row's time, and
// each endpoint's status rows summed over the shards of a pipeline.
func sumLanes(pipes []string, lanes []state.EndpointStatus, held ...map[string]int64) (map[string]*endpointShard, map[laneKey]*laneTotal) {
	shards := map[string]*endpointShard{}
	shard := func(name string) *endpointShard {
		if shards[name] == nil {
			shards[name] = &endpointShard{Name: name}
		}
		return shards[name]
	}
	for _, p := range pipes {
		shard(p)
	}
	for _, m := range held { // a lane's dead letters and backlog outlive its status rows
		for lane := range m {
			p, _, _ := strings.Cut(lane, "/")
			shard(p)
		}
	}
	totals := map[laneKey]*laneTotal{}
	for _, l := range lanes {
		sh := shard(l.Pipeline)
		if l.EndpointID == heartbeatID {
			if !sh.Heartbeat {
				sh.ReportedAt = nil // the heartbeat's time, not the rows'
			}
			sh.Heartbeat, sh.ReportedAt = true, latest(sh.ReportedAt, l.UpdatedAt)
			continue
		}
		if !sh.Heartbeat {
			sh.ReportedAt = latest(sh.ReportedAt, l.UpdatedAt)
		}
		k := laneKey{familyOf(l.Pipeline), l.EndpointID}
		if totals[k] == nil {
			totals[k] = &laneTotal{}
		}
		totals[k].add(l)
	}
	return shards, totals
}

// addPipelines groups the shards into pipelines, sorted, marks stale shards with a warning,
// and returns the pipelines' names.
func (rep *endpointReport) addPipelines(shards map[string]*endpointShard) []string {
	byFamily := map[string][]endpointShard{}
	for _, sh := range shards {
		if sh.ReportedAt != nil {
			age := rep.now.Sub(*sh.ReportedAt).Seconds()
			sh.AgeSeconds, sh.Stale = &age, sh.Heartbeat && age > staleStatus.Seconds()
		}
		if sh.Stale {
			rep.Warnings = append(rep.Warnings, staleWarning(*sh, rep.now))
		}
		f := familyOf(sh.Name)
		byFamily[f] = append(byFamily[f], *sh)
	}
	var families []string
	for f, list := range byFamily {
		slices.SortFunc(list, func(a, b endpointShard) int { return strings.Compare(a.Name, b.Name) })
		rep.Pipelines = append(rep.Pipelines, endpointPipeline{Name: f, Shards: list})
		families = append(families, f)
	}
	slices.SortFunc(rep.Pipelines, func(a, b endpointPipeline) int { return strings.Compare(a.Name, b.Name) })
	slices.Sort(rep.Warnings)
	slices.Sort(families)
	return families
}

func staleWarning(sh endpointShard, now time.Time) string {
	return fmt.Sprintf("pipeline %s last reported its endpoints' status %s ago: its relay is stopped or cannot write "+
		"(outbox-relay status --pipeline %s); the figures below are as of then", sh.Name, age(now.Sub(*sh.ReportedAt).Seconds()), sh.Name)
}

func line(family string, e state.EndpointState, t *laneTotal) endpointStatusLine {
	l := endpointStatusLine{Pipeline: family, ID: e.ID, State: e.State, Reason: e.Reason}
	if e.TenantID != "" {
		l.TenantID = &e.TenantID
	}
	if !e.Since.IsZero() {
		l.StateSince = &e.Since
	}
	if t != nil {
		l.laneTotal = *t
	}
	return l
}

// finish adds the parked aggregates and the backlog of each line's lanes (P/E for P the pipeline
// or one of its shards), the ages, the failing total, and sorts the lines by pipeline and id.
func (rep *endpointReport) finish(parked, backlog map[string]int64) {
	parkedBy, backlogBy := byFamily(parked), byFamily(backlog)
	for i := range rep.Endpoints {
		l := &rep.Endpoints[i]
		l.ParkedAggregates = parkedBy[laneKey{l.Pipeline, l.ID}]
		l.Backlog = backlogBy[laneKey{l.Pipeline, l.ID}]
		l.OldestUndeliveredSeconds = ageOf(rep.now, l.OldestUndeliveredAt)
		l.ReportedAgeSecond = ageOf(rep.now, l.ReportedAt)
		if l.FailuresInRow > 0 || l.ParkedAggregates > 0 {
			rep.Totals["failing"]++
		}
	}
	slices.SortFunc(rep.Endpoints, func(a, b endpointStatusLine) int {
		return cmp.Or(strings.Compare(a.Pipeline, b.Pipeline), strings.Compare(a.ID, b.ID))
	})
}

// byFamily sums counts per lane (P/E) over the shards of each pipeline.
func byFamily(perLane map[string]int64) map[laneKey]int64 {
	out := map[laneKey]int64{}
	for lane, n := range perLane {
		p, id, _ := strings.Cut(lane, "/")
		out[laneKey{familyOf(p), id}] += n
	}
	return out
}

// only narrows the report to pipeline name (a pipeline, or one shard of it).
func (rep endpointReport) only(name string) (endpointReport, error) {
	var names []string
	for _, p := range rep.Pipelines {
		names = append(names, p.Name)
		if p.Name == name {
			rep.Pipelines = []endpointPipeline{p}
			rep.Endpoints = slices.DeleteFunc(rep.Endpoints, func(l endpointStatusLine) bool { return l.Pipeline != name })
			rep.Warnings = slices.DeleteFunc(rep.Warnings, func(w string) bool {
				return strings.HasPrefix(w, "pipeline ") && familyOf(strings.Fields(w)[1]) != name
			})
			return rep, nil
		}
	}
	if f := familyOf(name); f != name && slices.Contains(names, f) {
		return rep, usageError{fmt.Errorf("--pipeline %s is a shard: status --endpoints sums the shards of a pipeline; use --pipeline %s", name, f)}
	}
	if len(names) == 0 {
		return rep, usageError{fmt.Errorf("--pipeline %s: no pipeline has run with endpoints yet (outbox-relay run --endpoints)", name)}
	}
	return rep, usageError{fmt.Errorf("--pipeline %s: no such pipeline with endpoints; those with endpoints: %s", name, strings.Join(names, ", "))}
}

// earliest and latest keep the earlier (later) of a kept time and t; a zero t is NULL.
func earliest(kept *time.Time, t time.Time) *time.Time {
	if t.IsZero() || (kept != nil && !t.Before(*kept)) {
		return kept
	}
	return &t
}

func latest(kept *time.Time, t time.Time) *time.Time {
	if t.IsZero() || (kept != nil && !t.After(*kept)) {
		return kept
	}
	return &t
}
