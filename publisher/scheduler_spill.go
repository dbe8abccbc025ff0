package publisher

import "time"

// What the scheduler of a Fanout's lane does for its backlog (fanout_spill.go).

// waiting returns how many events the lane holds that were not read from its backlog, and when
// the one waiting longest was queued (zero when none).
func (s *scheduler) waiting() (n int, since time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.keys {
		for i := 0; i < q.len(); i++ {
			it := q.at(i)
			if it.backlog {
				continue
			}
			n++
			if since.IsZero() || it.at.Before(since) {
				since = it.at
			}
		}
	}
	return n, since
}

// special reports whether the lane holds events of a replay or a backfill, which keep their
// own accounting and positions: a lane does not spill while it does.
func (s *scheduler) special() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range s.keys {
		for i := 0; i < q.len(); i++ {
			if it := q.at(i); it.replay || it.since || it.tx.Backfill {
				return true
			}
		}
	}
	return len(s.replaying) > 0
}

// spillQueued takes out every event of the stream that is not in flight (queued, ready,
// waiting for a retry), in order per key, for the backlog; the events read from the backlog
// stay, and so do the attempts under way, whose count it returns. The heads left are made
// ready again.
func (s *scheduler) spillQueued() (out []*item, inFlight int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.lane
	for it, t := range s.timers {
		if !it.backlog && !l.inflight[it] {
			t.Stop()
			delete(s.timers, it)
		}
	}
	// The ready heads that stay (read from the backlog, or handed back by an attempt not yet
	// released) stay ready; the others are taken out below.
	inReady := map[*item]bool{}
	var stay []*item
	for s.ready.len() > 0 {
		if it := s.ready.pop(); it.backlog || l.inflight[it] {
			stay = append(stay, it)
			inReady[it] = true
		}
	}
	for _, it := range stay {
		s.ready.push(it)
	}
	s.formed = nil // their events are in their keys' queues
	if l.lingerTimer != nil {
		l.lingerTimer.Stop()
		l.lingerTimer = nil
	}
	for k, q := range s.keys {
		kept := &fifo{}
		for q.len() > 0 {
			it := q.pop()
			switch {
			case l.inflight[it]:
				if !it.backlog && !it.counted {
					it.counted = true
					inFlight++
				}
				kept.push(it)
			case it.backlog:
				kept.push(it)
			default:
				out = append(out, it)
			}
		}
		if kept.len() == 0 {
			delete(s.keys, k)
			continue
		}
		s.keys[k] = kept
		if h := kept.peek(); !l.inflight[h] && s.timers[h] == nil && !inReady[h] {
			s.pushReady(h)
		}
	}
	return out, inFlight
}

// retireCounting retires the lane (retire) and returns, besides what retire returns, how many
// attempts of streamed events are under way, marking them counted.
func (s *scheduler) retireCounting() ([]*item, int) {
	its := s.retire()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for it := range s.lane.inflight {
		if !it.backlog && !it.counted {
			it.counted = true
			n++
		}
	}
	return its, n
}
