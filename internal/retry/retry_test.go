package retry

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

var errDown = errors.New("connection refused")

// The wait starts at First, doubles per failure and stops at Max; the step runs again after
// each, until it succeeds.
func TestDoWaitsDoublingUpToTheCap(t *testing.T) {
	var waits []time.Duration
	calls := 0
	err := Do(context.Background(), Backoff{First: time.Millisecond, Max: 5 * time.Millisecond}, func(context.Context) error {
		calls++
		if calls < 6 {
			return errDown
		}
		return nil
	}, func(err error, wait time.Duration) {
		if !errors.Is(err, errDown) {
			t.Errorf("failed got %v, want the attempt's error", err)
		}
		waits = append(waits, wait)
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	want := []time.Duration{time.Millisecond, 2 * time.Millisecond, 4 * time.Millisecond, 5 * time.Millisecond, 5 * time.Millisecond}
	if calls != 6 || !slices.Equal(waits, want) {
		t.Fatalf("calls %d, waits %v; want 6 calls, waits %v", calls, waits, want)
	}
}

// A permanent error stops at once, unwrapped, and is not reported as a retry.
func TestDoStopsOnAPermanentError(t *testing.T) {
	bad := errors.New("no such schema: run migrate")
	calls, retries := 0, 0
	err := Do(context.Background(), Backoff{First: time.Millisecond}, func(context.Context) error {
		calls++
		if calls == 1 {
			return errDown // a positive control: a transient error is retried
		}
		return Stop(bad)
	}, func(error, time.Duration) { retries++ })
	if err != bad || calls != 2 || retries != 1 {
		t.Fatalf("Do = %v after %d calls, %d retries; want the permanent error itself after 2 calls, 1 retry", err, calls, retries)
	}
	if Stop(nil) != nil {
		t.Fatal("Stop(nil) is not nil")
	}
}

// A stop during an attempt or a wait returns ctx.Err(), whatever the attempt returned.
func TestDoReturnsTheContextsErrorWhenStopped(t *testing.T) {
	t.Run("during an attempt", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := Do(ctx, Backoff{First: time.Hour}, func(context.Context) error {
			cancel()
			return Stop(errDown) // what a lookup cut short returns: not the failure to report
		}, nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want context.Canceled", err)
		}
	})
	t.Run("during a wait", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := Do(ctx, Backoff{First: time.Hour}, func(context.Context) error { return errDown },
			func(error, time.Duration) { cancel() })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Do = %v, want context.Canceled (and not an hour's wait)", err)
		}
	})
}

// A new error is logged at once, the same one again only once a minute has passed.
func TestQuietLogsARepeatOnceAMinute(t *testing.T) {
	now := time.Unix(0, 0)
	q := &Quiet{now: func() time.Time { return now }}
	if q.Logged() {
		t.Fatal("Logged before any failure")
	}
	steps := []struct {
		after time.Duration
		err   error
		log   bool
	}{
		{0, errDown, true},
		{time.Second, errDown, false},
		{time.Second, errors.New("server limit"), true},
		{time.Second, errors.New("server limit"), false},
		{QuietFor, errors.New("server limit"), true},
		{time.Second, errDown, true},
	}
	for i, s := range steps {
		now = now.Add(s.after)
		if got := q.Log(s.err); got != s.log {
			t.Fatalf("step %d (%v after %v): Log = %t, want %t", i, s.err, s.after, got, s.log)
		}
	}
	if !q.Logged() {
		t.Fatal("not Logged after failures were logged")
	}
}
