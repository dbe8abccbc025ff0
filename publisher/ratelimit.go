package publisher

import (
	"context"
	"sync"
	"time"
)

// windowLimiter lets at most n events start in any window of length per: it remembers the
// start times of the last n, and the next may start only once the oldest of them is a full
// window old. Unlike a token bucket with a burst, this bounds every window, not just the
// average.
type windowLimiter struct {
	mu     sync.Mutex
	per    time.Duration
	starts []time.Time // ring of the last n start times
	next   int         // the oldest entry, overwritten by the next start
	// started, if set, is told each start's time, under the lock (tests).
	started func(time.Time)
}

func newWindowLimiter(n int, per time.Duration) *windowLimiter {
	return &windowLimiter{per: per, starts: make([]time.Time, n)}
}

// wait blocks until a start is allowed, records it and returns true; or returns false when
// ctx ends first.
func (l *windowLimiter) wait(ctx context.Context) bool {
	for {
		l.mu.Lock()
		now := time.Now()
		oldest := l.starts[l.next]
		if oldest.IsZero() || now.Sub(oldest) >= l.per {
			l.starts[l.next] = now
			l.next = (l.next + 1) % len(l.starts)
			if l.started != nil {
				l.started(now)
			}
			l.mu.Unlock()
			return true
		}
		d := l.per - now.Sub(oldest)
		l.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// try records a start at now and returns 0 if one is allowed, else how long until one is (and
// records nothing).
func (l *windowLimiter) try(now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	oldest := l.starts[l.next]
	if oldest.IsZero() || now.Sub(oldest) >= l.per {
		l.starts[l.next] = now
		l.next = (l.next + 1) % len(l.starts)
		if l.started != nil {
			l.started(now)
		}
		return 0
	}
	return l.per - now.Sub(oldest)
}
