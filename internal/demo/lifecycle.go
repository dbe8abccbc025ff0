package demo

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// cleanup is one step of the teardown, run with a bounded context.
type cleanup struct {
	what string
	fn   func(context.Context) error
}

// cleanup registers fn to run at teardown, after the steps registered later (as t.Cleanup).
func (d *demo) cleanup(what string, fn func(context.Context) error) {
	d.cleanups = append(d.cleanups, cleanup{what, fn})
}

// teardown runs the cleanups, latest first, each whatever the others returned. It is safe to
// call more than once.
func (d *demo) teardown() error {
	var errs []error
	for i := len(d.cleanups) - 1; i >= 0; i-- {
		c := d.cleanups[i]
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c.what, err))
		}
		cancel()
	}
	d.cleanups = nil
	return errors.Join(errs...)
}

// task is a goroutine the demo owns until teardown stops it and waits for it.
type task struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // set before done is closed
}

// spawn runs fn in a goroutine whose context ends at teardown, not with parent: on Ctrl-C the
// relay and the consumer keep running until the last deliveries are in.
func (d *demo) spawn(parent context.Context, what string, fn func(context.Context) error) *task {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	t := &task{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(t.done)
		t.err = fn(ctx)
	}()
	d.cleanup(what, t.stop)
	return t
}

// stop cancels the task and waits for it, at most until ctx is done. It returns the task's
// error only if the task was still running: one that ended by itself was reported by whoever
// watched done.
func (t *task) stop(ctx context.Context) error {
	select {
	case <-t.done:
		return nil
	default:
	}
	t.cancel()
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("still running: %w", ctx.Err())
	}
}
