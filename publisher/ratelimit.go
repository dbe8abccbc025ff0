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

// An endpoint's limits across shards. A sharded pipeline runs one engine per shard, each with
// every endpoint (an aggregate lives in one shard): each takes its share of the endpoint's
// rate_limit and max_in_flight, so that the shards together hold them, with no coordination
// between them. The cost is on skewed traffic: a shard that has all of an endpoint's events
// delivers them at its share only.

// shareOf returns shard i's share of a limit of n among shards: n/shards, the first n%shards
// shards one more, so that the shares sum to n; but at least 1, as a shard with none could never
// deliver (with n below shards, the shards together allow shards, not n). Not sharded (shards
// 1 or less): n.
func shareOf(n, i, shards int) int {
	if shards <= 1 || n <= 0 {
		return n
	}
	k := n / shards
	if i%shards < n%shards {
		k++
	}
	return max(k, 1)
}

// rateShare returns shard i's share of a rate limit of n attempts a second among shards, as k
// attempts in any window of per: with n at least shards, shareOf's share in every second, so
// the shards together start at most n in any second; with fewer, one attempt every shards/n
// seconds, so together they start n a second on average and at most one more per shard in
// any window. n <= 0: no limit (k 0).
func rateShare(n, i, shards int) (k int, per time.Duration) {
	switch {
	case n <= 0:
		return 0, 0
	case shards <= 1 || n >= shards:
		return shareOf(n, i, shards), time.Second
	}
	return 1, time.Duration(shards) * time.Second / time.Duration(n)
}
