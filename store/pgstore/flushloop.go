package pgstore

import (
	"context"
	"time"
)

// flushLoop is the loop of the background writers (Marker, DeliveryLogWriter): flush every
// interval, or at once on kick, until ctx is done, then once more with a 5s deadline. After a
// failed flush it waits 500ms, doubling up to retryMax, before the next, so a database that
// refuses the writes is not asked again every interval; recovered is called after the first
// success that follows failures.
func flushLoop(ctx context.Context, interval, retryMax time.Duration, kick <-chan struct{}, flush func(context.Context) bool,
	recovered func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var hold time.Time
	var backoff time.Duration
	for {
		select {
		case <-ctx.Done():
			final, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			flush(final)
			cancel()
			return
		case <-t.C:
		case <-kick:
		}
		if time.Now().Before(hold) {
			continue
		}
		if flush(ctx) {
			if backoff > 0 {
				recovered()
			}
			backoff = 0
		} else {
			backoff = min(max(2*backoff, 500*time.Millisecond), retryMax)
			hold = time.Now().Add(backoff)
		}
	}
}
