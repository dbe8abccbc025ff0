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
// each endpoint, the version of the endpoint in force at the transaction's time (endpoints.go)
// says what rule 4 of issue 24 allows:
//
//   - not routed: no version yet (committed before the endpoint's creation), removed, disabled,
//     or outside its subscription; also paused and then disabled or removed before any resume
//     (held, then settled without sending). Any delivery of the pair is a violation.
//   - routed while enabled: it must be delivered.
//   - routed while paused: it must be delivered, and not before the resume (the first later
//     version enabled): a delivery the receiver recorded before the resume's time is one made
//     while paused. The receiver's clock and the server's are the host's.
//   - either way, if a later version disables or removes the endpoint, the relay may settle the
//     pair without sending (abandoned): it is optional, neither lost if missing nor wrong if
//     delivered. A disable keeps what the endpoint held in its backlog and delivers it after a
//     later enable (a removal drops it), so such a delivery is no failure either; it stays
//     optional, since a resend from before the disable is not routed to it again. A pair
//     routed while paused and disabled before any resume is delivered, if at all, after the
//     first later resume or enable.
//
// Then: lost = a required pair never delivered; order = per (endpoint, aggregate), first
// deliveries of routed pairs in commit order (an optional pair may be missing from the
// sequence, never out of place); duplicates are allowed and counted.
//
// Confirm: confirm.go's argument, per pair. A correct relay settles a transaction only once
// each endpoint its events route to has answered for them, or abandoned them because the
// endpoint was disabled or removed; so a sample of the slot that passed the transaction while
// one of its pairs was undelivered below the sample's mark is a violation, unless that pair's
// excuse (the disable or removal that lets it be abandoned) committed before the sample. A
// pair held by a pause and then dropped holds the slot the same way until its excuse.

// pairRule is what rule 4 says of one (event, endpoint) pair.
type pairRule struct {
	Routed    bool
	Why       string    // why it is not routed
	Required  bool      // routed, and no later disable or removal may have abandoned it
	NotBefore time.Time // routed while paused: the resume's time (far future if none); else zero
	// Excuse is the time of the first disable or removal after the commit, from which the
	// relay may abandon the pair; zero if none.
	Excuse time.Time
}

// holds reports whether the pair keeps its transaction from being confirmed until delivered,
// at a sample taken at time at.
func (p pairRule) holds(at time.Time) bool {
	return (p.Routed || p.Why == whyPausedDropped) && (p.Excuse.IsZero() || p.Excuse.After(at))
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

// rule classifies the pair of e, committed by a transaction at time at, and the endpoint of
// versions vs.
func rule(vs []epVersion, at time.Time, e event) pairRule {
	k := sort.Search(len(vs), func(i int) bool { return !vs[i].At.Before(at) }) - 1
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
	p := pairRule{Routed: true}
	later := vs[k+1:]
	for _, v := range later {
		if !v.Exists || v.State == stDisabled {
			p.Excuse = v.At
			break
		}
	}
	if vs[k].State == stPaused {
		// Held by the pause. A disable keeps what the endpoint held (in its backlog) for a
		// later enable, so the pair may be delivered once the endpoint is enabled again, by
		// a resume or an enable; a removal before that drops it.
		p.NotBefore = never
		for _, v := range later {
			if !v.Exists {
				return pairRule{Why: whyPausedDropped, Excuse: p.Excuse}
			}
			if v.State == stEnabled {
				p.NotBefore = v.At
				break
			}
		}
		if !p.Excuse.IsZero() && p.NotBefore.Equal(never) {
			return pairRule{Why: whyPausedDropped, Excuse: p.Excuse} // disabled, never enabled again
		}
	}
	p.Required = p.Excuse.IsZero()
	return p
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
	// Pairs by rule: required, optional (routed, a later disable or removal may abandon them),
	// and not routed by reason; the paused ones among the routed.
	Required, Optional, Paused int
	NotRouted                  map[string]int
	// Delivered pairs: required, optional, and routed while paused (delivered after the resume).
	Delivered, OptionalDelivered, PausedDelivered int
	// LateOptional counts optional pairs first delivered after the disable or removal that let
	// the relay abandon them (allowed: the relay learns of the change later; reported).
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
// by reason.
func classifyPairs(txs []txRecord, tl timeline) ([]routedPair, map[string]int) {
	ids := make([]string, 0, len(tl))
	for id := range tl {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var out []routedPair
	notRouted := map[string]int{}
	for i, tx := range txs {
		for _, e := range tx.Events {
			for _, id := range ids {
				p := rule(tl[id], tx.At, e)
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

// requiredPairs lists the pairKeys that must be delivered.
func requiredPairs(txs []txRecord, tl timeline) []string {
	var out []string
	routed, _ := classifyPairs(txs, tl)
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
	routed, notRouted := classifyPairs(r.Txs, r.Timeline)
	v.NotRouted = notRouted
	x := epIndex{r: r, committed: map[string]event{}, txOf: map[string]int{}, rules: make(map[string]pairRule, len(routed)),
		first: map[string]int{}, last: map[string]int{}}
	for i, tx := range r.Txs {
		for _, e := range tx.Events {
			x.committed[e.ID], x.txOf[e.ID] = e, i
		}
	}
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
		}
	}
	v.PhantomsRolledBack, v.PhantomsAborted, v.PhantomsUnknown = classifyPhantoms(phantoms, r.RolledBack, r.Aborted)
	v.confirm(r, routed, x.first, x.committed)
	return v
}

// epIndex is what checkEndpoints looks deliveries up in, and what it has seen of them.
type epIndex struct {
	r         epRecord
	committed map[string]event
	txOf      map[string]int      // event id → its transaction's index
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
	txAt := x.r.Txs[x.txOf[d.ID]].At
	p, ok := x.rules[key]
	if !ok {
		p = rule(vs, txAt, e)
	}
	if !p.Routed {
		v.Outside = append(v.Outside, fmt.Sprintf("%s (%s, %s, tenant %q, committed at %s) delivered to %s: %s; %s",
			d.ID, e.Aggregate, e.EventType, e.Tenant, txAt.Format(stamp), d.Endpoint, p.Why, around(vs, txAt)))
	} else if d.At.Before(p.NotBefore) {
		v.WhilePaused = append(v.WhilePaused, fmt.Sprintf("%s delivered to %s at %s, committed while it was paused, "+
			"before its resume at %s", d.ID, d.Endpoint, d.At.Format(stamp), fmtResume(p.NotBefore)))
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
		if d.At.After(p.Excuse) {
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
func (v *epVerdict) confirm(r epRecord, routed []routedPair, first map[string]int, committed map[string]event) {
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
	commits, seqErrs := commitLSNs(r.Txs, r.Deliveries, committed)
	v.SequenceErrors = seqErrs
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
	v.ConfirmViolations = describe(pairConfirmViolations(r.Samples, after, holds, r.Backlog), "After(tx)")
	v.ConfirmSeqViolations = describe(pairConfirmViolations(r.Samples, commits, holds, r.Backlog), "commit LSN")
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
