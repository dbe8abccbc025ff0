package cdc

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
)

// Aggregate names an aggregate: the ordering key.
type Aggregate struct {
	Type string `json:"type"`
	ID   string `json:"id"`
}

// Key is the aggregate's ordering key, as a string.
func (a Aggregate) Key() string { return a.Type + "\x00" + a.ID }

// ReplayPrefix is the prefix of the transactional logical decoding message that requests a
// replay; its content is a ReplayRequest in JSON (the format is internal/controlmsg's).
const ReplayPrefix = controlmsg.ReplayPrefix

// ReplayRequest is the content of a replay message, as the stream hands it over.
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

// Emitter runs a statement; pgx.Tx satisfies it.
type Emitter interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Emit writes r into the WAL in tx, as the transactional logical decoding message the stream
// decodes. It reaches the relays when tx commits, at its place among the transactions.
func (r ReplayRequest) Emit(ctx context.Context, tx Emitter) error {
	aggs := make([]controlmsg.Aggregate, len(r.Aggregates))
	for i, a := range r.Aggregates {
		aggs[i] = controlmsg.Aggregate(a)
	}
	return controlmsg.Replay{Aggregates: aggs, Pipeline: r.Pipeline, SinceRequest: r.SinceRequest}.Emit(ctx, tx)
}

// size is an event's weight against the buffer's byte limit.
func size(m *envelope.Message) int {
	return len(m.ID) + len(m.AggregateType) + len(m.AggregateID) + len(m.EventType) +
		len(m.Payload) + len(m.Headers) + len(m.TenantID) + eventOverhead
}

// eventOverhead approximates the struct, map and queue bookkeeping per buffered event (or
// control record).
const eventOverhead = 256

// Tx is one committed transaction's outbox rows, and the control records beside them.
type Tx struct {
	Xid        uint32
	CommitLSN  pglogrepl.LSN // LSN of the commit record
	EndLSN     pglogrepl.LSN // end of the commit record: what is confirmed once delivered
	CommitTime time.Time
	Events     []*envelope.Message
	// Controls are settled (Tracker.AckControl) like events before the transaction is confirmed.
	Controls []Control
	// Backfill marks a batch of rows read from the table, not the stream (see the publisher's
	// backfill): the Tracker does not track it.
	Backfill bool
	// Session numbers the streaming session (connection) that received the transaction, from 1.
	Session uint64
	// Resent reports that the transaction committed before its session started, so another
	// session or process may already have delivered it and not confirmed it yet.
	Resent bool

	remaining int // undelivered events and controls, guarded by the Tracker
	bytes     int
}

// Control is an operator's request or an endpoint's change met in the stream: it takes effect
// at its place in commit order, after the At events of its transaction before it. One of its
// kinds is set.
type Control struct {
	At int
	// Replay is a replay request (a logical decoding message with ReplayPrefix).
	Replay *ReplayRequest
	// Endpoint is a change of outbox_endpoints (a logical decoding message with EndpointPrefix).
	Endpoint *EndpointChange
}

// EndpointPrefix is the prefix of the transactional logical decoding message that migration 14's
// trigger on outbox_endpoints (function outbox_endpoints_emit) writes for every change of the
// table; its content is a JSON object with "op", "schema", "id" and, for an upsert, "row".
const EndpointPrefix = "outbox-relay.endpoint"

// The operations of an EndpointChange.
const (
	EndpointUpsert   = "upsert"   // an INSERT or UPDATE: Row is the endpoint's row as it now is
	EndpointDelete   = "delete"   // a DELETE, or an UPDATE that changed the id (then the old id)
	EndpointTruncate = "truncate" // a TRUNCATE: every endpoint is gone
)

// EndpointChange is a change of outbox_endpoints met in the stream (the trigger's message), in
// the schema the stream decodes: it applies from its transaction's commit on.
type EndpointChange struct {
	// Op is EndpointUpsert, EndpointDelete or EndpointTruncate.
	Op string
	// ID is the endpoint's id ("" for a truncate).
	ID string
	// Row is, for an upsert, the row as to_jsonb gives it (its keys are the column names, the
	// JSON tags of the relay's endpoint row); nil otherwise. It is a copy: it never aliases the
	// read buffer.
	Row json.RawMessage
}
