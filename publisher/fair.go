package publisher

import (
	"slices"
	"strconv"
)

// The fair share of the buffer. The stream reads until the tracker's buffer holds
// MaxBufferedEvents unsettled events, and every endpoint's events count there until it settles
// them (delivers them, or writes them to its backlog). Without a bound per endpoint, a burst into
// one that hangs fills the buffer before its spill_after comes, and the stream stops for every
// endpoint. So an endpoint may hold at most its fair share: the buffer divided among the
// endpoints holding streamed events now, and never less than fairFloor events. One that would
// hold more spills to its backlog at once (spill, then writeSpilled without waiting for the
// attempts under way): its events settle once written, and the others go on reading the stream.
//
// Only an endpoint holding more than the floor can be over its share, so when the share shrinks
// (one more endpoint holds events) only those (heavy, at most buffer/fairFloor of them) are
// looked at: the cost does not grow with the number of endpoints.

// fairFloor is the least fair share, in events: an endpoint delivering normally holds its
// attempts under way and what waits behind them, and a share of a few events among thousands
// of endpoints would spill it for that alone.
const fairFloor = 100

// fairShare counts what the lanes hold of the buffer.
type fairShare struct {
	buffer  int     // the buffer, in events (0: no fair share, a one-destination pipeline)
	holders int     // lanes that hold streamed events not settled (lane.held > 0)
	heavy   []*lane // lanes that hold more than the floor, in the order they came over it
	shrunk  bool    // the share shrank (more holders) or the relay leads again: heavy is looked at
	led     bool    // the relay led the slot when last looked at (see keepShares)
}

// share is what one lane may hold now.
func (f *fairShare) share() int {
	return max(min(fairFloor, f.buffer), f.buffer/max(f.holders, 1))
}

// took counts a streamed event routed to l, held until it settles (dropped).
func (f *fairShare) took(l *lane) {
	if l.held++; l.held == 1 {
		f.holders++
		f.shrunk = true
	}
	if l.held == fairFloor+1 {
		f.heavy = append(f.heavy, l)
	}
}

// dropped counts a streamed event of l settled.
func (f *fairShare) dropped(l *lane) {
	if l.held--; l.held == 0 {
		f.holders--
	}
	if l.held == fairFloor {
		for i, h := range f.heavy {
			if h == l {
				f.heavy = append(f.heavy[:i], f.heavy[i+1:]...)
				break
			}
		}
	}
}

// keepShares spills l, and the heavy lanes when the share shrank, when they hold more than
// their share. It runs as events are routed, as the relay leads the slot again, and at every
// backlogTick.
func (e *engine) keepShares(l *lane) {
	f := &e.fair
	if f.buffer == 0 || e.cfg.backlog == nil {
		return
	}
	if lead := e.leading(); lead != f.led {
		f.led, f.shrunk = lead, f.shrunk || lead
	}
	if !f.led {
		return // a relay cut off from the slot spills nothing (leading)
	}
	if f.shrunk {
		f.shrunk = false
		for _, h := range slices.Clone(f.heavy) {
			e.fairSpill(h)
		}
	}
	if l != nil {
		e.fairSpill(l)
	}
}

// fairSpill spills l if it holds more than its share.
func (e *engine) fairSpill(l *lane) {
	share := e.fair.share()
	if l.bl.on || !l.active || l.removed || l.held <= share {
		return
	}
	e.spill(l, "it holds "+strconv.Itoa(l.held)+" events, more than its fair share of the buffer ("+strconv.Itoa(share)+
		" of "+strconv.Itoa(e.fair.buffer)+" events: the buffer divided among the "+strconv.Itoa(e.fair.holders)+
		" endpoints holding events)", true)
	l.bl.fair = l.bl.on
	e.backlogStep(l)
}
