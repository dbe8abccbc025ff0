package main

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
)

// The endpoints run's checks, over (event, endpoint) pairs. For each committed transaction and
// each endpoint, the version of the endpoint in force at the transaction's commit (the last
// change committed before it, in commit order: epVersion.after) says what rule 4 of issue 24
// allows, with the guarantees of issue 38:
//
//   - not routed: no version yet (committed before the endpoint's creation), removed, disabled,
//     or outside its subscription; also paused and then removed before any resume (held, then
//     dropped). Any delivery of the pair is a violation.
//   - routed while enabled: it must be delivered.
//   - routed while paused: it must be delivered, and not before the resume (the first later
//     version enabled, a resume or an enable): a delivery the receiver recorded before the
//     resume's time is one made while paused. The receiver's clock and the server's are the
//     host's.
//   - a later disable changes neither: the endpoint keeps what it was owed at the disable and
//     gets it after the enable, first and in order (the run enables every disabled endpoint at
//     its end), so the pair stays required.
//   - a later removal lets the relay drop the pair: it is optional from the removal's commit,
//     neither lost if missing nor wrong if delivered (the relay learns of the removal a little
//     later; such late deliveries are counted).
//
// Then: lost = a required pair never delivered; order = per (endpoint, aggregate), first
// deliveries of routed pairs in commit order (an optional pair may be missing from the
// sequence, never out of place); duplicates are allowed and counted, per endpoint.
//
// Confirm: confirm.go's argument, per pair. A correct relay settles a transaction only once
// each endpoint its events route to has answered for them, kept them in its backlog (a spill,
// a disable), or dropped them because the endpoint was removed; so a sample of the slot that
// passed the transaction while one of its pairs was neither delivered below the sample's mark
// nor in a backlog is a violation, unless that pair's excuse (the removal) committed before the
// sample. A pair held by a pause and then dropped holds the slot the same way until its excuse.

// pairRule is what rule 4 says of one (event, endpoint) pair.
type pairRule struct {
	Routed    bool
	Why       string    // why it is not routed
	Required  bool      // routed, and no later removal may have dropped it
	NotBefore time.Time // routed while paused: the resume's time (far future if none); else zero
	// Excuse is the time of the first removal after the commit (or of a disable never
	// followed by an enable), from which the relay may drop the pair; zero if none.
	Excuse time.Time
	// Uncertain: the transaction committed inside the window of a change the relay made
	// itself (a 410's disable) and the two sides route it differently: optional, allowed
	// either way, and it never holds the slot.
	Uncertain bool
}

// holds reports whether the pair keeps its transaction from being confirmed until delivered,
// at a sample taken at time at.
func (p pairRule) holds(at time.Time) bool {
	return (p.Routed || p.Why == whyPausedDropped) && !p.Uncertain && (p.Excuse.IsZero() || p.Excuse.After(at))
}

// Reasons a pair is not routed.
const (
	whyBeforeCreation = "committed before the endpoint's creation"
	whyRemoved        = "committed after the endpoint's removal"
	whyDisabled       = "committed while the endpoint was disabled"
	whyOutside        = "outside the endpoint's subscription at commit"
	whyPausedDropped  = "committed while paused, and the endpoint was removed, or disabled for good, before any resume"
)

var whys = []string{whyBeforeCreation, whyRemoved, whyDisabled, whyOutside, whyPausedDropped}

// never is the NotBefore of a pair held by a pause that never ended.
var never = time.Unix(1<<40, 0)

// txPos is where a transaction committed, as far as the run knows: its commit LSN from a
// delivery's X-Event-Sequence (0 if none was delivered), the bounds its writer read around
// COMMIT (txRecord.Before, After; 0 if not read), and the time of its first insert.
type txPos struct {
	At                    time.Time
	Commit, Before, After pglogrepl.LSN
}

// posOf is tx's position, with its commit LSN c (0: unknown).
func posOf(tx txRecord, c pglogrepl.LSN) txPos {
	return txPos{At: tx.At, Commit: c, Before: tx.Before, After: tx.After}
}

// place reports whether the change v committed after the transaction at p, in commit order as
// the relay routes (issue 38: a change applies at its commit, to its whole transaction), and
// whether the run can tell (sure). v.Before was read while the change held its EXCLUSIVE lock
// on outbox_events, so no transaction with events commits between v.Before and the change's
// commit: a commit record at or past v.Before is after the change, one below it before. The
// commit LSN decides when a delivery told it, else the writer's bounds when they settle it,
// else the clock method of endpoints.go (equivalent, by the same lock). A change the relay made
// itself (v.Lo set) is only bounded by the WAL: inside its window the run cannot tell.
func (v epVersion) place(p txPos) (after, sure bool) {
	if v.Lo != 0 {
		switch {
		case p.Commit != 0:
			return p.Commit < v.Lo, p.Commit < v.Lo || p.Commit >= v.After
		case p.After != 0 && p.After <= v.Lo:
			return true, true
		case p.Before != 0 && p.Before >= v.After:
			return false, true
		}
		return false, false
	}
	if v.Before != 0 {
		switch {
		case p.Commit != 0:
			return p.Commit < v.Before, true
		case p.After != 0 && p.After <= v.Before:
			return true, true
		case p.Before != 0 && p.Before >= v.Before:
			return false, true
		}
	}
	return !v.At.Before(p.At), true
}

// rule classifies the pair of e, committed by a transaction at p, and the endpoint of
// versions vs. Since issue 38 a disable keeps what the endpoint was owed and delivers it after
// the enable, first and in order: only a removal (or a disable never followed by an enable)
// lets the relay settle a routed pair without sending it. A pair whose transaction cannot be
// placed against one of the changes is uncertain unless both placements agree.
func rule(vs []epVersion, p txPos, e event) pairRule {
	last := func(uncertainBefore bool) int {
		k := len(vs) - 1
		for ; k >= 0; k-- {
			after, sure := vs[k].place(p)
			if !after && (sure || uncertainBefore) {
				break
			}
		}
		return k
	}
	k, k2 := last(false), last(true)
	r := ruleAt(vs, k, e)
	if k2 != k {
		if r2 := ruleAt(vs, k2, e); r2 != r {
			return pairRule{Routed: true, Uncertain: true}
		}
	}
	return r
}

// ruleAt is rule with vs[k] the version in force at the commit (k < 0: none).
func ruleAt(vs []epVersion, k int, e event) pairRule {
	switch {
	case k < 0:
		return pairRule{Why: whyBeforeCreation}
	case !vs[k].Exists:
		return pairRule{Why: whyRemoved}
	case vs[k].State == stDisabled:
		return pairRule{Why: whyDisabled}
	case !vs[k].subscribed(e):
		return pairRule{Why: whyOutside}
	}
	r := pairRule{Routed: true, Excuse: excuse(vs[k+1:])}
	if vs[k].State == stPaused {
		// Held by the pause, delivered once the endpoint is enabled again (a resume, or an
		// enable after a disable); a removal before that drops it.
		r.NotBefore = never
		for _, v := range vs[k+1:] {
			if !v.Exists {
				return pairRule{Why: whyPausedDropped, Excuse: r.Excuse}
			}
			if v.State == stEnabled {
				r.NotBefore = v.At
				break
			}
		}
		if !r.Excuse.IsZero() && r.NotBefore.Equal(never) {
			return pairRule{Why: whyPausedDropped, Excuse: r.Excuse} // disabled, never enabled again
		}
	}
	r.Required = r.Excuse.IsZero()
	return r
}

// excuse is the time from which the relay may settle a pair routed before the versions later
// without sending it: the first removal, or a disable with no enable after it (the run
// enables every disabled endpoint at its end, so that is only an enable the run could not
// make); zero if none.
func excuse(later []epVersion) time.Time {
	var disabled time.Time
	for _, v := range later {
		switch {
		case !v.Exists:
			return v.At // a disable before it kept the pair (in the backlog) until then
		case v.State == stDisabled && disabled.IsZero():
			disabled = v.At
		case v.State != stDisabled:
			disabled = time.Time{}
		}
	}
	return disabled
}

// epRecord is what an endpoints run collected, for its checks.
type epRecord struct {
	Txs        []txRecord
	RolledBack []string
	Aborted    []string
	Deliveries []delivery
	Samples    []sample
	Timeline   timeline
	Backlog    *backlogIndex // the pairs the samples found in backlogs; nil: none read
}

// epVerdict is what the endpoints run's checks found. Lists hold descriptions.
type epVerdict struct {
	Endpoints int // endpoints that ever existed
	Committed int // events
	// Pairs by rule: required, optional (routed, a later removal may drop them),
	// and not routed by reason; the paused ones among the routed.
	// Uncertain counts the optional pairs a 410's disable left uncertain (pairRule).
	Required, Optional, Paused, Uncertain int
	NotRouted                             map[string]int
	// Delivered pairs: required, optional, and routed while paused (delivered after the resume).
	Delivered, OptionalDelivered, PausedDelivered int
	// LateOptional counts optional pairs first delivered after the removal that let the relay
	// drop them (allowed: the relay learns of the change later; reported).
	LateOptional int
	Lost         []string
	// Phantoms: deliveries of ids that never committed; UnknownEndpoint: deliveries recorded
	// for an endpoint the manager never created.
	PhantomsRolledBack, PhantomsAborted, PhantomsUnknown []string
	UnknownEndpoint                                      []string
	// Outside: deliveries of pairs rule 4 does not route, with the reason; WhilePaused:
	// deliveries of pairs routed while paused, recorded before the resume.
	Outside, WhilePaused []string
	OrderViolations      []string
	Duplicates           int // deliveries beyond the first per pair
	// PerEndpoint counts each endpoint's first deliveries and duplicates (issue 38: a restart
	// or takeover must not send a healthy endpoint again what it had).
	PerEndpoint map[string]*endpointDups
	// Confirm: transactions the slot passed before every required pair was delivered, by
	// After(tx) and by the commit LSN from X-Event-Sequence.
	ConfirmViolations, ConfirmSeqViolations []string
	SequenceErrors                          []string
	// OrderingErrors cross-check the clock method (endpoints.go) against the WAL: a
	// transaction placed before a change whose commit LSN is past the change's commit, or
	// after one whose commit LSN is before it. Any means the checks above cannot be trusted.
	OrderingErrors    []string
	Samples, Backward int
	LastCommit        pglogrepl.LSN
	// Focus is each violation above with the (endpoint, aggregate) it concerns, for the
	// evidence file of a failed run (evidence.go).
	Focus []focus
}

// focus is one violation and where to look: its description, the endpoint, aggregate and
// event, and the time it happened (delivery, commit or sample).
type focus struct {
	What                string
	Endpoint, Aggregate string
	Event               string
	At                  time.Time
}

// focus notes the violation just appended to list.
func (v *epVerdict) focus(list []string, endpoint, aggregate, event string, at time.Time) {
	v.Focus = append(v.Focus, focus{What: list[len(list)-1], Endpoint: endpoint, Aggregate: aggregate, Event: event, At: at})
}

func (v epVerdict) ok() bool {
	return len(v.Lost)+len(v.PhantomsRolledBack)+len(v.PhantomsAborted)+len(v.PhantomsUnknown)+
		len(v.UnknownEndpoint)+len(v.Outside)+len(v.WhilePaused)+len(v.OrderViolations)+
		len(v.ConfirmViolations)+len(v.ConfirmSeqViolations)+len(v.SequenceErrors)+len(v.OrderingErrors) == 0
}

// routedPair is a pair that rule 4 routes, or that a pause held before its endpoint was
// dropped: the pairs that can be lost or hold the slot. The others are only counted, since a
// long run has millions of them.
type routedPair struct {
	key  string // pairKey
	tx   int
	rule pairRule
}

// classifyPairs returns the routed pairs, by transaction and endpoint id, and counts the others
// by reason. commits are the transactions' commit LSNs (0 or nil: unknown).
func classifyPairs(txs []txRecord, commits []pglogrepl.LSN, tl timeline) ([]routedPair, map[string]int) {
	ids := make([]string, 0, len(tl))
	for id := range tl {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []routedPair
	notRouted := map[string]int{}
	for i, tx := range txs {
		var c pglogrepl.LSN
		if i < len(commits) {
			c = commits[i]
		}
		for _, e := range tx.Events {
			for _, id := range ids {
				p := rule(tl[id], posOf(tx, c), e)
				if p.Routed || p.Why == whyPausedDropped {
					out = append(out, routedPair{key: pairKey(id, e.ID), tx: i, rule: p})
				}
				if !p.Routed {
					notRouted[p.Why]++
				}
			}
		}
	}
	return out, notRouted
}

// requiredPairs lists the pairKeys that must be delivered, placing the transactions by the
// commit LSNs of the deliveries ds so far.
func requiredPairs(txs []txRecord, ds []delivery, tl timeline) []string {
	var out []string
	routed, _ := classifyPairs(txs, commitsOf(txs, ds), tl)
	for _, p := range routed {
		if p.rule.Required {
			out = append(out, p.key)
		}
	}
	return out
}

// checkEndpoints evaluates the endpoints run's invariants.
func checkEndpoints(r epRecord) epVerdict {
	v := epVerdict{Endpoints: len(r.Timeline), PerEndpoint: map[string]*endpointDups{}}
	x := epIndex{r: r, committed: map[string]event{}, txOf: map[string]int{},
		first: map[string]int{}, last: map[string]int{}}
	for i, tx := range r.Txs {
		for _, e := range tx.Events {
			x.committed[e.ID], x.txOf[e.ID] = e, i
		}
	}
	x.commits, v.SequenceErrors = commitLSNs(r.Txs, r.Deliveries, x.committed)
	routed, notRouted := classifyPairs(r.Txs, x.commits, r.Timeline)
	v.NotRouted = notRouted
	x.rules = make(map[string]pairRule, len(routed))
	v.Committed = len(x.committed)
	for _, rp := range routed {
		x.rules[rp.key] = rp.rule
		switch p := rp.rule; {
		case !p.Routed:
		case p.Required:
			v.Required++
		default:
			v.Optional++
		}
		if rp.rule.Routed && !rp.rule.NotBefore.IsZero() {
			v.Paused++
		}
		if rp.rule.Uncertain {
			v.Uncertain++
		}
	}
	var phantoms []string
	for i, d := range r.Deliveries {
		if _, ok := x.committed[d.ID]; !ok {
			phantoms = append(phantoms, d.ID)
			continue
		}
		v.delivery(&x, i, d)
	}
	for _, rp := range routed {
		if _, ok := x.first[rp.key]; rp.rule.Required && !ok {
			ep, _, _ := strings.Cut(rp.key, " ")
			txAt := r.Txs[rp.tx].At
			v.Lost = append(v.Lost, fmt.Sprintf("%s, committed at %s; %s", rp.key, txAt.Format(stamp), around(r.Timeline[ep], txAt)))
			_, id, _ := strings.Cut(rp.key, " ")
			v.focus(v.Lost, ep, x.committed[id].Aggregate, id, txAt)
		}
	}
	v.PhantomsRolledBack, v.PhantomsAborted, v.PhantomsUnknown = classifyPhantoms(phantoms, r.RolledBack, r.Aborted)
	v.confirm(r, routed, x.first, x.commits)
	return v
}

// epIndex is what checkEndpoints looks deliveries up in, and what it has seen of them.
type epIndex struct {
	r         epRecord
	committed map[string]event
	txOf      map[string]int      // event id → its transaction's index
	commits   []pglogrepl.LSN     // the transactions' commit LSNs (0: none delivered)
	rules     map[string]pairRule // routed pairs, by pairKey
	first     map[string]int      // pairKey → index of its first delivery
	last      map[string]int      // endpoint + aggregate → seq of its latest first delivery
}

// delivery checks the i-th delivery, d, of a committed event.
func (v *epVerdict) delivery(x *epIndex, i int, d delivery) {
	e, vs := x.committed[d.ID], x.r.Timeline[d.Endpoint]
	if vs == nil {
		v.UnknownEndpoint = append(v.UnknownEndpoint, fmt.Sprintf("%s delivered to %q, an endpoint never created", d.ID, d.Endpoint))
		return
	}
	key := pairKey(d.Endpoint, d.ID)
	ti := x.txOf[d.ID]
	txAt := x.r.Txs[ti].At
	p, ok := x.rules[key]
	if !ok {
		p = rule(vs, posOf(x.r.Txs[ti], x.commits[ti]), e)
	}
	if !p.Routed {
		v.Outside = append(v.Outside, fmt.Sprintf("%s (%s, %s, tenant %q, committed at %s) delivered to %s: %s; %s",
			d.ID, e.Aggregate, e.EventType, e.Tenant, txAt.Format(stamp), d.Endpoint, p.Why, around(vs, txAt)))
		v.focus(v.Outside, d.Endpoint, e.Aggregate, d.ID, d.At)
	} else if d.At.Before(p.NotBefore) {
		v.WhilePaused = append(v.WhilePaused, fmt.Sprintf("%s delivered to %s at %s, committed while it was paused, "+
			"before its resume at %s", d.ID, d.Endpoint, d.At.Format(stamp), fmtResume(p.NotBefore)))
		v.focus(v.WhilePaused, d.Endpoint, e.Aggregate, d.ID, d.At)
	}
	n := v.PerEndpoint[d.Endpoint]
	if n == nil {
		n = &endpointDups{}
		v.PerEndpoint[d.Endpoint] = n
	}
	if _, ok := x.first[key]; ok {
		v.Duplicates++
		n.Again++
		return
	}
	x.first[key] = i
	n.First++
	if !p.Routed {
		return
	}
	switch {
	case p.Required:
		v.Delivered++
	default:
		v.OptionalDelivered++
		if !p.Uncertain && d.At.After(p.Excuse) {
			v.LateOptional++
		}
	}
	if !p.NotBefore.IsZero() {
		v.PausedDelivered++
	}
	agg := d.Endpoint + " " + e.Aggregate
	if prev, ok := x.last[agg]; ok && e.Seq < prev {
		v.OrderViolations = append(v.OrderViolations, fmt.Sprintf("%s at %s: seq %d first delivered after seq %d",
			e.Aggregate, d.Endpoint, e.Seq, prev))
		v.focus(v.OrderViolations, d.Endpoint, e.Aggregate, d.ID, d.At)
	}
	x.last[agg] = max(x.last[agg], e.Seq)
}

// stamp is how the descriptions print times: the server's clock, to the microsecond.
const stamp = "15:04:05.000000"

// around describes the endpoint's version in force at t and the next one, for a failure's
// description.
func around(vs []epVersion, t time.Time) string {
	k := sort.Search(len(vs), func(i int) bool { return !vs[i].At.Before(t) })
	describe := func(v epVersion) string {
		return fmt.Sprintf("%s at %s (%s, tenant %q, event types %v, aggregate types %v)", v.Op, v.At.Format(stamp),
			v.State, v.Tenant, v.EventTypes, v.AggTypes)
	}
	s := "no version before"
	if k > 0 {
		s = "in force: " + describe(vs[k-1])
	}
	if k < len(vs) {
		s += "; next: " + describe(vs[k])
	}
	return s
}

func fmtResume(t time.Time) string {
	if t.Equal(never) {
		return "never"
	}
	return t.Format(stamp)
}

// confirm runs the confirm check over pairs, as the header comment says.
func (v *epVerdict) confirm(r epRecord, routed []routedPair, first map[string]int, commits []pglogrepl.LSN) {
	holds := make([][]holder, len(r.Txs))
	after := make([]pglogrepl.LSN, len(r.Txs))
	for i, tx := range r.Txs {
		after[i] = tx.After
	}
	for _, rp := range routed {
		idx, ok := first[rp.key]
		if !ok {
			idx = math.MaxInt
		}
		holds[rp.tx] = append(holds[rp.tx], holder{first: idx, rule: rp.rule, key: rp.key})
	}
	v.OrderingErrors = orderingErrors(r.Txs, commits, r.Timeline)
	for _, c := range commits {
		v.LastCommit = max(v.LastCommit, c)
	}
	v.Samples = len(r.Samples)
	for i := 1; i < len(r.Samples); i++ {
		if r.Samples[i].LSN < r.Samples[i-1].LSN {
			v.Backward++
		}
	}
	describe := func(vs []confirmViolation, bound string) []string {
		out := make([]string, len(vs))
		for i, x := range vs {
			tx, s := r.Txs[x.Tx], r.Samples[x.Sample]
			out[i] = fmt.Sprintf("writer %d tx of %d events: slot confirmed %s > %s %s at %s before all the "+
				"(event, endpoint) pairs it waits for were delivered (%s was not, nor in a backlog at the next read)",
				tx.Writer, len(tx.Events), s.LSN, bound, x.Bound, s.At.Format("15:04:05.000"), x.Pair)
		}
		return out
	}
	byAfter := pairConfirmViolations(r.Samples, after, holds, r.Backlog)
	byCommit := pairConfirmViolations(r.Samples, commits, holds, r.Backlog)
	v.ConfirmViolations = describe(byAfter, "After(tx)")
	v.ConfirmSeqViolations = describe(byCommit, "commit LSN")
	for i, list := range [][]confirmViolation{byAfter, byCommit} {
		descs := [][]string{v.ConfirmViolations, v.ConfirmSeqViolations}[i]
		for k, c := range list {
			ep, id, _ := strings.Cut(c.Pair, " ")
			var agg string
			for _, e := range r.Txs[c.Tx].Events {
				if e.ID == id {
					agg = e.Aggregate
				}
			}
			v.focus(descs[:k+1], ep, agg, id, r.Samples[c.Sample].At)
		}
	}
}

// holder is a pair that holds its transaction: the log index of its first delivery
// (math.MaxInt if none) and its rule.
type holder struct {
	first int
	rule  pairRule
	key   string // pairKey
}

// pairConfirmViolations returns, per transaction, the first sample above bound(tx) (0:
// unknown, skipped) taken while a pair holding tx had no delivery below the sample's mark.
// With bl, a pair counts as settled at a sample if it was delivered below the mark taken after
// the sample's backlog read, or was in the backlog then (confirm.go's sample says why that
// is sound).
func pairConfirmViolations(samples []sample, bound []pglogrepl.LSN, holds [][]holder, bl *backlogIndex) []confirmViolation {
	var out []confirmViolation
	for i := range bound {
		if bound[i] == 0 {
			continue
		}
	samples:
		for j, s := range samples {
			if s.LSN <= bound[i] {
				continue
			}
			for _, h := range holds[i] {
				mark := s.Mark
				if bl != nil {
					mark = s.BacklogMark
				}
				if h.first >= mark && h.rule.holds(s.At) && (bl == nil || !bl.has(s, h.key)) {
					out = append(out, confirmViolation{Tx: i, Sample: j, Bound: bound[i], Pair: h.key})
					break samples
				}
			}
		}
	}
	return out
}

// orderingErrors lists the transactions whose commit LSN (from X-Event-Sequence; 0: none
// delivered) contradicts the side of an endpoint change their time puts them on. A commit
// record starts at or after the change's Before if it follows the change, and before the
// change's After if it precedes it.
func orderingErrors(txs []txRecord, commits []pglogrepl.LSN, tl timeline) []string {
	ids := make([]string, 0, len(tl))
	for id := range tl {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []string
	for i, tx := range txs {
		c := commits[i]
		if c == 0 {
			continue
		}
		for _, id := range ids {
			for _, ver := range tl[id] {
				if ver.Lo != 0 {
					continue // the relay's own change: no clock_timestamp() to check
				}
				switch {
				case ver.After != 0 && tx.At.Before(ver.At) && c >= ver.After:
					out = append(out, fmt.Sprintf("writer %d tx at %s commits at %s, past the %s of %s at %s (committed below %s)",
						tx.Writer, tx.At.Format(stamp), c, ver.Op, id, ver.At.Format(stamp), ver.After))
				case ver.Before != 0 && ver.At.Before(tx.At) && c < ver.Before:
					out = append(out, fmt.Sprintf("writer %d tx at %s commits at %s, before the %s of %s at %s (committed at or above %s)",
						tx.Writer, tx.At.Format(stamp), c, ver.Op, id, ver.At.Format(stamp), ver.Before))
				}
			}
		}
	}
	return out
}

// endpointDups is how many pairs an endpoint got, and how many deliveries it got again.
type endpointDups struct{ First, Again int }

// dupsByEndpoint describes the duplicates per endpoint, the worst rates first (at most n).
func (v epVerdict) dupsByEndpoint(n int) string {
	ids := make([]string, 0, len(v.PerEndpoint))
	for id := range v.PerEndpoint {
		ids = append(ids, id)
	}
	rate := func(id string) float64 { d := v.PerEndpoint[id]; return pct(d.Again, d.First) }
	sort.Slice(ids, func(i, j int) bool {
		if ri, rj := rate(ids[i]), rate(ids[j]); ri != rj {
			return ri > rj
		}
		return ids[i] < ids[j]
	})
	parts := make([]string, 0, n)
	for _, id := range ids[:min(n, len(ids))] {
		d := v.PerEndpoint[id]
		parts = append(parts, fmt.Sprintf("%s %d of %d (%.2f%%)", id, d.Again, d.First, rate(id)))
	}
	if len(ids) > n {
		parts = append(parts, fmt.Sprintf("%d more", len(ids)-n))
	}
	return strings.Join(parts, ", ")
}

// commitsOf is the commit LSNs the deliveries ds tell of the transactions txs (0: none).
func commitsOf(txs []txRecord, ds []delivery) []pglogrepl.LSN {
	committed := map[string]event{}
	for _, tx := range txs {
		for _, e := range tx.Events {
			committed[e.ID] = e
		}
	}
	commits, _ := commitLSNs(txs, ds, committed)
	return commits
}
