package publisher

import "time"

// backoff returns the delay before attempt n+1, after n failed attempts: RetryMin·2^(n−1),
// jittered by ±20% (rnd returns a number in [0, 1)), never above RetryMax.
func backoff(n int, lo, hi time.Duration, rnd func() float64) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	jittered := time.Duration(float64(d) * (0.8 + 0.4*rnd()))
	return min(jittered, hi)
}

// nextDelay is the wait before the next attempt: the destination's Retry-After when given
// (positive), else the backoff; never above hi.
func nextDelay(attempts int, retryAfter, lo, hi time.Duration, rnd func() float64) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, hi)
	}
	return backoff(attempts, lo, hi, rnd)
}
