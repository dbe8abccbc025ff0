package publisher

// The fair share of the buffer (fair.go), checked after every input of every relay: a lane that
// has not spilled holds at most its fair share of the tracker's buffer, the buffer divided among
// the lanes holding streamed events (never less than fairFloor). Counted here from what the
// lanes hold, not from the engine's own counts. A relay cut off from the slot spills nothing
// (leading), and a lane disabled or removed holds nothing of the stream: they are left out.
func (w *world) checkFairShare(p *proc) {
	e := p.e
	if w.eps == nil || e.cfg.backlog == nil || !p.alive || !e.leading() || len(w.fails) > 0 {
		return
	}
	parking := map[*lane][]*item{}
	for _, pk := range e.in.parking {
		parking[pk.l] = append(parking[pk.l], pk.it)
	}
	holders := 0
	for _, l := range e.lanes {
		if holdsStreamed(l, parking[l]) {
			holders++
		}
	}
	share := max(min(fairFloor, simBuffer), simBuffer/max(holders, 1))
	for _, l := range e.lanes {
		if l.bl.on || !l.active || l.removed || l.queued+len(l.bl.buf)+len(l.bl.writing)+len(parking[l]) <= share {
			continue // (it holds fewer events than its share, of any kind: none counted one by one)
		}
		if n := streamedHeld(l, parking[l]); n > share {
			w.failf("fair share: p%d's endpoint %q holds %d streamed events and has not spilled, more than its fair share "+
				"of the buffer (%d of %d: %d endpoints hold events; the engine counts %d of %d holders)", p.id, l.id, n,
				share, simBuffer, holders, l.held, e.fair.holders)
		}
	}
}

// streamedHeld counts the streamed events l holds and has not settled: queued, in flight,
// waiting for a retry, spilled and not written yet (an attempt's event being written with them,
// stored, once), being parked.
func streamedHeld(l *lane, parking []*item) int {
	seen := map[*item]bool{}
	l.eachHeld(parking, func(it *item) bool {
		seen[it] = true
		return true
	})
	return len(seen)
}

// holdsStreamed reports whether l holds a streamed event it has not settled.
func holdsStreamed(l *lane, parking []*item) bool {
	found := false
	l.eachHeld(parking, func(*item) bool {
		found = true
		return false
	})
	return found
}

// eachHeld calls f with each streamed event l holds and has not settled, while f returns true.
func (l *lane) eachHeld(parking []*item, f func(*item) bool) {
	its := [][]*item{l.bl.buf, l.bl.writing, parking}
	for _, q := range l.keys {
		for i := range q.len() {
			if it := q.at(i); it.kind == kindLive && !it.settled && !f(it) {
				return
			}
		}
	}
	for _, s := range its {
		for _, it := range s {
			if it.kind == kindLive && !it.settled && !f(it) {
				return
			}
		}
	}
}
