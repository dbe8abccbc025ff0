package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The interleaving evidence of a failed endpoints run (evidence.txt in the run's directory):
// an order violation, say, once in six runs, depends on the interleaving, not only on the
// seed, so a failed run must carry what is needed to explain it without a rerun. For each
// violation: the endpoint's versions around it, every delivery of its (endpoint, aggregate)
// with receive time, relay process, event id, sequence and attempt, the faults, blackouts and
// 410 episodes in force around it, and the relay processes alive then (their logs are
// relay-<id>.log beside it).

// span is an interval of a fault that lasts (a blackout, a 410 episode).
type span struct {
	What     string
	ID       string // the endpoint, if one
	From, To time.Time
}

// evidenceWindow is how far before a violation the evidence looks for faults and process
// starts and exits; after it, evidenceAfter.
const (
	evidenceWindow   = 10 * time.Second
	evidenceAfter    = time.Second
	evidenceMax      = 40 // violations described; the rest are counted
	evidenceAggMax   = 60 // deliveries listed per (endpoint, aggregate), around the violation
	evidenceFaultCap = 20
)

// writeEvidence writes evidence.txt into dir for the violations of res; it returns the path,
// or "" if there was nothing to write or it could not.
func (t *harness) writeEvidence(dir string, res *result) string {
	v := res.Endpoints
	if v == nil || len(v.Focus)+len(res.PendingRows) == 0 {
		return ""
	}
	tl, _ := t.eps.snapshot()
	t.eps.mu.Lock()
	spans := append([]span(nil), t.eps.blackoutLog...)
	t.eps.mu.Unlock()
	byAgg := map[string][]delivery{}
	for _, d := range t.recv.deliveries() {
		k := d.Endpoint + " " + d.Aggregate
		byAgg[k] = append(byAgg[k], d)
	}
	procs := t.fleet.all()
	var b strings.Builder
	fmt.Fprintf(&b, "# Interleaving evidence: %d violations (the first %d described); times are the host's clock.\n",
		len(v.Focus), min(len(v.Focus), evidenceMax))
	fmt.Fprintf(&b, "# Relay processes' logs: relay-<id>.log in %s; the run started at %s.\n", dir, t.start.Format(stamp))
	for i, f := range v.Focus[:min(len(v.Focus), evidenceMax)] {
		fmt.Fprintf(&b, "\n## %d. %s\n", i+1, f.What)
		fmt.Fprintf(&b, "at %s (%.3fs into the run); endpoint %s, aggregate %s, event %s\n", f.At.Format(stamp),
			f.At.Sub(t.start).Seconds(), f.Endpoint, f.Aggregate, f.Event)
		b.WriteString("endpoint versions:\n")
		for _, ver := range tl[f.Endpoint] {
			fmt.Fprintf(&b, "  %s %s state=%s subscription=%v/%v commit=[%s,%s) lo=%s\n", ver.At.Format(stamp), ver.Op,
				ver.State, ver.EventTypes, ver.AggTypes, ver.Before, ver.After, ver.Lo)
		}
		writeAggDeliveries(&b, byAgg[f.Endpoint+" "+f.Aggregate], f)
		writeFaultsAround(&b, t.faults.Log, spans, f)
		writeProcsAround(&b, procs, f.At)
	}
	if len(res.PendingRows) > 0 {
		t.ledger.mu.Lock()
		txs := t.ledger.txs
		t.ledger.mu.Unlock()
		writePendingEvidence(&b, res.PendingRows, t.recv.deliveries(), txs, tl)
	}
	path := filepath.Join(dir, "evidence.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.logf("could not write the evidence: %v", err)
		return ""
	}
	return path
}

// writeAggDeliveries lists the deliveries of one (endpoint, aggregate), at most
// evidenceAggMax around the one of the violation's event.
func writeAggDeliveries(b *strings.Builder, ds []delivery, f focus) {
	at := sort.Search(len(ds), func(i int) bool { return !ds[i].At.Before(f.At) })
	lo := max(0, at-evidenceAggMax/2)
	hi := min(len(ds), lo+evidenceAggMax)
	fmt.Fprintf(b, "deliveries to %s of %s (%d; %d–%d listed): receive time, relay, event, seq, X-Event-Sequence, attempt\n",
		f.Endpoint, f.Aggregate, len(ds), lo+1, hi)
	for _, d := range ds[lo:hi] {
		mark := " "
		if d.ID == f.Event {
			mark = ">"
		}
		relay := "relay ?"
		if d.Relay != 0 {
			relay = fmt.Sprintf("relay %d", d.Relay)
		}
		fmt.Fprintf(b, " %s %s %s %s seq %d %s attempt %d\n", mark, d.At.Format(stamp), relay, d.ID, d.Seq, d.Sequence, d.Attempt)
	}
}

// writeFaultsAround lists the faults injected in the window before f and the blackouts and
// 410 episodes of f's endpoint overlapping it.
func writeFaultsAround(b *strings.Builder, log []injected, spans []span, f focus) {
	from, to := f.At.Add(-evidenceWindow), f.At.Add(evidenceAfter)
	b.WriteString("faults from 10s before to 1s after:\n")
	n := 0
	for _, in := range log {
		if in.At.After(from) && in.At.Before(to) && n < evidenceFaultCap {
			fmt.Fprintf(b, "  %s %s\n", in.At.Format(stamp), in.What)
			n++
		}
	}
	for _, s := range spans {
		if s.ID == f.Endpoint && s.From.Before(to) && s.To.After(from) {
			fmt.Fprintf(b, "  %s–%s %s\n", s.From.Format(stamp), s.To.Format(stamp), s.What)
			n++
		}
	}
	if n == 0 {
		b.WriteString("  none\n")
	}
}

// writeProcsAround lists the relay processes alive at t and those started or exited in the
// window before it.
func writeProcsAround(b *strings.Builder, procs []*relayProc, t time.Time) {
	from := t.Add(-evidenceWindow)
	b.WriteString("relay processes:\n")
	for _, p := range procs {
		exited := p.exited()
		alive := !p.startedAt.After(t) && (!exited || p.exitedAt.After(t))
		if !alive && (p.startedAt.After(t) || exited && p.exitedAt.Before(from)) {
			continue
		}
		s := fmt.Sprintf("  relay %d (relay-%d.log): started %s", p.id, p.id, p.startedAt.Format(stamp))
		if exited {
			s += ", exited " + p.exitedAt.Format(stamp)
		}
		if alive {
			s += "; alive then"
		}
		b.WriteString(s + "\n")
	}
}

// writePendingEvidence lists, for each row left pending (the oldest few), every delivery of its
// event (to any endpoint), the endpoints its commit routed it to (required, optional: dropped
// by a later removal, uncertain: a 410's window) and those endpoints' changes from 10s before
// the row's creation on: the endpoint that still holds it, or the change after which nobody
// marked it.
func writePendingEvidence(b *strings.Builder, rows []pendingRow, ds []delivery, txs []txRecord, tl timeline) {
	byID := map[string][]delivery{}
	for _, d := range ds {
		byID[d.ID] = append(byID[d.ID], d)
	}
	commits := commitsOf(txs, ds)
	type at struct{ tx, event int }
	where := map[string]at{}
	for _, r := range rows {
		where[r.ID] = at{-1, -1}
	}
	for i, tx := range txs {
		for k, e := range tx.Events {
			if _, ok := where[e.ID]; ok {
				where[e.ID] = at{i, k}
			}
		}
	}
	epIDs := make([]string, 0, len(tl))
	for id := range tl {
		epIDs = append(epIDs, id)
	}
	sort.Strings(epIDs)
	fmt.Fprintf(b, "\n# Rows of outbox_events left pending (%d listed)\n", len(rows))
	for _, r := range rows {
		if r.ID == "" {
			fmt.Fprintf(b, "\n## %s\n", r.What)
			continue
		}
		fmt.Fprintf(b, "\n## %s\ndeliveries of it (receive time, endpoint, relay, X-Event-Sequence, attempt):\n", r.What)
		eps := map[string]bool{}
		for _, d := range byID[r.ID] {
			fmt.Fprintf(b, "  %s %s relay %d %s attempt %d\n", d.At.Format(stamp), d.Endpoint, d.Relay, d.Sequence, d.Attempt)
			eps[d.Endpoint] = true
		}
		if len(eps) == 0 {
			b.WriteString("  none\n")
		}
		if w := where[r.ID]; w.tx >= 0 {
			tx := txs[w.tx]
			e := tx.Events[w.event]
			b.WriteString("routed at its commit to:\n")
			n := 0
			for _, id := range epIDs {
				p := rule(tl[id], posOf(tx, commits[w.tx]), e)
				if !p.Routed && p.Why != whyPausedDropped {
					continue
				}
				kind := "required"
				switch {
				case p.Uncertain:
					kind = "uncertain (a 410's window)"
				case !p.Routed:
					kind = "held by a pause, then dropped"
				case !p.Required:
					kind = "optional (removed later)"
				}
				fmt.Fprintf(b, "  %s: %s\n", id, kind)
				eps[id] = true
				n++
			}
			if n == 0 {
				b.WriteString("  no endpoint\n")
			}
		}
		ids := make([]string, 0, len(eps))
		for id := range eps {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			for _, ver := range tl[id] {
				if !ver.At.Before(r.Created.Add(-evidenceWindow)) {
					fmt.Fprintf(b, "  %s: %s %s state=%s exists=%v\n", id, ver.At.Format(stamp), ver.Op, ver.State, ver.Exists)
				}
			}
		}
	}
}
