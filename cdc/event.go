package cdc

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Event is one committed outbox_events row.
type Event struct {
	ID            string // uuid, text form
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte // the jsonb column's text, as PostgreSQL outputs it
	Headers       []byte // the optional headers jsonb column, nil when absent or NULL
	CreatedAt     time.Time
	Index         int // position within its transaction, from 0

	Tx *Tx // the transaction that committed it
}

// Key is the ordering key: events with equal keys are delivered one at a time, in commit order.
func (e *Event) Key() string { return e.AggregateType + "\x00" + e.AggregateID }

// Size is the event's weight against the buffer's byte limit.
func (e *Event) Size() int {
	return len(e.ID) + len(e.AggregateType) + len(e.AggregateID) + len(e.EventType) +
		len(e.Payload) + len(e.Headers) + eventOverhead
}

// eventOverhead approximates the struct, map and queue bookkeeping per buffered event.
const eventOverhead = 256

// Tx is one committed transaction's outbox rows.
type Tx struct {
	Xid        uint32
	CommitLSN  pglogrepl.LSN // LSN of the commit record
	EndLSN     pglogrepl.LSN // end of the commit record: what is confirmed once delivered
	CommitTime time.Time
	Events     []*Event

	remaining int // undelivered events, guarded by the Tracker
	bytes     int
}
