package publisher

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// item is one event on its way: the message destinations see, the transaction it settles
// against, and the publisher's own bookkeeping.
type item struct {
	m       *envelope.Message
	tx      *cdc.Tx
	attempt int // attempts made so far
	// unblamed counts the attempts that failed through no fault of the destination
	// (Result.Unblamed): they do not count toward MaxAttempts.
	unblamed int
	replay   bool // re-sent by a replay request: its aggregate was parked
	since    bool // re-sent by a replay --since request: it counts down the request's page

	// A Fanout lane's: when it was queued; read from the lane's backlog (backlog, with its page
	// and whether its delivery marks the row); an attempt of it was under way when the lane
	// spilled or was disabled (counted in laneBacklog.live).
	at      time.Time
	backlog bool
	mark    bool
	counted bool
	page    *backlogPage
}

// key is the item's ordering key, its aggregate. As a map key it costs no allocation.
func (it *item) key() cdc.Aggregate {
	return cdc.Aggregate{Type: it.m.AggregateType, ID: it.m.AggregateID}
}

// scheduler holds per-key FIFOs and the queue of ready heads. A key's head is ready, in
// flight, or waiting for a retry timer; the events behind it wait until it is delivered.
//
// A parked key (its head was dead-lettered) queues nothing: add refuses its events, which the
// caller parks durably instead, until a replay unparks it with the parked events in order.
//
// The scheduler owns the retry timers of its heads, and stops them when it is closed.
type scheduler struct {
	mu        sync.Mutex
	cond      *sync.Cond
	keys      map[cdc.Aggregate]*fifo
	ready     fifo
	parked    map[cdc.Aggregate]bool
	replaying map[cdc.Aggregate]int // replayed events not yet delivered, per key
	timers    map[*item]*time.Timer
	closed    bool
	// formed are batches ready to be sent as they are (batched delivery only; see nextBatch),
	// and gathering is set while a worker gathers a new batch from the ready heads.
	formed    []*batch
	gathering bool
	// gcond wakes the gathering worker (on mu) when a head becomes ready or its linger ends.
	gcond *sync.Cond
	// paused holds every ready head back: next hands out nothing until it is cleared.
	paused bool
	// parkedGauge, if set, counts the parked keys; the scheduler adds its own to it (the lanes
	// of a Fanout share one gauge).
	parkedGauge    prometheus.Gauge
	parkedReported int

	// lane is set for the publisher of one endpoint of a Fanout: its heads are started by the
	// shared worker pool (take and release instead of next).
	lane *laneSched
}

// laneSched is what a scheduler of a Fanout's lane adds: the pool that starts its heads, its own
// in-flight cap and rate limit, and what is in flight.
type laneSched struct {
	pool        *workerPool
	owner       *Publisher
	maxInFlight int
	inflight    map[*item]bool // the events of the attempts under way
	busy        int            // attempts under way (a batch is one)
	batch       Batch          // the endpoint's batching
	// A batch that is not full waits up to batch.Linger from when the ready queue last got its
	// oldest head (readySince), on lingerTimer.
	readySince  time.Time
	lingerTimer *time.Timer
	// The circuit breaker: while open (the endpoint failed breakerFailures attempts in a row),
	// one attempt at a time is made, a probe, at most one per probe delay, until one succeeds.
	open       bool
	probes     int       // probes made since it opened
	probing    bool      // the attempt under way is a probe (while open, one at a time)
	probeAt    time.Time // the next probe's earliest start
	probeTimer *time.Timer
	limit      *windowLimiter // nil: no rate limit
	limitTimer *time.Timer    // set while a rate-limited head waits for the window to open
	retired    bool           // see retire
}

func newScheduler() *scheduler {
	s := &scheduler{keys: map[cdc.Aggregate]*fifo{}, parked: map[cdc.Aggregate]bool{}, replaying: map[cdc.Aggregate]int{},
		timers: map[*item]*time.Timer{}}
	s.cond = sync.NewCond(&s.mu)
	s.gcond = sync.NewCond(&s.mu)
	return s
}

// add queues an event behind earlier events of its key. It returns false, queuing nothing,
// when the key is parked.
func (s *scheduler) add(it *item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := it.key()
	if s.parked[k] {
		return false
	}
	s.enqueueLocked(k, it)
	return true
}

func (s *scheduler) enqueueLocked(k cdc.Aggregate, it *item) {
	q := s.keys[k]
	if q == nil {
		q = &fifo{}
		s.keys[k] = q
	}
	q.push(it)
	if q.len() == 1 {
		s.pushReady(it)
	} else if s.gathering {
		s.gcond.Signal() // it may fill the batch being gathered
	}
}

// next blocks until a head is ready and the scheduler is not paused, and returns nil once the
// scheduler is closed.
func (s *scheduler) next() *item {
	s.mu.Lock()
	defer s.mu.Unlock()
	for (s.ready.len() == 0 || s.paused) && !s.closed {
		s.cond.Wait()
	}
	if s.closed {
		return nil
	}
	return s.ready.pop()
}

// retryIn makes a head whose attempt failed ready again after d. Nothing happens once the
// scheduler is closed.
func (s *scheduler) retryIn(it *item, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.timers[it] = time.AfterFunc(d, func() { s.retry(it) })
}

// setPaused holds ready heads back (true) or lets workers take them again (false).
func (s *scheduler) setPaused(paused bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = paused
	if !paused {
		s.cond.Broadcast()
		if s.lane != nil {
			s.wakeLocked()
		}
	}
}

// requeue makes a head whose attempt did not count ready again at once (behind a pause).
func (s *scheduler) requeue(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.pushReady(it)
	}
}

// retry makes a head whose attempt failed ready again (called when its timer fires).
func (s *scheduler) retry(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.timers, it)
	if s.closed {
		return
	}
	s.pushReady(it)
}

// done removes a delivered head and makes its key's next event ready. It reports whether it was
// the last outstanding event of a replay, whose key may now be forgotten as parked.
func (s *scheduler) done(it *item) (lastReplay bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := it.key()
	if it.replay {
		s.replaying[k]--
		if lastReplay = s.replaying[k] == 0; lastReplay {
			delete(s.replaying, k)
		}
	}
	q := s.keys[k]
	q.pop()
	if q.len() == 0 {
		delete(s.keys, k)
	} else {
		s.pushReady(q.peek())
	}
	return lastReplay
}

// park parks the key of a head that failed for good, and returns the events queued behind it.
func (s *scheduler) park(it *item) []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := it.key()
	s.parked[k] = true
	s.parkedChanged()
	delete(s.replaying, k)
	q := s.keys[k]
	delete(s.keys, k)
	q.pop() // the failed head itself
	var behind []*item
	for q.len() > 0 {
		behind = append(behind, q.pop())
	}
	return behind
}

// setParked marks keys parked, as loaded at start.
func (s *scheduler) setParked(keys []cdc.Aggregate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.parked[k] = true
	}
	s.parkedChanged()
}

// isParked reports whether k is parked.
func (s *scheduler) isParked(k cdc.Aggregate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.parked[k]
}

// unpark queues a parked key's replayed events, in order, ahead of anything that arrives later;
// they settle against tx, the replay request's transaction.
func (s *scheduler) unpark(k cdc.Aggregate, tx *cdc.Tx, ms []*envelope.Message) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.parked, k)
	s.parkedChanged()
	for _, m := range ms {
		s.enqueueLocked(k, &item{m: m, tx: tx, replay: true})
	}
	if len(ms) > 0 {
		s.replaying[k] += len(ms)
	}
}

// empty reports whether no event is queued, in flight or waiting for a retry.
func (s *scheduler) empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.keys) == 0
}

// parkedCount returns the number of parked keys.
func (s *scheduler) parkedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.parked)
}

// parkedChanged adds the change of len(parked) to the parked gauge; s.mu is held.
func (s *scheduler) parkedChanged() {
	if s.parkedGauge != nil && len(s.parked) != s.parkedReported {
		s.parkedGauge.Add(float64(len(s.parked) - s.parkedReported))
		s.parkedReported = len(s.parked)
	}
}

func (s *scheduler) pushReady(it *item) {
	s.ready.push(it)
	if s.lane != nil {
		if s.ready.len() == 1 {
			s.lane.readySince = time.Now()
		}
		s.wakeLocked()
		return
	}
	if s.gathering {
		s.gcond.Signal()
		return
	}
	s.cond.Signal()
}

// close wakes every waiting worker and stops the retry timers; next returns nil from then on.
// A timer that has fired already finds the scheduler closed and queues nothing.
func (s *scheduler) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.gcond.Broadcast()
	for it, t := range s.timers {
		t.Stop()
		delete(s.timers, it)
	}
	if s.lane != nil {
		s.lane.stopTimers()
	}
	s.cond.Broadcast()
}

// fifo is a slice-backed queue that reuses its storage.
type fifo struct {
	buf  []*item
	head int
}

func (f *fifo) len() int { return len(f.buf) - f.head }

func (f *fifo) push(it *item) { f.buf = append(f.buf, it) }

func (f *fifo) peek() *item { return f.buf[f.head] }

// at returns the i-th item from the head.
func (f *fifo) at(i int) *item { return f.buf[f.head+i] }

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
