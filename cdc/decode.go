package cdc

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/controlmsg"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// OutboxTable is the table whose inserts become events, in the schema a Decoder is made for. A
// table of that name in another schema is ignored, even if the publication carries it.
const OutboxTable = schema.Events

// ErrMalformed wraps every error about bytes that are not valid pgoutput.
var ErrMalformed = errors.New("malformed pgoutput message")

// Decoder turns pgoutput (protocol version 1) messages into committed transactions. It is pure:
// it does no I/O, and its only state is the relation cache and the open transaction. Use a new
// Decoder for each replication connection, since relations are re-sent per connection.
type Decoder struct {
	schema    string
	relations map[uint32]*relation
	open      *Tx
}

// relation maps the outbox table's columns to their positions in a tuple.
type relation struct {
	outbox bool
	cols   columns
}

type columns struct {
	id, aggType, aggID, evType, payload, headers, createdAt, tenantID int
}

// NewDecoder returns a Decoder of the inserts into outbox_events of schema s (the namespace the
// Relation message names) and of the changes of s's outbox_endpoints, with an empty relation
// cache.
func NewDecoder(s string) *Decoder { return &Decoder{schema: s, relations: map[uint32]*relation{}} }

// InTx reports whether a transaction has begun and not yet committed.
func (d *Decoder) InTx() bool { return d.open != nil }

// Decode consumes one pgoutput message. It returns the transaction when the message is its
// Commit, and nil otherwise. Malformed input returns an error wrapping ErrMalformed and never
// panics. data may alias a read buffer: nothing returned refers to it.
func (d *Decoder) Decode(data []byte) (tx *Tx, err error) {
	defer func() {
		if r := recover(); r != nil {
			tx, err = nil, fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	if len(data) == 0 {
		return nil, fmt.Errorf("%w: empty message", ErrMalformed)
	}
	switch pglogrepl.MessageType(data[0]) {
	case pglogrepl.MessageTypeInsert:
		return nil, d.insert(data[1:])
	case pglogrepl.MessageTypeBegin, pglogrepl.MessageTypeCommit, pglogrepl.MessageTypeRelation:
		return d.parsed(data)
	case pglogrepl.MessageTypeMessage:
		return nil, d.message(data[1:])
	case pglogrepl.MessageTypeOrigin, pglogrepl.MessageTypeType, pglogrepl.MessageTypeTruncate, pglogrepl.MessageTypeUpdate, pglogrepl.MessageTypeDelete:
		// Not outbox inserts. They are not parsed at all, which also keeps pglogrepl's
		// unchecked allocations (a Truncate's relation count) away from untrusted lengths.
		return nil, nil
	}
	return nil, fmt.Errorf("%w: unknown message type %q", ErrMalformed, data[0])
}

// parsed handles the messages that pglogrepl parses safely once their counts are checked.
func (d *Decoder) parsed(data []byte) (*Tx, error) {
	if data[0] == byte(pglogrepl.MessageTypeRelation) {
		if err := checkRelation(data[1:]); err != nil {
			return nil, err
		}
	}
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		return nil, d.relation(m)
	case *pglogrepl.BeginMessage:
		return nil, d.begin(m)
	case *pglogrepl.CommitMessage:
		return d.commit(m)
	}
	return nil, nil
}

// checkRelation bounds the column count of a Relation message by its length: each column takes
// at least 10 bytes (flags, name terminator, type oid, modifier).
func checkRelation(b []byte) error {
	i := 4                   // relation id
	for k := 0; k < 2; k++ { // namespace and name, NUL-terminated
		n := bytes.IndexByte(b[min(i, len(b)):], 0)
		if n < 0 {
			return fmt.Errorf("%w: unterminated name in Relation", ErrMalformed)
		}
		i += n + 1
	}
	i++ // replica identity
	if i+2 > len(b) {
		return fmt.Errorf("%w: short Relation", ErrMalformed)
	}
	ncols := int(binary.BigEndian.Uint16(b[i:]))
	if ncols*10 > len(b)-i-2 {
		return fmt.Errorf("%w: Relation claims %d columns in %d bytes", ErrMalformed, ncols, len(b)-i-2)
	}
	return nil
}

func (d *Decoder) relation(m *pglogrepl.RelationMessage) error {
	r := &relation{outbox: m.Namespace == d.schema && m.RelationName == OutboxTable}
	if r.outbox {
		cols, err := mapColumns(m)
		if err != nil {
			return err
		}
		r.cols = cols
	}
	d.relations[m.RelationID] = r
	return nil
}

func mapColumns(m *pglogrepl.RelationMessage) (columns, error) {
	c := columns{-1, -1, -1, -1, -1, -1, -1, -1}
	for i, col := range m.Columns {
		switch col.Name {
		case "id":
			c.id = i
		case "aggregate_type":
			c.aggType = i
		case "aggregate_id":
			c.aggID = i
		case "event_type":
			c.evType = i
		case "payload":
			c.payload = i
		case "headers":
			c.headers = i
		case "created_at":
			c.createdAt = i
		case "tenant_id":
			c.tenantID = i
		}
	}
	if c.id < 0 || c.aggType < 0 || c.aggID < 0 || c.evType < 0 || c.payload < 0 {
		return c, fmt.Errorf("relation %s.%s lacks an outbox column (id, aggregate_type, aggregate_id, event_type, payload)",
			m.Namespace, m.RelationName)
	}
	return c, nil
}

func (d *Decoder) begin(m *pglogrepl.BeginMessage) error {
	if d.open != nil {
		return fmt.Errorf("%w: BEGIN inside transaction %d", ErrMalformed, d.open.Xid)
	}
	d.open = &Tx{Xid: m.Xid, CommitLSN: m.FinalLSN, CommitTime: m.CommitTime}
	return nil
}

// insert decodes an Insert body: relation id, 'N', then the new tuple.
func (d *Decoder) insert(b []byte) error {
	if d.open == nil {
		return fmt.Errorf("%w: INSERT outside a transaction", ErrMalformed)
	}
	if len(b) < 7 || b[4] != 'N' {
		return fmt.Errorf("%w: INSERT without a new tuple", ErrMalformed)
	}
	relID := binary.BigEndian.Uint32(b)
	rel, ok := d.relations[relID]
	if !ok {
		return fmt.Errorf("%w: INSERT for unknown relation %d", ErrMalformed, relID)
	}
	if !rel.outbox {
		return nil
	}
	m, err := rel.cols.message(b[5:])
	if err != nil {
		return err
	}
	d.open.Events = append(d.open.Events, m)
	d.open.bytes += size(m)
	return nil
}

// message handles a logical decoding message: flags (1 = transactional), LSN, prefix, content
// length and content. Only transactional replay requests and endpoint changes of the decoder's
// schema matter; anything else, including one whose content does not parse, is ignored, so an
// operator's bad message (or another tool's) cannot stop the stream.
func (d *Decoder) message(b []byte) error {
	if len(b) < 9 || b[0]&1 == 0 || d.open == nil {
		return nil
	}
	rest := b[9:]
	n := bytes.IndexByte(rest, 0)
	if n < 0 {
		return nil
	}
	prefix := rest[:n]
	if string(prefix) != ReplayPrefix && string(prefix) != EndpointPrefix {
		return nil
	}
	rest = rest[n+1:]
	if len(rest) < 4 {
		return nil
	}
	l := int(binary.BigEndian.Uint32(rest))
	if l > len(rest)-4 {
		return fmt.Errorf("%w: message content claims %d bytes, %d left", ErrMalformed, l, len(rest)-4)
	}
	c := Control{At: len(d.open.Events)}
	if string(prefix) == ReplayPrefix {
		c.Replay = replayRequest(rest[4 : 4+l])
	} else {
		c.Endpoint = d.endpointChange(rest[4 : 4+l])
	}
	if c.Replay == nil && c.Endpoint == nil {
		return nil
	}
	d.open.Controls = append(d.open.Controls, c)
	d.open.bytes += eventOverhead
	if c.Endpoint != nil {
		d.open.bytes += len(c.Endpoint.ID) + len(c.Endpoint.Row)
	}
	return nil
}

// replayRequest decodes a replay message's content, nil when it does not parse or asks for
// nothing.
func replayRequest(content []byte) *ReplayRequest {
	r, ok := controlmsg.DecodeReplay(content)
	if !ok {
		return nil
	}
	req := &ReplayRequest{Pipeline: r.Pipeline, SinceRequest: r.SinceRequest}
	for _, a := range r.Aggregates {
		req.Aggregates = append(req.Aggregates, Aggregate(a))
	}
	return req
}

// endpointMessage is the content of the trigger's message (migration 14).
type endpointMessage struct {
	Op     string          `json:"op"`
	Schema string          `json:"schema"`
	ID     string          `json:"id"`
	Row    json.RawMessage `json:"row"`
}

// endpointChange decodes an endpoint message's content, nil when it does not parse, is
// another schema's, or does not say what an operation needs (an id, an upsert's row as a JSON
// object). Unmarshal copies the row, so it does not alias content.
func (d *Decoder) endpointChange(content []byte) *EndpointChange {
	var m endpointMessage
	if err := json.Unmarshal(content, &m); err != nil || m.Schema != d.schema {
		return nil
	}
	switch {
	case m.Op == EndpointUpsert && m.ID != "" && len(m.Row) > 0 && m.Row[0] == '{':
		return &EndpointChange{Op: m.Op, ID: m.ID, Row: m.Row}
	case m.Op == EndpointDelete && m.ID != "":
		return &EndpointChange{Op: m.Op, ID: m.ID}
	case m.Op == EndpointTruncate:
		return &EndpointChange{Op: m.Op}
	}
	return nil
}

func (d *Decoder) commit(m *pglogrepl.CommitMessage) (*Tx, error) {
	tx := d.open
	if tx == nil {
		return nil, fmt.Errorf("%w: COMMIT outside a transaction", ErrMalformed)
	}
	d.open = nil
	tx.CommitLSN, tx.EndLSN, tx.CommitTime = m.CommitLSN, m.TransactionEndLSN, m.CommitTime
	tx.stamp()
	return tx, nil
}

// stamp gives every event its Sequence, from the commit LSN and its index, and its CommitTime.
// The sequences of a transaction share one allocation.
func (tx *Tx) stamp() {
	if len(tx.Events) == 0 {
		return
	}
	var b strings.Builder
	b.Grow(len(tx.Events) * envelope.SequenceLen)
	var one [envelope.SequenceLen]byte
	for i := range tx.Events {
		b.Write(envelope.AppendSequence(one[:0], uint64(tx.CommitLSN), i))
	}
	all := b.String()
	for i, m := range tx.Events {
		m.Sequence = all[i*envelope.SequenceLen : (i+1)*envelope.SequenceLen]
		m.CommitTime = tx.CommitTime
	}
}

// message decodes a TupleData into a Message, copying what it keeps. Its Sequence and
// CommitTime are set at the commit.
func (c columns) message(b []byte) (*envelope.Message, error) {
	vals, err := tupleValues(b)
	if err != nil {
		return nil, err
	}
	var f [8][]byte
	for k, i := range [8]int{c.id, c.aggType, c.aggID, c.evType, c.payload, c.headers, c.createdAt, c.tenantID} {
		required := k < 5
		switch {
		case i < 0:
		case i >= len(vals):
			return nil, fmt.Errorf("%w: tuple has %d columns, need column %d", ErrMalformed, len(vals), i)
		case vals[i] == nil && required:
			return nil, fmt.Errorf("%w: column %d is NULL or not text", ErrMalformed, i)
		default:
			f[k] = vals[i]
		}
	}
	return &envelope.Message{
		ID: string(f[0]), AggregateType: string(f[1]), AggregateID: string(f[2]), EventType: string(f[3]),
		Payload: bytes.Clone(f[4]), Headers: bytes.Clone(f[5]), CreatedAt: parseTimestamptz(f[6]), TenantID: string(f[7]),
	}, nil
}

// tupleValues splits a TupleData (column count, then per column a kind byte and, for text and
// binary, a length and the bytes) into the columns' text values, which alias b. NULL, unchanged
// TOAST and binary columns are nil. Every length is checked against b.
func tupleValues(b []byte) ([][]byte, error) {
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: short tuple", ErrMalformed)
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > len(b) { // every column takes at least one byte
		return nil, fmt.Errorf("%w: tuple claims %d columns in %d bytes", ErrMalformed, n, len(b))
	}
	vals := make([][]byte, n)
	i := 2
	for k := 0; k < n; k++ {
		if i >= len(b) {
			return nil, fmt.Errorf("%w: tuple ends at column %d of %d", ErrMalformed, k, n)
		}
		kind := b[i]
		i++
		switch kind {
		case 'n', 'u':
			continue
		case 't', 'b':
		default:
			return nil, fmt.Errorf("%w: unknown tuple column kind %q", ErrMalformed, kind)
		}
		if i+4 > len(b) {
			return nil, fmt.Errorf("%w: column %d length cut short", ErrMalformed, k)
		}
		l := int(binary.BigEndian.Uint32(b[i:]))
		i += 4
		if l > len(b)-i {
			return nil, fmt.Errorf("%w: column %d claims %d bytes, %d left", ErrMalformed, k, l, len(b)-i)
		}
		if kind == 't' {
			vals[k] = b[i : i+l : i+l]
		}
		i += l
	}
	return vals, nil
}

// parseTimestamptz parses PostgreSQL's default (ISO) timestamptz output, such as
// "2026-11-30 04:09:55.123456+00". It returns the zero time for anything else.
func parseTimestamptz(b []byte) time.Time {
	if b == nil {
		return time.Time{}
	}
	for _, layout := range []string{"2006-01-02 15:04:05.999999-07", "2006-01-02 15:04:05.999999-07:00",
		"2006-01-02 15:04:05.999999-07:00:00"} {
		if t, err := time.Parse(layout, string(b)); err == nil {
			return t
		}
	}
	return time.Time{}
}
