package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/internal/relaytest"
)

// record is everything a run collected, for the checks.
type record struct {
	Txs        []txRecord // committed, each writer's in its commit order
	RolledBack []string   // ids of transactions rolled back on purpose
	Aborted    []string   // ids of transactions a fault cut off before commit
	Deliveries []delivery // 2xx answers, in the order recorded
	Samples    []sample
	Epochs     []slotEpoch    // slots created again after a slot-drop fault
	Applied    map[string]int // the consumer's applied table: event id → times applied
	InboxIDs   []string       // ids in the consumer's inbox_events
}

// verdict is what the checks found. Lists hold descriptions, counts are their lengths.
type verdict struct {
	Committed int
	Delivered int // distinct committed ids delivered
	Lost      []string
	// Phantoms are delivered ids that never committed: from transactions rolled back on
	// purpose, cut off by a fault, or never written at all.
	PhantomsRolledBack, PhantomsAborted, PhantomsUnknown []string
	OrderViolations                                      []string
	Duplicates                                           int // 2xx answers beyond the first per id
	// Inbox: applied more than once, committed but never applied, applied but never
	// committed; inbox_events rows that are not exactly the committed ids.
	DoubleApplied, NotApplied, ForeignApplied []string
	InboxMismatch                             []string
	AppliedRows, InboxRows                    int
	// Confirm: transactions the slot passed before they were delivered, by After(tx) and by
	// the commit LSN from X-Event-Sequence.
	ConfirmViolations, ConfirmSeqViolations []string
	// SequenceErrors are X-Event-Sequence values or payloads that contradict the ledger.
	SequenceErrors []string
	Samples        int
	Backward       int           // samples below the one before: the slot moved back
	LastCommit     pglogrepl.LSN // highest commit LSN delivered
}

// invariantsOK reports whether every delivery invariant holds.
func (v verdict) invariantsOK() bool {
	return len(v.Lost)+len(v.PhantomsRolledBack)+len(v.PhantomsAborted)+len(v.PhantomsUnknown)+
		len(v.OrderViolations)+len(v.DoubleApplied)+len(v.NotApplied)+len(v.ForeignApplied)+
		len(v.InboxMismatch)+len(v.ConfirmViolations)+len(v.ConfirmSeqViolations)+len(v.SequenceErrors) == 0
}

// check evaluates every invariant over what a run recorded.
func check(r record) verdict {
	var v verdict
	produced := relaytest.Result{}
	committed := map[string]event{}
	for _, tx := range r.Txs {
		for _, e := range tx.Events {
			produced.Committed = append(produced.Committed, relaytest.Committed{ID: e.ID, Aggregate: e.Aggregate, Seq: e.Seq})
			committed[e.ID] = e
		}
	}
	ds := make([]relaytest.Delivery, len(r.Deliveries))
	first := map[string]int{}
	for i, d := range r.Deliveries {
		ds[i] = relaytest.Delivery{ID: d.ID, Aggregate: d.Aggregate, Seq: d.Seq, Attempt: d.Attempt, Sequence: d.Sequence, At: d.At}
		if _, ok := first[d.ID]; !ok {
			first[d.ID] = i
		}
	}
	rep := relaytest.Check(produced, ds)
	v.Committed, v.Delivered, v.Lost, v.OrderViolations, v.Duplicates = rep.Committed, rep.Delivered, rep.Lost,
		rep.OrderViolations, rep.Duplicates
	v.PhantomsRolledBack, v.PhantomsAborted, v.PhantomsUnknown = classifyPhantoms(rep.Phantoms, r.RolledBack, r.Aborted)
	v.DoubleApplied, v.NotApplied, v.ForeignApplied = checkApplied(committed, r.Applied)
	v.InboxMismatch = checkInboxRows(committed, r.InboxIDs)
	v.AppliedRows, v.InboxRows = len(r.Applied), len(r.InboxIDs)

	commits, seqErrs := commitLSNs(r.Txs, r.Deliveries, committed)
	v.SequenceErrors = seqErrs
	for _, c := range commits {
		v.LastCommit = max(v.LastCommit, c)
	}
	done := fullyDelivered(r.Txs, first)
	after := make([]pglogrepl.LSN, len(r.Txs))
	for i, tx := range r.Txs {
		after[i] = tx.After
	}
	v.Samples = len(r.Samples)
	for i := 1; i < len(r.Samples); i++ {
		if r.Samples[i].LSN < r.Samples[i-1].LSN {
			v.Backward++
		}
	}
	v.ConfirmViolations = describeConfirm(r, confirmViolations(r.Samples, after, after, done, r.Epochs), "After(tx)")
	v.ConfirmSeqViolations = describeConfirm(r, confirmViolations(r.Samples, commits, after, done, r.Epochs), "commit LSN")
	return v
}

// classifyPhantoms splits delivered ids that never committed by where they came from.
func classifyPhantoms(phantoms, rolledBack, aborted []string) (rb, ab, unknown []string) {
	isRB, isAb := set(rolledBack), set(aborted)
	seen := map[string]bool{}
	for _, id := range phantoms {
		if seen[id] {
			continue
		}
		seen[id] = true
		switch {
		case isRB[id]:
			rb = append(rb, id)
		case isAb[id]:
			ab = append(ab, id)
		default:
			unknown = append(unknown, id)
		}
	}
	return rb, ab, unknown
}

// checkApplied compares the consumer's applied counts with the committed events.
func checkApplied(committed map[string]event, applied map[string]int) (double, missing, foreign []string) {
	for id, n := range applied {
		if _, ok := committed[id]; !ok {
			foreign = append(foreign, id)
		} else if n != 1 {
			double = append(double, fmt.Sprintf("%s applied %d times", id, n))
		}
	}
	for id := range committed {
		if _, ok := applied[id]; !ok {
			missing = append(missing, id)
		}
	}
	sort.Strings(double)
	sort.Strings(missing)
	sort.Strings(foreign)
	return double, missing, foreign
}

// checkInboxRows requires inbox_events to hold exactly the committed ids.
func checkInboxRows(committed map[string]event, ids []string) []string {
	var out []string
	have := set(ids)
	for _, id := range ids {
		if _, ok := committed[id]; !ok {
			out = append(out, id+": in inbox_events, never committed")
		}
	}
	for id := range committed {
		if !have[id] {
			out = append(out, id+": committed, not in inbox_events")
		}
	}
	if extra := len(ids) - len(have); extra > 0 {
		out = append(out, fmt.Sprintf("%d repeated ids in inbox_events", extra))
	}
	sort.Strings(out)
	return out
}

// commitLSNs reads each transaction's commit LSN from the X-Event-Sequence of its deliveries
// (0 if none was delivered) and lists every contradiction: an unreadable value, events of one
// transaction with different commit LSNs, an index that is not the event's position in its
// transaction, a commit LSN outside [Before, After), one writer's commits out of order, or a
// payload whose seq is not the one written.
func commitLSNs(txs []txRecord, ds []delivery, committed map[string]event) ([]pglogrepl.LSN, []string) {
	var errs []string
	type pos struct{ tx, index int }
	where := map[string]pos{}
	for i, tx := range txs {
		for k, e := range tx.Events {
			where[e.ID] = pos{i, k}
		}
	}
	commits := make([]pglogrepl.LSN, len(txs))
	for _, d := range ds {
		p, ok := where[d.ID]
		if !ok {
			continue // a phantom, reported as such
		}
		if d.Seq != committed[d.ID].Seq {
			errs = append(errs, fmt.Sprintf("%s: payload seq %d, written %d", d.ID, d.Seq, committed[d.ID].Seq))
		}
		lsn, index, err := parseSequence(d.Sequence)
		switch {
		case err == nil && lsn == 0:
			// A backfilled row (after a slot-drop): no commit LSN, and its index is its
			// position in the backfill.
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s: X-Event-Sequence %q: %v", d.ID, d.Sequence, err))
		case index != p.index:
			errs = append(errs, fmt.Sprintf("%s: X-Event-Sequence index %d, but it is event %d of its transaction", d.ID, index, p.index))
		case commits[p.tx] == 0:
			commits[p.tx] = lsn
		case commits[p.tx] != lsn:
			errs = append(errs, fmt.Sprintf("%s: commit LSN %s, another event of its transaction says %s", d.ID, lsn, commits[p.tx]))
		}
	}
	last := map[int]pglogrepl.LSN{}
	for i, tx := range txs {
		c := commits[i]
		if c == 0 {
			continue
		}
		if tx.Before != 0 && c < tx.Before || tx.After != 0 && c >= tx.After {
			errs = append(errs, fmt.Sprintf("writer %d: commit LSN %s outside [%s, %s) read around its COMMIT", tx.Writer, c, tx.Before, tx.After))
		}
		if c <= last[tx.Writer] {
			errs = append(errs, fmt.Sprintf("writer %d: commit LSN %s after %s, out of commit order", tx.Writer, c, last[tx.Writer]))
		}
		last[tx.Writer] = c
	}
	return commits, errs
}

// parseSequence reads "<commit LSN, 16 hex digits>-<index, 8 hex digits>".
func parseSequence(s string) (pglogrepl.LSN, int, error) {
	lsnHex, indexHex, ok := strings.Cut(s, "-")
	if !ok || len(lsnHex) != 16 || len(indexHex) != 8 {
		return 0, 0, fmt.Errorf("want 16 hex digits, '-', 8 hex digits")
	}
	lsn, err := strconv.ParseUint(lsnHex, 16, 64)
	if err != nil {
		return 0, 0, err
	}
	index, err := strconv.ParseUint(indexHex, 16, 32)
	if err != nil {
		return 0, 0, err
	}
	return pglogrepl.LSN(lsn), int(index), nil
}

func describeConfirm(r record, vs []confirmViolation, bound string) []string {
	out := make([]string, len(vs))
	for i, x := range vs {
		tx, s := r.Txs[x.Tx], r.Samples[x.Sample]
		undelivered := 0
		for _, e := range tx.Events {
			if !deliveredBefore(r.Deliveries[:s.Mark], e.ID) {
				undelivered++
			}
		}
		out[i] = fmt.Sprintf("writer %d tx of %d events: slot confirmed %s > %s %s at %s with %d of them undelivered",
			tx.Writer, len(tx.Events), s.LSN, bound, x.Bound, s.At.Format("15:04:05.000"), undelivered)
	}
	return out
}

func deliveredBefore(ds []delivery, id string) bool {
	for _, d := range ds {
		if d.ID == id {
			return true
		}
	}
	return false
}

func set(ids []string) map[string]bool {
	m := make(map[string]bool, len(ids))
	for _, id := range ids {
		m[id] = true
	}
	return m
}
