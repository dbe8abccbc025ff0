// Package envelope is what a destination delivers: one committed outbox event as a Message, and
// the headers every destination's request or message carries for it.
//
// The stream (cdc) builds a Message once per event as it decodes the row, and the engine
// (publisher) hands the same Message to every attempt, batch and destination that delivers it.
// A Message is data only: the stream's bookkeeping (the transaction it settles against) and
// the operator's control records (replay requests) travel beside it, never in it, so a
// destination depends on this package alone and not on how events are read.
//
// # Sequence
//
// Sequence (X-Event-Sequence) is the event's position in the stream: the commit LSN of its
// transaction and its index within it, as fixed-width uppercase hex
// ("0000000001538A30-00000003"). Compared as strings, the sequences of one aggregate rise
// strictly in commit order. It is computed once, when the transaction commits, and kept by
// events that are re-sent later (a replay sends the original sequence).
package envelope

import "time"

// Message is one committed outbox_events row, as destinations deliver it. A Message is
// immutable once the stream hands it over: it is shared by every attempt and destination, read
// from many goroutines at once, and neither it nor its slices may be modified.
//
// Fields follow the table's columns; a column added to outbox_events (a tenant, for routing)
// becomes a field here.
type Message struct {
	// ID is the row's id (a uuid, in text form): X-Event-Id, and a broker's de-duplication id.
	ID            string
	EventType     string
	AggregateType string
	AggregateID   string
	// Payload is the payload column (jsonb) as PostgreSQL outputs it: the body of a raw request.
	Payload []byte
	// Headers is the row's headers column (a JSON object), or nil when it is absent or NULL.
	Headers []byte
	// Sequence is X-Event-Sequence (see the package doc); the stream and the replays always
	// set it.
	Sequence string
	// CommitTime is when the event's transaction committed. Zero when it is not known: an event
	// read back from the table by a replay or a backfill.
	CommitTime time.Time
	// CreatedAt is the row's created_at (the start of its transaction); zero if the table has
	// no such column.
	CreatedAt time.Time
	// TenantID is the row's tenant_id (migration 13), which routes the event to endpoints: ""
	// when it is NULL, or the stream's relation carries no such column.
	TenantID string
	// DecodeSpan is the W3C traceparent of the span in which the relay decoded the event's
	// transaction, when it traces (relay.Config.TracerProvider, --otel-endpoint): each
	// attempt's span links to it. Empty: the relay does not trace, or the event was read back
	// from the table (a replay, a backfill, an endpoint's backlog). It is the relay's own
	// bookkeeping, never sent: the traceparent a destination sends is the row's headers'.
	DecodeSpan string
}

// SequenceLen is the length of every Sequence.
const SequenceLen = 25

// Sequence returns the X-Event-Sequence of the event at index (from 0) of the transaction
// committed at commitLSN.
func Sequence(commitLSN uint64, index int) string {
	var b [SequenceLen]byte
	return string(AppendSequence(b[:0], commitLSN, index))
}

// AppendSequence appends Sequence(commitLSN, index) to dst.
func AppendSequence(dst []byte, commitLSN uint64, index int) []byte {
	var b [SequenceLen]byte
	hexFixed(b[:16], commitLSN)
	b[16] = '-'
	hexFixed(b[17:], uint64(index))
	return append(dst, b[:]...)
}

// hexFixed writes v as uppercase hex filling dst, most significant digit first.
func hexFixed(dst []byte, v uint64) {
	const digits = "0123456789ABCDEF"
	for i := len(dst) - 1; i >= 0; i-- {
		dst[i] = digits[v&0xF]
		v >>= 4
	}
}
