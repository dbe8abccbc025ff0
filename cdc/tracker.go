package cdc

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// Tracker is the single source of truth for what may be confirmed to the server. It keeps the
// received transactions in stream (commit) order, each with a count of unsettled events and
// control records. When the oldest transaction's count reaches zero it is popped and its end
// LSN becomes confirmable; so the lowest undelivered event always pins the confirmation. It
// also weighs the buffer: events (control records count as events) and bytes received and not
// yet settled.
//
// Add is called by the stream's goroutine only; Ack, AckControl and Grow by any number of
// delivery goroutines.
type Tracker struct {
	mu          sync.Mutex
	fifo        []*Tx
	head        int
	confirmable pglogrepl.LSN
	events      int
	bytes       int
	maxEvents   int
	maxBytes    int
	wake        chan struct{}
}

// NewTracker returns a Tracker whose buffer is full at maxEvents events or maxBytes bytes. A
// transaction larger than either is still admitted whole (it cannot be confirmed in part); the
// buffer then reads as full until it drains.
func NewTracker(maxEvents, maxBytes int) *Tracker {
	return &Tracker{maxEvents: maxEvents, maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// Add registers a committed transaction. It must be called before any of its events is handed
// to delivery, and in commit order.
func (t *Tracker) Add(tx *Tx) {
	t.mu.Lock()
	defer t.mu.Unlock()
	tx.remaining = len(tx.Events) + len(tx.Controls)
	t.events += tx.remaining
	t.bytes += tx.bytes
	t.fifo = append(t.fifo, tx)
	t.popLocked()
}

// Grow adds events to a transaction that is still outstanding: the events one of its control
// records (a replay request) stands for. Call it before settling that record.
func (t *Tracker) Grow(tx *Tx, ms []*envelope.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range ms {
		tx.remaining++
		t.events++
		t.bytes += size(m)
	}
}

// Ack records that m, an event of tx (or one Grow added to it), is settled (delivered, or
// durably parked) and will not be sent again by this process.
func (t *Tracker) Ack(tx *Tx, m *envelope.Message) { t.settle(tx, size(m)) }

// AckControl records that a control record of tx is carried out (a replay request, once the
// events it stands for are added with Grow, or once it is complete).
func (t *Tracker) AckControl(tx *Tx) { t.settle(tx, eventOverhead) }

func (t *Tracker) settle(tx *Tx, bytes int) {
	if tx.Backfill {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tx.remaining--
	t.events--
	t.bytes -= bytes
	t.popLocked()
	t.signal()
}

func (t *Tracker) popLocked() {
	advanced := false
	for t.head < len(t.fifo) && t.fifo[t.head].remaining == 0 {
		if end := t.fifo[t.head].EndLSN; end > t.confirmable {
			t.confirmable = end
		}
		t.fifo[t.head] = nil
		t.head++
		advanced = true
	}
	if t.head == len(t.fifo) {
		t.fifo, t.head = t.fifo[:0], 0
	} else if t.head > 1024 && t.head*2 > len(t.fifo) {
		n := copy(t.fifo, t.fifo[t.head:])
		t.fifo, t.head = t.fifo[:n], 0
	}
	if advanced {
		t.signal()
	}
}

func (t *Tracker) signal() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// Wake is signalled when the confirmable LSN advances or buffer space frees up.
func (t *Tracker) Wake() <-chan struct{} { return t.wake }

// Confirmable returns the highest LSN that may be confirmed: the end of the latest transaction
// that, with every earlier one, is fully delivered, or a keepalive position set by
// AdvanceIfIdle.
func (t *Tracker) Confirmable() pglogrepl.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.confirmable
}

// AdvanceIfIdle raises the confirmable LSN to lsn when no transaction is outstanding, and
// reports whether it did. The caller must know that no transaction is open before lsn.
func (t *Tracker) AdvanceIfIdle(lsn pglogrepl.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head != len(t.fifo) || lsn <= t.confirmable {
		return false
	}
	t.confirmable = lsn
	return true
}

// Full reports whether the buffer holds maxEvents events or maxBytes bytes.
func (t *Tracker) Full() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events >= t.maxEvents || t.bytes >= t.maxBytes
}

// Buffered returns the undelivered events and bytes.
func (t *Tracker) Buffered() (events, bytes int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.events, t.bytes
}

// progress returns Outstanding and Confirmable under one lock, for the per-message read
// deadline.
func (t *Tracker) progress() (int, pglogrepl.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fifo) - t.head, t.confirmable
}

// Outstanding returns the number of transactions not yet fully delivered.
func (t *Tracker) Outstanding() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.fifo) - t.head
}

// OldestCommit returns the commit time of the oldest transaction not fully delivered, or the
// zero time when nothing is outstanding.
func (t *Tracker) OldestCommit() time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.head == len(t.fifo) {
		return time.Time{}
	}
	return t.fifo[t.head].CommitTime
}
