package publisher

import (
	"time"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// itemKind is where an item came from; it decides how the item settles.
type itemKind uint8

const (
	kindLive     itemKind = iota // from the stream: settles against its transaction
	kindReplay                   // re-sent by a replay of its parked aggregate, in the request's transaction
	kindSince                    // re-sent by a replay since a time: counts down the request's page too
	kindBackfill                 // from the slot's backfill: counts down the backfill's page
	kindBacklog                  // read from the lane's backlog: counts down its page, settled already for the slot
)

// item is one event on its way to one lane: the message the destination sees, the transaction
// it settles against, and the engine's bookkeeping of it.
type item struct {
	m       *envelope.Message
	tx      *cdc.Tx
	kind    itemKind
	seq     uint64    // the engine's creation order: ties in sorts, deterministic
	at      time.Time // when it was queued (the spill's age)
	attempt int       // attempts made so far
	// unblamed counts the attempts that failed through no fault of the destination
	// (Result.Unblamed): they do not count toward MaxAttempts.
	unblamed int

	inflight bool // in an attempt under way
	// counted: a streamed event whose attempt was under way when its lane spilled (or was
	// disabled with its events kept); it counts in laneBacklog.live until it settles.
	counted bool
	mark    bool         // read from the backlog: its delivery marks the row done
	resent  bool         // read from the backlog, where a replay --since wrote it: a re-send, never marked
	had     bool         // in flight as another relay's delivery of it came to light (recheckHeld): not retried
	replays uint64       // a replayed event: its lane's replays as it was queued (lane.replays)
	page    *backlogPage // read from the backlog: the page it counts down

	// stored: counted, and written to the backlog while its attempt was under way (the lane
	// took more than its fair share, writeSpilled); settled once, by that write or by the
	// attempt's success, whichever comes first. Delivered, it is sent again from the backlog.
	stored, settled bool
}

// key is the item's ordering key, its aggregate. As a map key it costs no allocation.
func (it *item) key() cdc.Aggregate {
	return cdc.Aggregate{Type: it.m.AggregateType, ID: it.m.AggregateID}
}

// since is when the item's event was committed; for one read back from the backlog (no commit
// time), its row's created_at stands in.
func (it *item) since() time.Time {
	if it.resent {
		return time.Time{} // re-sent by a replay --since: delivered long ago, not owed
	}
	if t := it.tx.CommitTime; !t.IsZero() || it.m == nil {
		return t
	}
	return it.m.CreatedAt
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

// batch is one attempt's events, grouped by key: each group is a prefix of its key's FIFO. An
// event sent alone is a batch of one, so that there is one attempt flow and one retry path.
type batch struct {
	items []*item
	fails int // failed attempts in a row of this composition
	// after, if set, is the rest of a one-key batch that was split: it holds the events of the
	// same key that follow, and becomes ready when this batch is delivered, unless the lane's
	// queues were taken apart since the split (afterGen is their generation then: a spill took
	// those events to the backlog).
	after    *batch
	afterGen uint64
}

// narrowAfter is the number of failed attempts in a row after which a batch of several events
// is split in halves.
const narrowAfter = 2

// split cuts a batch in two: between keys when it has several (both halves may go at once),
// or in the middle of its one key (the second half then waits for the first).
func (b *batch) split() (left, right *batch, chained bool) {
	n := len(b.items)
	cut, best := -1, n
	for i := 1; i < n; i++ {
		if b.items[i].key() != b.items[i-1].key() {
			if d := max(2*i-n, n-2*i); d < best {
				cut, best = i, d
			}
		}
	}
	if cut < 0 {
		cut = n / 2
		right = &batch{items: append([]*item(nil), b.items[cut:]...), after: b.after}
		return &batch{items: append([]*item(nil), b.items[:cut]...), after: right}, right, true
	}
	return &batch{items: append([]*item(nil), b.items[:cut]...)}, &batch{items: append([]*item(nil), b.items[cut:]...)}, false
}

// messages returns the batch's messages and the attempt number of the event tried most often,
// after counting this attempt.
func (b *batch) start() (ms []*envelope.Message, attempt int) {
	ms = make([]*envelope.Message, len(b.items))
	for i, it := range b.items {
		it.attempt++
		it.inflight = true
		attempt = max(attempt, it.attempt)
		ms[i] = it.m
	}
	return ms, attempt
}
