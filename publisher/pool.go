package publisher

import (
	"context"
	"sync"
	"time"
)

// workerPool is a fixed set of delivery workers shared by the publishers of a Fanout (one per
// endpoint), so that the number of goroutines does not grow with the number of endpoints. A
// publisher whose scheduler has a head it may start (ready, not paused, under its in-flight cap
// and rate limit) is in the run queue once; a worker takes the publisher, takes one head from it
// (and puts the publisher back when it has more), makes the attempt and frees the slot.
//
// Lock order: a scheduler's mu, then the pool's mu.
type workerPool struct {
	mu     sync.Mutex
	cond   *sync.Cond
	runq   []*Publisher
	closed bool
}

func newWorkerPool() *workerPool {
	w := &workerPool{}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// wake puts p in the run queue unless it is there already.
func (w *workerPool) wake(p *Publisher) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p.queued || w.closed {
		return
	}
	p.queued = true
	w.runq = append(w.runq, p)
	w.cond.Signal()
}

// next blocks until a publisher may have a head to start, and returns nil once closed.
func (w *workerPool) next() *Publisher {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.runq) == 0 && !w.closed {
		w.cond.Wait()
	}
	if w.closed {
		return nil
	}
	p := w.runq[0]
	w.runq[0] = nil
	w.runq = w.runq[1:]
	if len(w.runq) == 0 {
		w.runq = w.runq[:0:0]
	}
	p.queued = false
	return p
}

// close makes next return nil; workers finish the attempt they are making.
func (w *workerPool) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	w.cond.Broadcast()
}

// run starts n workers, each taking heads until the pool is closed, and returns a function that
// waits for them for up to timeout, then cancels the attempts still under way and waits for
// them to return.
func (w *workerPool) run(n int, log func(timeout time.Duration)) (wait func(timeout time.Duration)) {
	hard, cancelHard := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := w.next(); p != nil; p = w.next() {
				switch it, b := p.sched.take(); {
				case it != nil:
					p.attempt(hard, it)
					p.sched.release(it)
				case b != nil:
					p.attemptBatch(hard, p.dest.(BatchDestination), b)
					p.sched.releaseBatch(b)
				}
			}
		}()
	}
	return func(timeout time.Duration) {
		defer cancelHard()
		finished := make(chan struct{})
		go func() { wg.Wait(); close(finished) }()
		select {
		case <-finished:
		case <-time.After(timeout):
			log(timeout)
			cancelHard()
			<-finished
		}
	}
}
