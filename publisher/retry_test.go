package publisher

import (
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterUpToTheCap(t *testing.T) {
	lo, hi := time.Second, 10*time.Minute
	for n := 1; n <= 30; n++ {
		base := lo << min(n-1, 20)
		base = min(base, hi)
		for i := 0; i < 50; i++ {
			d := backoff(n, lo, hi)
			if d > hi {
				t.Fatalf("attempt %d: %v over the cap", n, d)
			}
			if d < time.Duration(float64(base)*0.8) || d > time.Duration(float64(base)*1.2) {
				t.Fatalf("attempt %d: %v outside ±20%% of %v", n, d, base)
			}
		}
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		seen[backoff(3, lo, hi)] = true
	}
	if len(seen) < 2 {
		t.Fatal("no jitter")
	}
}

// A destination's asked delay (an HTTP Retry-After, as the webhook parses it) is taken as
// asked up to RetryMax; without one, the backoff applies.
func TestNextDelayTakesTheAskedDelayUpToTheCap(t *testing.T) {
	lo, hi := time.Second, time.Minute
	if d := nextDelay(1, 7*time.Second, lo, hi); d != 7*time.Second {
		t.Fatalf("asked 7s: %v", d)
	}
	if d := nextDelay(1, time.Hour, lo, hi); d != hi {
		t.Fatalf("not capped: %v", d)
	}
	if d := nextDelay(1, 0, lo, hi); d < 800*time.Millisecond || d > 1200*time.Millisecond {
		t.Fatalf("no asked delay should fall back to backoff: %v", d)
	}
}
