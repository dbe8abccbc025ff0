package publisher

import "time"

// The scheduler of a Fanout's lane: the shared worker pool starts its heads (take), one at a
// time per free slot of its in-flight cap and within its rate limit, and each attempt frees its
// slot when it returns (release). Nothing here blocks a worker: a lane that may start nothing
// now is simply not in the pool's run queue until that changes.

// startable reports whether take would return a head now; s.mu is held.
func (s *scheduler) startable() bool {
	l := s.lane
	return !s.closed && !s.paused && (s.ready.len() > 0 || len(s.formed) > 0) && l.busy < l.maxInFlight && l.limitTimer == nil &&
		(!l.open || l.busy == 0 && !time.Now().Before(l.probeAt)) &&
		(l.lingerTimer == nil || len(s.formed) > 0 || s.ready.len() >= l.batch.MaxEvents)
}

// lingers reports whether a new batch should wait for more ready heads, and if so arms the
// timer that wakes the lane when its linger ends; s.mu is held.
func (s *scheduler) lingers() bool {
	l := s.lane
	if len(s.formed) > 0 || !l.batch.Enabled() || l.batch.Linger <= 0 || s.ready.len() >= l.batch.MaxEvents {
		return false
	}
	wait := l.batch.Linger - time.Since(l.readySince)
	if wait <= 0 {
		return false
	}
	if l.lingerTimer == nil {
		l.lingerTimer = time.AfterFunc(wait, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			l.lingerTimer = nil
			s.wakeLocked()
		})
	}
	return true
}

// breakerFailures is how many failed attempts in a row open an endpoint's circuit breaker.
const breakerFailures = 10

// probeDelay is the wait before the n-th probe (from 0) of an open breaker: 1s, doubling up to
// a minute.
func probeDelay(n int) time.Duration {
	return min(time.Second<<min(n, 6), time.Minute)
}

// openBreaker opens the breaker: attempts stop but for a probe now and then.
func (s *scheduler) openBreaker() {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	if l.open || l.retired || s.closed {
		return
	}
	l.open, l.probes = true, 0
	s.nextProbeLocked()
}

// closeBreaker closes it after a successful attempt: every ready head may start again.
func (s *scheduler) closeBreaker() {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	if !l.open {
		return
	}
	l.open = false
	if l.probeTimer != nil {
		l.probeTimer.Stop()
		l.probeTimer = nil
	}
	s.wakeLocked()
}

// nextProbeLocked schedules the next probe and the timer that wakes the lane for it; s.mu is
// held.
func (s *scheduler) nextProbeLocked() {
	l := s.lane
	d := probeDelay(l.probes)
	l.probeAt = time.Now().Add(d)
	if l.probeTimer != nil {
		l.probeTimer.Stop()
	}
	l.probeTimer = time.AfterFunc(d, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.wakeLocked()
	})
}

// breakerOpen reports whether the breaker is open.
func (s *scheduler) breakerOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lane.open
}

// stopTimers stops the lane's rate-limit and probe timers; s.mu is held.
func (l *laneSched) stopTimers() {
	if l.limitTimer != nil {
		l.limitTimer.Stop()
		l.limitTimer = nil
	}
	if l.probeTimer != nil {
		l.probeTimer.Stop()
		l.probeTimer = nil
	}
	if l.lingerTimer != nil {
		l.lingerTimer.Stop()
		l.lingerTimer = nil
	}
}

// wakeLocked puts the lane in the pool's run queue when it may start a head; s.mu is held.
func (s *scheduler) wakeLocked() {
	if s.startable() {
		s.lane.pool.wake(s.lane.owner)
	}
}

// take returns what to attempt next, or nothing when nothing may start now (none ready,
// paused, at the cap, rate-limited: then a timer wakes the lane once the window opens): a formed
// batch (a retry, the halves of a split), or, when the lane batches, a new batch of the ready
// heads and the events queued behind them, or else one ready head. It counts as one attempt
// against the cap and the rate limit until release or releaseBatch.
func (s *scheduler) take() (*item, *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	if !s.startable() || s.lingers() || s.limited() {
		return nil, nil
	}
	l.busy++
	l.probing = l.open
	defer s.wakeLocked() // another worker may start what is ready next
	var b *batch
	switch {
	case len(s.formed) > 0:
		b = s.formed[0]
		s.formed[0] = nil
		s.formed = s.formed[1:]
	case l.batch.Enabled():
		b = s.gatherReady(l.batch)
		if l.lingerTimer != nil {
			l.lingerTimer.Stop() // full before its linger ended
			l.lingerTimer = nil
		}
		l.readySince = time.Now() // the heads left wait a linger of their own
	default:
		it := s.ready.pop()
		l.inflight[it] = true
		return it, nil
	}
	for _, it := range b.items {
		l.inflight[it] = true
	}
	return nil, b
}

// limited reports whether the rate limit lets an attempt start now, and if not arms the timer
// that wakes the lane once it does; s.mu is held.
func (s *scheduler) limited() bool {
	l := s.lane
	if l.limit == nil {
		return false
	}
	wait := l.limit.try(time.Now())
	if wait <= 0 {
		return false
	}
	l.limitTimer = time.AfterFunc(wait, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		l.limitTimer = nil
		s.wakeLocked()
	})
	return true
}

// gatherReady forms a batch of the ready heads, then the events behind each, key by key, while
// they fit; s.mu is held and a head is ready (take lingered for more already).
func (s *scheduler) gatherReady(cfg Batch) *batch {
	b := &batch{}
	var heads []*item
	count, size := 0, 0
	for s.ready.len() > 0 && count < cfg.MaxEvents && size < cfg.MaxBytes {
		h := s.ready.peek()
		if len(heads) > 0 && size+len(h.m.Payload) > cfg.MaxBytes {
			break
		}
		s.ready.pop()
		heads = append(heads, h)
		count, size = count+1, size+len(h.m.Payload)
	}
	for _, h := range heads {
		q := s.keys[h.key()]
		b.items = append(b.items, h)
		for i := 1; i < q.len() && count < cfg.MaxEvents; i++ {
			it := q.at(i)
			if size+len(it.m.Payload) > cfg.MaxBytes {
				break
			}
			b.items = append(b.items, it)
			count, size = count+1, size+len(it.m.Payload)
		}
	}
	return b
}

// releaseBatch frees the slot of a batch's attempt.
func (s *scheduler) releaseBatch(b *batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range b.items {
		delete(s.lane.inflight, it)
	}
	s.releasedLocked()
}

// release frees the slot of an attempt that returned (delivered, failed or handed back).
func (s *scheduler) release(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.lane.inflight, it)
	s.releasedLocked()
}

// releasedLocked frees an attempt's slot; after a probe that failed (the breaker still open) it
// schedules the next one. s.mu is held.
func (s *scheduler) releasedLocked() {
	l := s.lane
	l.busy--
	if l.open && l.probing && !s.closed {
		l.probes++ // a probe failed (a success closes the breaker before this): the next waits longer
		s.nextProbeLocked()
	}
	l.probing = false
	s.wakeLocked()
}

// setLimits changes the lane's in-flight cap, rate limit and batching (an endpoint's row
// changed).
func (s *scheduler) setLimits(maxInFlight, ratePerSecond int, b Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	b.defaults()
	l.batch = b
	l.maxInFlight = max(maxInFlight, 1)
	switch {
	case ratePerSecond <= 0:
		l.limit = nil
	case l.limit == nil || len(l.limit.starts) != ratePerSecond:
		l.limit = newWindowLimiter(ratePerSecond, time.Second)
	}
	s.wakeLocked()
}

// retire stops the lane for good (its endpoint was disabled or removed): it takes out and
// returns every event it holds that is not in flight (queued, ready, waiting for a retry), in
// order per key, and stops the timers. An attempt in flight finishes; isRetired tells its
// outcome to settle it instead of retrying. Events added later are refused (add returns true
// and the caller settles them: see Publisher.add).
func (s *scheduler) retire() []*item {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	l.retired = true
	for it, t := range s.timers {
		t.Stop()
		delete(s.timers, it)
	}
	l.stopTimers()
	for s.ready.len() > 0 {
		s.ready.pop()
	}
	s.formed = nil // their events are in their keys' queues, taken out below
	var out []*item
	for k, q := range s.keys {
		kept := &fifo{}
		for q.len() > 0 {
			it := q.pop()
			if l.inflight[it] {
				kept.push(it)
				continue
			}
			out = append(out, it)
		}
		if kept.len() == 0 {
			delete(s.keys, k)
		} else {
			s.keys[k] = kept
		}
	}
	return out
}

// isRetired reports whether retire was called.
func (s *scheduler) isRetired() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lane != nil && s.lane.retired
}

// undelivered returns how many events the lane holds (queued, in flight, waiting for a retry)
// and the commit time of the oldest of the heads (zero when none is known). An event read back
// from the endpoint's backlog has no commit time: its row's created_at (its transaction's
// start, a little earlier) stands in, so that an endpoint owed events for hours says so
// (outbox_relay_endpoint_oldest_undelivered_seconds, which an alert reads).
func (s *scheduler) undelivered() (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.keys {
		n += q.len()
		head := q.peek()
		t := head.tx.CommitTime
		if t.IsZero() && head.m != nil {
			t = head.m.CreatedAt
		}
		if !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	return n, oldest
}
