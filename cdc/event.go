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
	// Seq, when set, is the event's original stream position (X-Event-Sequence), kept by a
	// replayed event; otherwise the position derives from Tx and Index.
	Seq string
	// Replay, when not nil, makes this a replay request (a logical decoding message written by
	// `outbox-relay replay`), not a row: re-send the dead-lettered and parked events of these
	// aggregates at this point of the stream.
	Replay []Aggregate
	// ReplayPipeline is the replay request's ReplayRequest.Pipeline ("" for "default").
	ReplayPipeline string
	// ReplaySince, when not zero, makes this a `replay --since` request (the id of its
	// outbox_replays row) for pipeline ReplayPipeline, not a row.
	ReplaySince int64
	// Replayed marks a row re-sent by a `replay --since` request: it belongs to the request's
	// transaction (Tx) and keeps its original Seq.
	Replayed bool

	Tx *Tx // the transaction that committed it
}

// Aggregate names an aggregate: the ordering key.
type Aggregate struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Key is the aggregate's ordering key, as Event.Key.
func (a Aggregate) Key() string { return a.Type + "\x00" + a.ID }

// ReplayPrefix is the prefix of the transactional logical decoding message that requests a
// replay; its content is a ReplayRequest in JSON.
const ReplayPrefix = "outbox-relay.replay"

// ReplayRequest is the content of a replay message.
type ReplayRequest struct {
	Aggregates []Aggregate `json:"aggregates"`
	// Pipeline names the pipeline whose parked aggregates are replayed; every slot carries every
	// message, and each pipeline obeys only its own. Empty (requests written before pipelines)
	// means the pipeline named "default".
	Pipeline string `json:"pipeline,omitempty"`
	// SinceRequest is the id of an outbox_replays row: re-send the rows it selects (replay
	// --since) for Pipeline.
	SinceRequest int64 `json:"since_request,omitempty"`
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
	// Backfill marks a batch of rows read from the table, not the stream (see the publisher's
	// backfill): the Tracker does not track it.
	Backfill bool
	// Session numbers the streaming session (connection) that received the transaction, from 1.
	Session uint64
	// Resent reports that the transaction committed before its session started, so another
	// session or process may already have delivered it and not confirmed it yet.
	Resent bool

	remaining int // undelivered events, guarded by the Tracker
	bytes     int
}
