package publisher

import (
	"context"
	"sync"
	"testing"
	"time"
)

// However many workers wait, no window of length per sees more than n starts; and starts do
// happen (a positive control: the limiter lets all 40 through).
func TestWindowLimiterBoundsEveryWindow(t *testing.T) {
	const n, per = 5, 200 * time.Millisecond
	l := newWindowLimiter(n, per)
	var starts []time.Time // appended under the limiter's lock
	l.started = func(at time.Time) { starts = append(starts, at) }
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5; i++ {
				if !l.wait(context.Background()) {
					t.Error("wait failed without a cancelled context")
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(starts) != 40 {
		t.Fatalf("%d starts, want 40", len(starts))
	}
	// Count the starts within per of each.
	for i := range starts {
		in := 0
		for j := range starts {
			if d := starts[j].Sub(starts[i]); d >= 0 && d < per {
				in++
			}
		}
		if in > n {
			t.Fatalf("%d starts within %s of one another, limit %d", in, per, n)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for l.wait(ctx) {
	}
}
