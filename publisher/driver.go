package publisher

import (
	"context"
	"sync"
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/internal/retry"
)

// The driver runs the engine in production. The engine is owned by whoever holds mu: the
// goroutine of Run, which takes transactions from the stream; the workers, each making one
// attempt at a time; the store runners, each running one store operation at a time; and the
// timer. Each takes mu, hands the engine one input with the time, and hands out the effects it
// decided before it lets go (an attempt to the workers' channel, which has room for every attempt
// the engine may have under way; an operation to the runners' queue). The engine decides as it
// would in the simulation; the driver adds only the real clock, real I/O and real concurrency.

// storeRunners is how many store operations run at once: the backlogs of several endpoints, the
// intake's and the housekeeping's.
const storeRunners = 4

// owner is the engine and the mutex of whoever drives it.
type owner struct {
	mu sync.Mutex
	e  *engine
	d  *driver // set while Run runs
}

// step hands the engine one input under the lock and hands out its effects.
func (o *owner) step(input func(e *engine)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	input(o.e)
	effs := o.e.drain()
	if o.d == nil {
		return // not running: a pause before Run
	}
	for _, eff := range effs {
		if eff.attempt != nil {
			o.d.work <- eff.attempt
		} else {
			o.d.ops.push(eff.op)
		}
	}
	if o.e.earlier {
		o.e.earlier = false
		select {
		case o.d.wake <- struct{}{}:
		default:
		}
	}
}

type driver struct {
	work chan *attempt
	ops  opQueue
	wake chan struct{}
}

// Run takes transactions from in and delivers their events until ctx is done. Then it starts
// nothing new, lets attempts in flight finish for up to ShutdownTimeout, and returns; nothing
// it started outlives it. Events not delivered by then stay unconfirmed, so the next run sends
// them. Run it once.
func (p *Publisher) Run(ctx context.Context, in <-chan *cdc.Tx) {
	d := &driver{work: make(chan *attempt, p.e.cfg.workers), wake: make(chan struct{}, 1)}
	d.ops.cond = sync.NewCond(&d.ops.mu)
	p.mu.Lock()
	p.d = d
	p.mu.Unlock()
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	var workers, runners, timer sync.WaitGroup
	for range p.e.cfg.workers {
		workers.Go(func() {
			for a := range d.work {
				r := a.Send(hard)
				p.step(func(e *engine) { e.finished(a, r, time.Now()) })
			}
		})
	}
	for range storeRunners {
		runners.Go(func() { p.runOps(ctx) })
	}
	timer.Go(func() { p.timer(ctx) })
	p.step(func(e *engine) { e.start(time.Now()) })
	p.intake(ctx, in)
	p.step(func(e *engine) { e.stop() })
	close(d.work) // the engine starts no attempt once stopped
	p.wait(&workers, cancelHard)
	d.ops.close()
	runners.Wait()
	timer.Wait()
	p.mu.Lock()
	for _, l := range p.e.lanes {
		p.e.releaseDest(l)
	}
	p.d = nil
	p.mu.Unlock()
}

func (p *Publisher) intake(ctx context.Context, in <-chan *cdc.Tx) {
	for {
		select {
		case <-ctx.Done():
			return
		case tx := <-in:
			p.step(func(e *engine) { e.offer(tx, time.Now()) })
		}
	}
}

// wait waits for the attempts under way for up to the shutdown timeout, then cancels them.
func (p *Publisher) wait(workers *sync.WaitGroup, cancel func()) {
	finished := make(chan struct{})
	go func() { workers.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(p.shutdown):
		p.e.log.Warn().Dur("shutdown_timeout", p.shutdown).Msg("cancelling deliveries still in flight")
		cancel()
		<-finished
	}
}

// timer ticks the engine when its earliest timer is due, until ctx ends.
func (p *Publisher) timer(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		p.mu.Lock()
		due := p.e.deadline()
		p.mu.Unlock()
		wait := time.Hour
		if !due.IsZero() {
			wait = max(time.Until(due), 0)
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-p.d.wake:
			continue
		case <-t.C:
		}
		p.step(func(e *engine) { e.tick(time.Now()) })
	}
}

// runOps runs store operations until the queue is closed: a durable one until it succeeds or
// ctx ends (then the engine is told it was stopped), another once.
func (p *Publisher) runOps(ctx context.Context) {
	for o := p.d.ops.pop(); o != nil; o = p.d.ops.pop() {
		var v any
		var err error
		stopped := false
		if o.durable {
			done := false // the write that succeeded counts even if ctx ended as it did
			_ = retry.Do(ctx, retry.Backoff{First: 10 * time.Millisecond, Max: 10 * time.Second}, func(ctx context.Context) error {
				v, err = o.run(ctx)
				done = err == nil
				return err
			}, func(err error, wait time.Duration) {
				p.e.log.Warn().Err(err).Dur("retry_in", wait).Msgf("%s failed; retrying", o.what)
			})
			stopped = !done
		} else {
			octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			v, err = o.run(octx)
			cancel()
		}
		p.step(func(e *engine) { e.opDone(o, v, err, stopped, time.Now()) })
	}
}

// opQueue is the store operations waiting for a runner, in the order they were decided.
type opQueue struct {
	mu     sync.Mutex
	cond   *sync.Cond
	ops    []*op
	closed bool
}

func (q *opQueue) push(o *op) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.ops = append(q.ops, o)
	q.cond.Signal()
}

// pop returns the next operation, waiting for one; nil once the queue is closed and empty.
func (q *opQueue) pop() *op {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.ops) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.ops) == 0 {
		return nil
	}
	o := q.ops[0]
	q.ops[0] = nil
	q.ops = q.ops[1:]
	return o
}

func (q *opQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

var _ destination.Destination = (*observed)(nil)
