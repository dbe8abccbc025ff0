package publisher

import "time"

// windowLimiter lets at most n events start in any window of length per: it remembers the
// start times of the last n, and the next may start only once the oldest of them is a full
// window old. Unlike a token bucket with a burst, this bounds every window, not just the
// average. Its owner calls it with the time.
type windowLimiter struct {
	per    time.Duration
	starts []time.Time // ring of the last n start times
	next   int         // the oldest entry, overwritten by the next start
}

func newWindowLimiter(n int, per time.Duration) *windowLimiter {
	return &windowLimiter{per: per, starts: make([]time.Time, n)}
}

// try records a start at now and returns 0 if one is allowed, else how long until one is (and
// records nothing).
func (l *windowLimiter) try(now time.Time) time.Duration {
	oldest := l.starts[l.next]
	if oldest.IsZero() || now.Sub(oldest) >= l.per {
		l.starts[l.next] = now
		l.next = (l.next + 1) % len(l.starts)
		return 0
	}
	return l.per - now.Sub(oldest)
}
