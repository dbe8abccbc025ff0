package publisher

import (
	"context"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
)

func batchIDs(b *batch) []string { return ids(b.items) }

// A gathered batch holds each ready key's events as a contiguous prefix in commit order, at
// most MaxEvents of them; a key in flight in one batch is in no other until it is delivered.
func TestSchedulerBatchGathersContiguousPrefixes(t *testing.T) {
	s := newScheduler()
	for _, e := range []*item{it("a", "a1"), it("b", "b1"), it("a", "a2"), it("a", "a3"), it("b", "b2"), it("c", "c1")} {
		s.add(e)
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

// For a destination that acknowledges each event of a batch on its own, a batch holds at most
// one event per key: the ready heads, never their followers, so no key has two events in
// flight.
func TestSchedulerBatchOnePerKey(t *testing.T) {
	s := newScheduler()
	for _, e := range []*item{it("a", "a1"), it("b", "b1"), it("a", "a2"), it("a", "a3"), it("b", "b2"), it("c", "c1")} {
		s.add(e)
	}
	cfg := Batch{MaxEvents: 4, MaxBytes: 1 << 20, onePerKey: true}
	b := s.nextBatch(cfg)
	if got, want := batchIDs(b), []string{"a1", "b1", "c1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first batch %v, want %v (one head per key, no followers)", got, want)
	}
	s.doneBatch(b)
	b2 := s.nextBatch(cfg)
	if got, want := batchIDs(b2), []string{"a2", "b2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("second batch %v, want %v", got, want)
	}
	s.doneBatch(b2)
	if got, want := batchIDs(s.nextBatch(cfg)), []string{"a3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("third batch %v, want %v", got, want)
	}
}

// New sets one event per key for a PartialBatchDestination, and only for one.
func TestNewBatchesOnePerKeyForPartialDestinations(t *testing.T) {
	cfg := Config{Batch: Batch{MaxEvents: 10}}
	if p := New(cfg, partialDest{}, nil, nil); !p.cfg.Batch.onePerKey {
		t.Error("a PartialBatchDestination gets batches with several events of a key")
	}
	if p := New(cfg, wholeDest{}, nil, nil); p.cfg.Batch.onePerKey {
		t.Error("a whole-batch destination gets one event per key")
	}
}

type wholeDest struct{}

func (wholeDest) Send(context.Context, *envelope.Message, int) Result { return Result{} }
func (wholeDest) SendBatch(context.Context, []*envelope.Message, int) Result {
	return Result{}
}

type partialDest struct{ wholeDest }

func (partialDest) PartialBatches() {}

// Splitting keeps order: between keys both halves go at once; within one key the second half
// waits for the first to be delivered.
func TestBatchSplit(t *testing.T) {
	mk := func(idsIn ...string) *batch {
		b := &batch{}
		for _, id := range idsIn {
			b.items = append(b.items, it(id[:1], id))
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

// MaxBytes bounds a batch's payload bytes; an event larger than it travels alone.
func TestSchedulerBatchMaxBytes(t *testing.T) {
	s := newScheduler()
	pay := func(e *item, n int) *item { e.m.Payload = make([]byte, n); return e }
	for _, e := range []*item{pay(it("a", "a1"), 4), pay(it("a", "a2"), 4), pay(it("b", "b1"), 100), pay(it("c", "c1"), 4)} {
		s.add(e)
	}
	cfg := Batch{MaxEvents: 10, MaxBytes: 10}
	var got [][]string
	for i := 0; i < 3; i++ {
		got = append(got, batchIDs(s.nextBatch(cfg)))
	}
	want := [][]string{{"a1", "a2"}, {"b1"}, {"c1"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("batches %v, want %v", got, want)
	}
}

// A lingering batch takes the heads and the followers that arrive meanwhile, and goes as soon
// as it is full rather than when its (here very long) linger ends, even while idle workers wait
// too: what arrives must wake the gatherer, not one of them.
func TestSchedulerBatchLingerFills(t *testing.T) {
	s := newScheduler()
	s.add(it("a", "a1"))
	cfg := Batch{MaxEvents: 4, MaxBytes: 1 << 20, Linger: time.Hour}
	got := make(chan *batch, 5)
	var workers sync.WaitGroup
	defer workers.Wait()
	defer s.close()
	worker := func() {
		workers.Add(1)
		go func() {
			defer workers.Done()
			if b := s.nextBatch(cfg); b != nil {
				got <- b
			}
		}()
	}
	until := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			s.mu.Lock()
			ok := cond()
			s.mu.Unlock()
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 20s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	worker()
	until("gathering", func() bool { return s.gathering && s.ready.len() == 0 })
	for i := 0; i < 4; i++ {
		worker()
	}
	s.add(it("b", "b1"))
	until("b1 claimed by the gatherer", func() bool { return s.ready.len() == 0 })
	s.add(it("c", "c1"))
	until("c1 claimed by the gatherer", func() bool { return s.ready.len() == 0 })
	s.add(it("a", "a2")) // a follower: fills the batch
	select {
	case b := <-got:
		if want := []string{"a1", "a2", "b1", "c1"}; !reflect.DeepEqual(batchIDs(b), want) {
			t.Fatalf("batch %v, want %v", batchIDs(b), want)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a full batch kept lingering")
	}
}
