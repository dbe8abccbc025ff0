package publisher

import (
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/store"
)

// pageOf is a backlog page whose entries' events are found (true) or not (false).
func pageOf(ids string, found ...bool) []store.BacklogEvent {
	evs := make([]store.BacklogEvent, len(found))
	for i, f := range found {
		evs[i].EventID = ids + string(rune('a'+i))
		if f {
			evs[i].Message = &envelope.Message{ID: evs[i].EventID}
		}
	}
	return evs
}

// A backlog entry whose event is not found may be one whose commit is not visible yet (the
// stream hands over a transaction a moment before): the lane takes the entries before it, waits
// for it at the head of a page, and skips it as deleted only once it has been missing for
// backlogInvisible, with the missing entries right after it; a new head starts a new wait.
func TestBacklogWaitsForAnEventNotVisibleYet(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var b laneBacklog
	steps := []struct {
		name string
		evs  []store.BacklogEvent
		at   time.Duration
		want int
	}{
		{"all found: the whole page", pageOf("p", true, true, true), 0, 3},
		{"one not found: the entries before it", pageOf("p", true, false, true), 0, 1},
		{"not found at the head: nothing yet", pageOf("q", false, true), 0, 0},
		{"still not found within the wait: nothing", pageOf("q", false, true), backlogInvisible - time.Millisecond, 0},
		{"found at last: the whole page", pageOf("q", true, true), backlogInvisible - time.Millisecond, 2},
		{"another head not found: a wait of its own", pageOf("r", false, false, true, false), backlogInvisible, 0},
		{"waited long enough: it and the missing run after it, up to the next missing", pageOf("r", false, false, true, false),
			2 * backlogInvisible, 3},
	}
	for _, s := range steps {
		if got := b.visible(s.evs, t0.Add(s.at)); got != s.want {
			t.Fatalf("%s: took %d entries, want %d", s.name, got, s.want)
		}
	}
}
