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
	held := map[*lane]int{}
	for _, l := range e.lanes {
		if n := streamedHeld(l); n > 0 {
			held[l] = n
		}
	}
	for _, pk := range e.in.parking {
		if pk.it.kind == kindLive {
			held[pk.l]++
		}
	}
	share := max(min(fairFloor, simBuffer), simBuffer/max(len(held), 1))
	for _, l := range e.lanes {
		if n := held[l]; n > share && !l.bl.on && l.active && !l.removed {
			w.failf("fair share: p%d's endpoint %q holds %d streamed events and has not spilled, more than its fair share "+
				"of the buffer (%d of %d: %d endpoints hold events; the engine counts %d of %d holders, heavy %d, led %v)", p.id, l.id, n, share, simBuffer, len(held), l.held, e.fair.holders, len(e.fair.heavy), e.fair.led)
		}
	}
}

// streamedHeld counts the streamed events l holds and has not settled: queued, in flight,
// waiting for a retry, spilled and not written yet (an attempt's event being written with them,
// stored, once).
func streamedHeld(l *lane) int {
	seen := map[*item]bool{}
	count := func(it *item) {
		if it.kind == kindLive && !it.settled {
			seen[it] = true
		}
	}
	for _, q := range l.keys {
		for i := range q.len() {
			count(q.at(i))
		}
	}
	for _, it := range l.bl.buf {
		count(it)
	}
	for _, it := range l.bl.writing {
		count(it)
	}
	return len(seen)
}
