package main

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// cleanRecord is a small run in which every invariant holds: two writers, three transactions,
// every event delivered once, in order, applied once, and a slot that confirms each
// transaction only after its delivery.
//
//	tx0 writer 0: a1 a2 (order/0 seq 1, 2)  commit 0/150, read around it [0/100, 0/200)
//	tx1 writer 1: b1    (order/1 seq 1)     commit 0/250, [0/200, 0/300)
//	tx2 writer 0: a3    (order/0 seq 3)     commit 0/350, [0/300, 0/400)
func cleanRecord() record {
	txs := []txRecord{
		{Writer: 0, Before: 0x100, After: 0x200, Events: []event{{ID: "a1", Aggregate: "order/0", Seq: 1}, {ID: "a2", Aggregate: "order/0", Seq: 2}}},
		{Writer: 1, Before: 0x200, After: 0x300, Events: []event{{ID: "b1", Aggregate: "order/1", Seq: 1}}},
		{Writer: 0, Before: 0x300, After: 0x400, Events: []event{{ID: "a3", Aggregate: "order/0", Seq: 3}}},
	}
	commit := []pglogrepl.LSN{0x150, 0x250, 0x350}
	r := record{Txs: txs, RolledBack: []string{"r1"}, Aborted: []string{"x1"}, Applied: map[string]int{}}
	for i, tx := range txs {
		for k, e := range tx.Events {
			r.Deliveries = append(r.Deliveries, delivery{ID: e.ID, Aggregate: e.Aggregate, Seq: e.Seq,
				Sequence: sequence(commit[i], k)})
			r.Applied[e.ID] = 1
			r.InboxIDs = append(r.InboxIDs, e.ID)
		}
	}
	// Marks: a1 a2 are log entries 0 and 1, b1 is 2, a3 is 3.
	r.Samples = []sample{{LSN: 0x100, Mark: 0}, {LSN: 0x201, Mark: 2}, {LSN: 0x301, Mark: 3}, {LSN: 0x401, Mark: 4}}
	return r
}

func sequence(lsn pglogrepl.LSN, index int) string {
	return fmt.Sprintf("%016X-%08X", uint64(lsn), index)
}

// failing names the verdict's non-empty lists.
func failing(v verdict) []string {
	lists := map[string][]string{
		"lost": v.Lost, "phantom-rolled-back": v.PhantomsRolledBack, "phantom-aborted": v.PhantomsAborted,
		"phantom-unknown": v.PhantomsUnknown, "order": v.OrderViolations, "double-applied": v.DoubleApplied,
		"not-applied": v.NotApplied, "foreign-applied": v.ForeignApplied, "inbox-rows": v.InboxMismatch,
		"confirm": v.ConfirmViolations, "confirm-seq": v.ConfirmSeqViolations, "sequence": v.SequenceErrors,
	}
	var out []string
	for name, l := range lists {
		if len(l) > 0 {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestCheckFindsEachViolation(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *record)
		want   []string // the lists that must be non-empty, sorted; nothing else may be
	}{
		{"clean run", func(r *record) {}, nil},
		{"duplicates are allowed", func(r *record) {
			r.Deliveries = append(r.Deliveries, r.Deliveries[0], r.Deliveries[2])
		}, nil},
		{"slot moving back after a crash restart is allowed", func(r *record) {
			r.Samples = append(r.Samples, sample{LSN: 0x120, Mark: 4})
		}, nil},
		{"an event never delivered, and the slot passed it", func(r *record) {
			r.Deliveries = r.Deliveries[:3]
			r.Samples = r.Samples[:3]
			r.Samples = append(r.Samples, sample{LSN: 0x401, Mark: 3})
		}, []string{"confirm", "lost"}},
		{"an event never delivered, the slot held back", func(r *record) {
			r.Deliveries = r.Deliveries[:3]
			r.Samples = r.Samples[:3]
		}, []string{"lost"}},
		{"a rolled-back event delivered", func(r *record) {
			r.Deliveries = append(r.Deliveries, delivery{ID: "r1", Aggregate: "order/0"})
		}, []string{"phantom-rolled-back"}},
		{"an event of a transaction cut off delivered", func(r *record) {
			r.Deliveries = append(r.Deliveries, delivery{ID: "x1", Aggregate: "order/1"})
		}, []string{"phantom-aborted"}},
		{"an id never written delivered", func(r *record) {
			r.Deliveries = append(r.Deliveries, delivery{ID: "zz", Aggregate: "order/1"})
		}, []string{"phantom-unknown"}},
		{"an aggregate's events delivered out of commit order", func(r *record) {
			r.Deliveries[0], r.Deliveries[1] = r.Deliveries[1], r.Deliveries[0]
		}, []string{"order"}},
		{"an event applied twice", func(r *record) { r.Applied["a2"] = 2 }, []string{"double-applied"}},
		{"an event never applied", func(r *record) { delete(r.Applied, "b1") }, []string{"not-applied"}},
		{"a rolled-back event applied", func(r *record) { r.Applied["r1"] = 1 }, []string{"foreign-applied"}},
		{"inbox_events misses a row", func(r *record) { r.InboxIDs = r.InboxIDs[1:] }, []string{"inbox-rows"}},
		{"inbox_events has a row twice", func(r *record) { r.InboxIDs = append(r.InboxIDs, "a1") }, []string{"inbox-rows"}},
		{"slot confirmed a transaction with an event in flight", func(r *record) {
			r.Samples[1].Mark = 1 // 0/201 passes tx0, whose a2 is log entry 1
		}, []string{"confirm", "confirm-seq"}},
		{"slot passed the commit record but not After(tx)", func(r *record) {
			r.Samples = append(r.Samples, sample{LSN: 0x151, Mark: 1})
		}, []string{"confirm-seq"}},
		{"events of one transaction with different commit LSNs", func(r *record) {
			r.Deliveries[1].Sequence = sequence(0x160, 1)
		}, []string{"sequence"}},
		{"an index that is not the event's position", func(r *record) {
			r.Deliveries[1].Sequence = sequence(0x150, 0)
		}, []string{"sequence"}},
		{"a commit LSN outside the bounds read around COMMIT", func(r *record) {
			r.Deliveries[2].Sequence = sequence(0x310, 0)
		}, []string{"sequence"}},
		{"an unreadable X-Event-Sequence", func(r *record) { r.Deliveries[2].Sequence = "0/250" }, []string{"sequence"}},
		{"a payload seq that was not written", func(r *record) { r.Deliveries[3].Seq = 7 }, []string{"sequence"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := cleanRecord()
			tt.mutate(&r)
			v := check(r)
			if got := failing(v); !slices.Equal(got, tt.want) {
				t.Fatalf("failing checks %v, want %v\nverdict: %+v", got, tt.want, v)
			}
			if v.invariantsOK() != (len(tt.want) == 0) {
				t.Fatalf("invariantsOK() = %v with failing checks %v", v.invariantsOK(), tt.want)
			}
		})
	}
}

func TestCheckCountsDuplicatesAndLastCommit(t *testing.T) {
	r := cleanRecord()
	r.Deliveries = append(r.Deliveries, r.Deliveries[3], r.Deliveries[3])
	v := check(r)
	if v.Duplicates != 2 || v.Committed != 4 || v.Delivered != 4 {
		t.Fatalf("duplicates %d, committed %d, delivered %d; want 2, 4, 4", v.Duplicates, v.Committed, v.Delivered)
	}
	if v.LastCommit != 0x350 {
		t.Fatalf("last commit %s, want 0/350", v.LastCommit)
	}
}

func TestParseSequence(t *testing.T) {
	lsn, index, err := parseSequence("0000000001538A30-00000003")
	if err != nil || lsn != 0x1538A30 || index != 3 {
		t.Fatalf("got %s, %d, %v", lsn, index, err)
	}
	for _, bad := range []string{"", "0/1538A30", "1538A30-3", "000000000153XA30-00000003", "0000000001538A30-0000000Z"} {
		if _, _, err := parseSequence(bad); err == nil {
			t.Errorf("parseSequence(%q) accepted", bad)
		}
	}
}

// Duplicates are blamed on the latest process fault before them; receiver faults never are.
func TestBlame(t *testing.T) {
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	log := []injected{
		{At: at(1), Kind: faultRecv500, What: "recv-500"},
		{At: at(2), Kind: faultPGRestart, What: "pg-restart"},
		{At: at(3), Kind: faultRecvHang, What: "recv-hang"},
	}
	ds := []delivery{
		{ID: "c", At: at(0.1)}, {ID: "c", At: at(0.2)}, // before any process fault
		{ID: "a", At: at(0.3)}, {ID: "a", At: at(2.5)}, // after the restart
		{ID: "b", At: at(0.5)}, {ID: "b", At: at(3.5)}, // after the restart: the hang is not blamed
	}
	got := blame(log, ds, 3)
	want := []string{"2 after fault 2 (pg-restart)", "1 before any process fault"}
	if !slices.Equal(got, want) {
		t.Fatalf("blame = %q, want %q", got, want)
	}
}

// A slot created again after a slot-drop is not held against transactions that committed
// before it (the backfill carries them); the same sample without the epoch is a violation.
func TestConfirmEpochExcusesTransactionsBeforeTheNewSlot(t *testing.T) {
	t0 := time.Now()
	samples := []sample{{LSN: 500, Mark: 0, At: t0.Add(time.Second)}}
	after := []pglogrepl.LSN{100, 600}
	done := []int{math.MaxInt, math.MaxInt} // neither delivered when sampled
	if got := confirmViolations(samples, after, after, done, nil); len(got) != 1 || got[0].Tx != 0 {
		t.Fatalf("without an epoch: %+v, want one violation for tx 0", got)
	}
	epochs := []slotEpoch{{At: t0, LSN: 450}}
	if got := confirmViolations(samples, after, after, done, epochs); len(got) != 0 {
		t.Fatalf("with the new slot's epoch: %+v, want none", got)
	}
	late := []slotEpoch{{At: t0.Add(2 * time.Second), LSN: 450}} // begun after the sample
	if got := confirmViolations(samples, after, after, done, late); len(got) != 1 {
		t.Fatalf("epoch after the sample: %+v, want one violation", got)
	}
}
