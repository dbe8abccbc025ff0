package publisher

import "time"

// The scheduler of a Fanout's lane: the shared worker pool starts its heads (take), one at a
// time per free slot of its in-flight cap and within its rate limit, and each attempt frees its
// slot when it returns (release). Nothing here blocks a worker: a lane that may start nothing
// now is simply not in the pool's run queue until that changes.

// startable reports whether take would return a head now; s.mu is held.
func (s *scheduler) startable() bool {
	l := s.lane
	return !s.closed && !s.paused && s.ready.len() > 0 && len(l.inflight) < l.maxInFlight && l.limitTimer == nil
}

// wakeLocked puts the lane in the pool's run queue when it may start a head; s.mu is held.
func (s *scheduler) wakeLocked() {
	if s.startable() {
		s.lane.pool.wake(s.lane.owner)
	}
}

// take returns a ready head to attempt, or nil when none may start now (none ready, paused, at
// the cap, rate-limited: then a timer wakes the lane once the window opens). The head counts
// against the cap until release.
func (s *scheduler) take() *item {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	if !s.startable() {
		return nil
	}
	if l.limit != nil {
		if wait := l.limit.try(time.Now()); wait > 0 {
			l.limitTimer = time.AfterFunc(wait, func() {
				s.mu.Lock()
				defer s.mu.Unlock()
				l.limitTimer = nil
				s.wakeLocked()
			})
			return nil
		}
	}
	it := s.ready.pop()
	l.inflight[it] = true
	s.wakeLocked() // another worker may start the next ready head
	return it
}

// release frees the slot of an attempt that returned (delivered, failed or handed back).
func (s *scheduler) release(it *item) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.lane.inflight, it)
	s.wakeLocked()
}

// setLimits changes the lane's in-flight cap and rate limit (an endpoint's row changed).
func (s *scheduler) setLimits(maxInFlight, ratePerSecond int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
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
	if l.limitTimer != nil {
		l.limitTimer.Stop()
		l.limitTimer = nil
	}
	for s.ready.len() > 0 {
		s.ready.pop()
	}
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
// and the commit time of the oldest of the heads (zero when none is known).
func (s *scheduler) undelivered() (n int, oldest time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.keys {
		n += q.len()
		if t := q.peek().tx.CommitTime; !t.IsZero() && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	return n, oldest
}
