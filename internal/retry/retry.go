// Package retry runs a step that may fail for a while until it succeeds: the relay's start-up
// steps (resolving the schema, checking row filters and shard counts, creating a pipeline's
// publication and slot, reaching a broker) and the engine's writes that must be recorded before
// an event is acknowledged. It imports nothing of this module.
//
// # Behaviour
//
// Do runs the step; after a failed attempt it reports the error and the wait to its caller
// (who logs it, and may show it on /readyz), waits, and runs it again. The wait starts at
// Backoff.First and doubles per failed attempt up to Backoff.Max. An error wrapped with Stop
// is permanent (a misconfiguration whose message names the fix): Do returns it at once. When
// ctx ends, during an attempt or a wait, Do returns ctx.Err(), whatever the interrupted
// attempt returned: a stop is not a failure.
//
// Quiet keeps a retry that fails the same way from flooding the log: a new error is logged at
// once, a repeated one once a minute.
//
// What belongs here: how often and how long to retry. What an error means (permanent or not)
// is the caller's, decided in its attempt function.
package retry

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Backoff is the wait between attempts: First after the first failure, doubled per failure up
// to Max. A Max below First means First is never exceeded.
type Backoff struct {
	First, Max time.Duration
}

type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }
func (p permanent) Unwrap() error { return p.err }

// Stop marks err as permanent: Do returns it (unwrapped) without retrying. Stop(nil) is nil.
func Stop(err error) error {
	if err == nil {
		return nil
	}
	return permanent{err}
}

// Do runs attempt until it returns nil or an error marked with Stop, or ctx ends. After each
// other failure it calls failed (if not nil) with the error and the wait before the next
// attempt.
func Do(ctx context.Context, b Backoff, attempt func(context.Context) error, failed func(err error, wait time.Duration)) error {
	wait := b.First
	for {
		err := attempt(ctx)
		if ctx.Err() != nil {
			return ctx.Err() // stopped while it ran: not a failure, whatever the attempt returned
		}
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		if failed != nil {
			failed(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(wait*2, max(b.Max, b.First))
	}
}

// QuietFor is how long Quiet holds back an error that repeats the last one logged.
const QuietFor = time.Minute

// Quiet decides which failures of a retried step to log: an error whose message differs from
// the last one logged at once, the same one again once QuietFor has passed. The zero value is
// ready; it is safe for concurrent use.
type Quiet struct {
	mu      sync.Mutex
	last    string
	loggedT time.Time
	now     func() time.Time // nil: time.Now; set by tests
}

// Log reports whether err should be logged now, and if so records it as the last logged.
func (q *Quiet) Log(err error) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now
	if q.now != nil {
		now = q.now
	}
	t := now()
	if err.Error() == q.last && t.Sub(q.loggedT) < QuietFor {
		return false
	}
	q.last, q.loggedT = err.Error(), t
	return true
}

// Logged reports whether any failure was logged.
func (q *Quiet) Logged() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last != ""
}
