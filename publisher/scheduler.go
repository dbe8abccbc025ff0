package publisher

import (
	"sync"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// item is one event on its way, with its attempt count.
type item struct {
	ev      *cdc.Event
	attempt int // attempts made so far
}

// scheduler holds per-key FIFOs and the queue of ready heads. A key's head is ready, in
// flight, or waiting for a retry timer; the events behind it wait until it is delivered.
type scheduler struct {
	mu     sync.Mutex
	cond   *sync.Cond
	keys   map[string]*fifo
	ready  fifo
	closed bool
}

func newScheduler() *scheduler {
	s := &scheduler{keys: map[string]*fifo{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// add queues an event behind earlier events of its key.
func (s *scheduler) add(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := it.ev.Key()
	q := s.keys[k]
	if q == nil {
		q = &fifo{}
		s.keys[k] = q
	}
	q.push(it)
	if q.len() == 1 {
		s.pushReady(it)
	}
}

// next blocks until a head is ready, and returns nil once the scheduler is closed.
func (s *scheduler) next() *item {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.ready.len() == 0 && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return nil
	}
	return s.ready.pop()
}

// retry makes a head whose attempt failed ready again (called when its timer fires).
func (s *scheduler) retry(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pushReady(it)
}

// done removes a delivered head and makes its key's next event ready.
func (s *scheduler) done(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := it.ev.Key()
	q := s.keys[k]
	q.pop()
	if q.len() == 0 {
		delete(s.keys, k)
		return
	}
	s.pushReady(q.peek())
}

func (s *scheduler) pushReady(it *item) {
	s.ready.push(it)
	s.cond.Signal()
}

// close wakes every waiting worker; next returns nil from then on.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.cond.Broadcast()
}

// keyCount returns the number of keys with queued events.
func (s *scheduler) keyCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys)
}

// fifo is a slice-backed queue that reuses its storage.
type fifo struct {
	buf  []*item
	head int
}

func (f *fifo) len() int { return len(f.buf) - f.head }

func (f *fifo) push(it *item) { f.buf = append(f.buf, it) }

func (f *fifo) peek() *item { return f.buf[f.head] }

func (f *fifo) pop() *item {
	it := f.buf[f.head]
	f.buf[f.head] = nil
	f.head++
	if f.head == len(f.buf) {
		f.buf, f.head = f.buf[:0], 0
	} else if f.head > 64 && f.head*2 > len(f.buf) {
		n := copy(f.buf, f.buf[f.head:])
		f.buf, f.head = f.buf[:n], 0
	}
	return it
}
