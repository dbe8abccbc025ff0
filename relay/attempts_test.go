package relay

import (
	"testing"
	"time"
)

func TestAttemptsForADay(t *testing.T) {
	t.Parallel()
	n := AttemptsForADay(time.Second, 10*time.Minute)
	// 1s..512s ramp (10 delays, ~17 min) then 10-minute delays up to 24h: about 154 attempts.
	if n < 140 || n > 170 {
		t.Fatalf("AttemptsForADay(1s, 10m) = %d", n)
	}
	if AttemptsForADay(time.Second, time.Hour) >= n {
		t.Fatal("a longer cap needs fewer attempts for a day")
	}
}
