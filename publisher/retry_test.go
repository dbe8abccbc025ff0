package publisher

import (
	"net/http"
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

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	lo, hi := time.Second, time.Minute
	// The Webhook parses the header; the publisher caps what it asked for.
	nextDelay := func(attempts int, header string, lo, hi time.Duration, now time.Time) time.Duration {
		d, _ := retryAfter(header, now)
		return nextDelay(attempts, d, lo, hi)
	}
	if d := nextDelay(1, "7", lo, hi, now); d != 7*time.Second {
		t.Fatalf("seconds: %v", d)
	}
	date := now.Add(30 * time.Second).Format(http.TimeFormat)
	if d := nextDelay(1, date, lo, hi, now); d != 30*time.Second {
		t.Fatalf("http date: %v", d)
	}
	if d := nextDelay(1, "3600", lo, hi, now); d != hi {
		t.Fatalf("not capped: %v", d)
	}
	if d := nextDelay(1, "soon", lo, hi, now); d < 800*time.Millisecond || d > 1200*time.Millisecond {
		t.Fatalf("garbage Retry-After should fall back to backoff: %v", d)
	}
}
