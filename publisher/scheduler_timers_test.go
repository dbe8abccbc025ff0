package publisher

import (
	"testing"
	"time"
)

// A retry timer belongs to the scheduler: closing it stops the timers, so a head whose retry
// was due after the stop is never queued again. The control scheduler, left open, gets its
// head back from a timer set at the same moment with a longer delay.
func TestCloseStopsRetryTimers(t *testing.T) {
	closed, open := newScheduler(), newScheduler()
	a, b := it("1", "a"), it("1", "b")
	closed.add(a)
	open.add(b)
	if got := closed.next(); got != a {
		t.Fatalf("closed: next = %v, want a", got)
	}
	if got := open.next(); got != b {
		t.Fatalf("open: next = %v, want b", got)
	}
	closed.retryIn(a, time.Millisecond)
	open.retryIn(b, 50*time.Millisecond)
	closed.close()

	if got := open.next(); got != b { // blocks until b's timer fires
		t.Fatalf("open: next after the retry = %v, want b", got)
	}
	closed.mu.Lock()
	defer closed.mu.Unlock()
	if n, left := closed.ready.len(), len(closed.timers); n != 0 || left != 0 {
		t.Fatalf("closed scheduler: %d heads queued and %d timers left after close, want none", n, left)
	}
}
