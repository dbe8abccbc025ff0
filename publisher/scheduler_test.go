package publisher

import (
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

func ev(agg, id string) *envelope.Message {
	return &envelope.Message{ID: id, AggregateType: "order", AggregateID: agg}
}

// it is an item of ev(agg, id) in a transaction of its own.
func it(agg, id string) *item { return &item{m: ev(agg, id), tx: &cdc.Tx{}} }

// take pops every ready head without blocking (the scheduler has at least one ready head
// whenever ready.len() > 0) and returns their ids.
func takeReady(s *scheduler) []*item {
	var out []*item
	for {
		s.mu.Lock()
		n := s.ready.len()
		s.mu.Unlock()
		if n == 0 {
			return out
		}
		out = append(out, s.next())
	}
}

func ids(its []*item) []string {
	out := make([]string, len(its))
	for i, it := range its {
		out[i] = it.m.ID
	}
	return out
}

// The scheduler's order rules, step by step: one head per key in flight, the next event of a
// key only after its head is done, keys independent of each other.
func TestSchedulerOrderPerKey(t *testing.T) {
	s := newScheduler()
	for _, e := range []*item{it("a", "a1"), it("b", "b1"), it("a", "a2"), it("a", "a3"), it("b", "b2")} {
		if !s.add(e) {
			t.Fatalf("add %s refused on an unparked key", e.m.ID)
		}
	}
	heads := takeReady(s)
	if got, want := ids(heads), []string{"a1", "b1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("first ready heads = %v, want %v (one per key, in arrival order)", got, want)
	}
	if more := takeReady(s); len(more) != 0 {
		t.Fatalf("ready while every key's head is in flight: %v", ids(more))
	}
	// A failed attempt keeps its key busy: retry makes the same head ready again, nothing else.
	s.retry(heads[0])
	if got := ids(takeReady(s)); !reflect.DeepEqual(got, []string{"a1"}) {
		t.Fatalf("after retry ready = %v, want [a1]", got)
	}
	var order []string
	step := func(it *item) []*item {
		order = append(order, it.m.ID)
		s.done(it)
		return takeReady(s)
	}
	next := step(heads[1]) // b1 delivered → b2 ready
	if got := ids(next); !reflect.DeepEqual(got, []string{"b2"}) {
		t.Fatalf("after b1 ready = %v, want [b2]", got)
	}
	step(next[0])
	next = step(heads[0]) // a1 → a2
	next = step(next[0])  // a2 → a3
	if got := ids(next); !reflect.DeepEqual(got, []string{"a3"}) {
		t.Fatalf("after a2 ready = %v, want [a3]", got)
	}
	if rest := step(next[0]); len(rest) != 0 {
		t.Fatalf("ready after everything was delivered: %v", ids(rest))
	}
	if want := []string{"b1", "b2", "a1", "a2", "a3"}; !reflect.DeepEqual(order, want) {
		t.Fatalf("delivery order %v, want %v", order, want)
	}
	if len(s.keys) != 0 {
		t.Fatalf("keys left after every event was done: %d", len(s.keys))
	}
}

func TestSchedulerParkAndUnpark(t *testing.T) {
	tests := []struct {
		name        string
		queued      []string // ids of aggregate "a" queued before the head fails for good
		arriving    []string // added after parking: refused, parked by the caller
		replayed    []string // what a replay hands back, in commit order
		wantBehind  []string
		wantReplay  []string // delivery order after unpark
		wantForgets bool     // the last replayed event's done reports the replay finished
	}{
		{name: "head alone", queued: []string{"a1"}, replayed: []string{"a1"},
			wantReplay: []string{"a1"}, wantForgets: true},
		{name: "events behind the head are handed back", queued: []string{"a1", "a2", "a3"},
			arriving: []string{"a4"}, replayed: []string{"a1", "a2", "a3", "a4"},
			wantBehind: []string{"a2", "a3"}, wantReplay: []string{"a1", "a2", "a3", "a4"}, wantForgets: true},
		{name: "empty replay unparks", queued: []string{"a1"}, replayed: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newScheduler()
			for _, id := range tt.queued {
				s.add(it("a", id))
			}
			s.add(it("b", "b1"))
			heads := takeReady(s)
			head := heads[0]
			if head.m.ID != tt.queued[0] {
				t.Fatalf("head = %s", head.m.ID)
			}
			behind := s.park(head)
			if got := ids(behind); len(got) != len(tt.wantBehind) || (len(got) > 0 && !reflect.DeepEqual(got, tt.wantBehind)) {
				t.Fatalf("behind = %v, want %v", got, tt.wantBehind)
			}
			if !s.isParked(head.key()) || s.parkedCount() != 1 {
				t.Fatal("key not parked")
			}
			for _, id := range tt.arriving {
				if s.add(it("a", id)) {
					t.Fatalf("add %s accepted on a parked key", id)
				}
			}
			// Another key is not affected by the park.
			s.done(heads[1])
			if !s.add(it("b", "b2")) {
				t.Fatal("other key refused")
			}
			if got := ids(takeReady(s)); !reflect.DeepEqual(got, []string{"b2"}) {
				t.Fatalf("other key ready = %v", got)
			}

			var evs []*envelope.Message
			for _, id := range tt.replayed {
				evs = append(evs, ev("a", id))
			}
			a := cdc.Aggregate{Type: "order", ID: "a"}
			s.unpark(a, &cdc.Tx{}, evs)
			if s.isParked(a) || s.parkedCount() != 0 {
				t.Fatal("still parked after unpark")
			}
			// An event arriving after the replay request queues behind the replayed ones.
			s.add(it("a", "late"))
			var order []string
			forgot := false
			for ready := takeReady(s); len(ready) > 0; ready = takeReady(s) {
				for _, it := range ready {
					if it.m.AggregateID != "a" {
						s.done(it)
						continue
					}
					order = append(order, it.m.ID)
					if s.done(it) {
						forgot = true
					}
				}
			}
			want := append(append([]string{}, tt.wantReplay...), "late")
			if !reflect.DeepEqual(order, want) {
				t.Fatalf("order after unpark = %v, want %v", order, want)
			}
			if forgot != tt.wantForgets {
				t.Fatalf("replay finished reported %v, want %v", forgot, tt.wantForgets)
			}
		})
	}
}

func TestSchedulerSetParkedRefusesAtStart(t *testing.T) {
	s := newScheduler()
	s.setParked([]cdc.Aggregate{{Type: "order", ID: "a"}})
	if s.add(it("a", "a1")) {
		t.Fatal("event of a key parked at start was queued")
	}
	if !s.add(it("b", "b1")) {
		t.Fatal("event of another key refused")
	}
}

// close wakes workers blocked in next, which then return nil; so do later calls.
func TestSchedulerCloseWakesWorkers(t *testing.T) {
	s := newScheduler()
	var wg sync.WaitGroup
	got := make(chan *item, 3)
	for i := 0; i < 3; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); got <- s.next() }()
	}
	s.close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("workers still blocked after close")
	}
	close(got)
	for it := range got {
		if it != nil {
			t.Fatalf("next returned %v after close", it.m.ID)
		}
	}
	if s.next() != nil {
		t.Fatal("next after close returned an item")
	}
}

func TestFIFOReusesStorage(t *testing.T) {
	var f fifo
	for round := 0; round < 3; round++ {
		for i := 0; i < 200; i++ {
			f.push(&item{attempt: i})
		}
		for i := 0; i < 200; i++ {
			if it := f.pop(); it.attempt != i {
				t.Fatalf("round %d: pop %d = %d", round, i, it.attempt)
			}
		}
		if f.len() != 0 {
			t.Fatalf("len %d after draining", f.len())
		}
	}
	if cap(f.buf) > 512 {
		t.Fatalf("storage grew to %d across rounds", cap(f.buf))
	}
}
