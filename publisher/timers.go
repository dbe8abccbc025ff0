package publisher

import (
	"container/heap"
	"time"
)

// timer is something the engine does at a time: a retry, the end of a batch's linger, the next
// probe of an open breaker, the rate limit's window opening, a periodic check. A timer is never
// cancelled; what it does checks that it still applies (a retry, that its lane's queues were
// not taken apart since, by their generation).
type timer struct {
	at  time.Time
	seq uint64
	do  func()
}

// timers is the engine's timers, earliest first (then in the order they were set: the same
// inputs fire them in the same order).
type timers []*timer

func (h timers) Len() int { return len(h) }
func (h timers) Less(i, j int) bool {
	if !h[i].at.Equal(h[j].at) {
		return h[i].at.Before(h[j].at)
	}
	return h[i].seq < h[j].seq
}
func (h timers) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *timers) Push(x any)   { *h = append(*h, x.(*timer)) }
func (h *timers) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return t
}

// after arms a timer that does do at at (at once if at has passed, at the next tick).
func (e *engine) after(at time.Time, do func()) {
	e.seq++
	heap.Push(&e.timers, &timer{at: at, seq: e.seq, do: do})
	if len(e.timers) > 0 && e.timers[0].seq == e.seq {
		e.earlier = true
	}
}

// Deadline returns when the earliest timer is due; zero when none is armed.
func (e *engine) deadline() time.Time {
	if len(e.timers) == 0 {
		return time.Time{}
	}
	return e.timers[0].at
}

// tick fires the timers due at now, in order; a timer armed by one that fires and due already
// fires too.
func (e *engine) tick(now time.Time) {
	e.now = now
	for len(e.timers) > 0 && !e.timers[0].at.After(now) {
		t := heap.Pop(&e.timers).(*timer)
		if e.stopping {
			continue
		}
		t.do()
	}
	e.pump()
}
