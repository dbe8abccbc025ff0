package publisher

import (
	"reflect"
	"testing"

	"github.com/outbox-relay/outbox-relay/cdc"
)

func batchIDs(b *batch) []string { return ids(b.items) }

// A gathered batch holds each ready key's events as a contiguous prefix in commit order, at
// most MaxEvents of them; a key in flight in one batch is in no other until it is delivered.
func TestSchedulerBatchGathersContiguousPrefixes(t *testing.T) {
	s := newScheduler()
	for _, e := range []*cdc.Event{ev("a", "a1"), ev("b", "b1"), ev("a", "a2"), ev("a", "a3"), ev("b", "b2"), ev("c", "c1")} {
		s.add(&item{ev: e})
	}
	cfg := Batch{MaxEvents: 4, MaxBytes: 1 << 20}
	b := s.nextBatch(cfg)
	if got, want := batchIDs(b), []string{"a1", "a2", "a3", "b1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first batch %v, want %v (heads a,b,c claimed; a's followers fill it)", got, want)
	}
	// The batch was full before c's head was claimed: c stays ready for the next one.
	b2 := s.nextBatch(cfg)
	if got, want := batchIDs(b2), []string{"c1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second batch %v, want %v (a and b are in flight; b2 waits for b1)", got, want)
	}
	s.doneBatch(b)
	b3 := s.nextBatch(cfg)
	if got, want := batchIDs(b3), []string{"b2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after the first batch %v, want %v", got, want)
	}
}

// Splitting keeps order: between keys both halves go at once; within one key the second half
// waits for the first to be delivered.
func TestBatchSplit(t *testing.T) {
	mk := func(idsIn ...string) *batch {
		b := &batch{}
		for _, id := range idsIn {
			b.items = append(b.items, &item{ev: ev(id[:1], id)})
		}
		return b
	}
	l, r, chained := mk("a1", "a2", "b1", "c1", "c2", "c3").split()
	if chained || !reflect.DeepEqual(batchIDs(l), []string{"a1", "a2", "b1"}) || !reflect.DeepEqual(batchIDs(r), []string{"c1", "c2", "c3"}) {
		t.Fatalf("split between keys: %v | %v chained=%v", batchIDs(l), batchIDs(r), chained)
	}
	l, r, chained = mk("a1", "a2", "a3").split()
	if !chained || l.after != r || !reflect.DeepEqual(batchIDs(l), []string{"a1"}) || !reflect.DeepEqual(batchIDs(r), []string{"a2", "a3"}) {
		t.Fatalf("split within a key: %v | %v chained=%v", batchIDs(l), batchIDs(r), chained)
	}
}
