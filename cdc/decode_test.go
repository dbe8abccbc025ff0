package cdc

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// pgoutput v1 message builders, following the protocol documentation's message formats.

func be16(b []byte, v uint16) []byte { return binary.BigEndian.AppendUint16(b, v) }
func be32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func be64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }
func cstr(b []byte, s string) []byte { return append(append(b, s...), 0) }

func msgBegin(final uint64, xid uint32) []byte {
	return be32(be64(be64([]byte{'B'}, final), 0), xid)
}

func msgCommit(commit, end uint64) []byte {
	return be64(be64(be64([]byte{'C', 0}, commit), end), 0)
}

func msgRelation(id uint32, name string, cols ...string) []byte {
	return msgRelationIn(id, "public", name, cols...)
}

func msgRelationIn(id uint32, namespace, name string, cols ...string) []byte {
	b := be32([]byte{'R'}, id)
	b = cstr(cstr(b, namespace), name)
	b = be16(append(b, 'd'), uint16(len(cols)))
	for _, c := range cols {
		b = be32(be32(cstr(append(b, 0), c), 25), 0xFFFFFFFF)
	}
	return b
}

// msgInsert encodes values as text columns; a nil entry is a NULL.
func msgInsert(rel uint32, vals ...*string) []byte {
	b := be16(append(be32([]byte{'I'}, rel), 'N'), uint16(len(vals)))
	for _, v := range vals {
		if v == nil {
			b = append(b, 'n')
			continue
		}
		b = append(be32(append(b, 't'), uint32(len(*v))), *v...)
	}
	return b
}

func s(v string) *string { return &v }

var outboxCols = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "dedup_key", "status",
	"retries", "available_at", "created_at", "processed_at"}

func outboxRow(id, agg string) []*string {
	return []*string{s(id), s("order"), s(agg), s("order.created"), s(`{"n": 1}`), nil, s("pending"), s("0"),
		s("2026-11-30 04:09:55.123456+00"), s("2026-11-30 04:09:55.123456+00"), nil}
}

func TestDecodeTransaction(t *testing.T) {
	d := NewDecoder("public")
	steps := [][]byte{
		msgRelation(16384, "outbox_events", outboxCols...),
		msgRelation(16390, "orders", "id"),
		msgBegin(0x1538A30, 7),
		msgInsert(16384, outboxRow("a1", "42")...),
		msgInsert(16390, s("1")), // another relation in the same transaction: ignored
		msgInsert(16384, outboxRow("a2", "43")...),
	}
	for i, m := range steps {
		tx, err := d.Decode(m)
		if err != nil || tx != nil {
			t.Fatalf("step %d: tx=%v err=%v", i, tx, err)
		}
	}
	if !d.InTx() {
		t.Fatal("InTx false inside a transaction")
	}
	tx, err := d.Decode(msgCommit(0x1538A30, 0x1538A60))
	if err != nil || tx == nil {
		t.Fatalf("commit: tx=%v err=%v", tx, err)
	}
	if d.InTx() {
		t.Fatal("InTx true after commit")
	}
	if tx.CommitLSN != 0x1538A30 || tx.EndLSN != 0x1538A60 || tx.Xid != 7 || len(tx.Events) != 2 {
		t.Fatalf("tx = %+v", tx)
	}
	ev := tx.Events[1]
	if ev.ID != "a2" || ev.AggregateType != "order" || ev.AggregateID != "43" || ev.EventType != "order.created" ||
		string(ev.Payload) != `{"n": 1}` || ev.Headers != nil {
		t.Fatalf("event = %+v", ev)
	}
	// The stream position of the event is computed once, at the commit.
	if ev.Sequence != "0000000001538A30-00000001" || tx.Events[0].Sequence != "0000000001538A30-00000000" ||
		!ev.CommitTime.Equal(tx.CommitTime) || ev.CommitTime.IsZero() {
		t.Fatalf("sequence %q, %q; commit time %v (tx %v)", tx.Events[0].Sequence, ev.Sequence, ev.CommitTime, tx.CommitTime)
	}
	if ev.CreatedAt.IsZero() || ev.CreatedAt.Nanosecond() != 123456000 {
		t.Fatalf("created_at = %v", ev.CreatedAt)
	}
}

func TestDecodeColumnsByNameNotPosition(t *testing.T) {
	// A table whose columns were added in another order (or has more, from later migrations).
	cols := []string{"headers", "payload", "event_type", "aggregate_id", "aggregate_type", "id", "last_error"}
	d := NewDecoder("public")
	mustDecode(t, d, msgRelation(1, "outbox_events", cols...))
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgInsert(1, s(`{"traceparent": "x"}`), s(`[1]`), s("t"), s("agg"), s("typ"), s("id1"), nil))
	tx := mustDecode(t, d, msgCommit(10, 20))
	ev := tx.Events[0]
	if ev.ID != "id1" || ev.AggregateType != "typ" || ev.AggregateID != "agg" || string(ev.Payload) != "[1]" ||
		string(ev.Headers) != `{"traceparent": "x"}` {
		t.Fatalf("event = %+v", ev)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := map[string][][]byte{
		"insert outside tx":   {msgRelation(1, "outbox_events", outboxCols...), msgInsert(1, outboxRow("a", "b")...)},
		"unknown relation":    {msgBegin(1, 1), msgInsert(99, s("x"))},
		"commit outside tx":   {msgCommit(1, 2)},
		"nested begin":        {msgBegin(1, 1), msgBegin(2, 2)},
		"missing columns":     {msgRelation(1, "outbox_events", "id", "payload")},
		"null required":       {msgRelation(1, "outbox_events", outboxCols...), msgBegin(1, 1), msgInsert(1, nil, s("a"), s("b"), s("c"), s("{}"))},
		"short tuple":         {msgRelation(1, "outbox_events", outboxCols...), msgBegin(1, 1), msgInsert(1, s("only-id"))},
		"truncated begin":     {{'B', 0, 0}},
		"unknown message tag": {{'Z', 1, 2, 3}},
	}
	for name, msgs := range cases {
		t.Run(name, func(t *testing.T) {
			d := NewDecoder("public")
			var err error
			for _, m := range msgs {
				if _, err = d.Decode(m); err != nil {
					break
				}
			}
			if err == nil {
				t.Fatal("no error")
			}
			if name != "missing columns" && !errors.Is(err, ErrMalformed) {
				t.Fatalf("err %v does not wrap ErrMalformed", err)
			}
		})
	}
}

func mustDecode(t *testing.T, d *Decoder, m []byte) *Tx {
	t.Helper()
	tx, err := d.Decode(m)
	if err != nil {
		t.Fatal(err)
	}
	return tx
}

// FuzzDecode feeds arbitrary bytes after a valid prefix: the decoder must never panic, and a
// transaction it returns must be internally consistent.
func FuzzDecode(f *testing.F) {
	f.Add(msgInsert(16384, outboxRow("a1", "42")...))
	f.Add(msgCommit(1, 2))
	f.Add(msgRelation(16384, "outbox_events", outboxCols...))
	f.Add([]byte{'I', 0, 0, 0x40, 0, 'N', 0xFF, 0xFF})
	f.Add(msgMessage(true, EndpointPrefix, `{"op":"upsert","schema":"public","id":"ep_1","row":{"id":"ep_1"}}`))
	f.Add(msgMessage(true, EndpointPrefix, `{"op":"truncate","schema":"public"}`))
	f.Add(msgMessage(true, ReplayPrefix, `{"aggregates":[{"type":"order","id":"42"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder("public")
		_, _ = d.Decode(msgRelation(16384, "outbox_events", outboxCols...))
		_, _ = d.Decode(msgBegin(100, 1))
		_, _ = d.Decode(data)
		tx, err := d.Decode(msgCommit(100, 200))
		if err != nil {
			return
		}
		for i, ev := range tx.Events {
			if ev.Sequence != envelope.Sequence(uint64(tx.CommitLSN), i) || !ev.CommitTime.Equal(tx.CommitTime) {
				t.Fatalf("inconsistent event %d: %+v", i, ev)
			}
		}
		for _, c := range tx.Controls {
			if (c.Replay == nil) == (c.Endpoint == nil) || c.At < 0 || c.At > len(tx.Events) {
				t.Fatalf("inconsistent control record: %+v", c)
			}
			if e := c.Endpoint; e != nil && !validEndpointChange(e) {
				t.Fatalf("inconsistent endpoint change: %+v", e)
			}
		}
	})
}

func msgMessage(transactional bool, prefix, content string) []byte {
	flags := byte(0)
	if transactional {
		flags = 1
	}
	b := be64([]byte{'M', flags}, 0x100)
	b = cstr(b, prefix)
	return append(be32(b, uint32(len(content))), content...)
}

func TestDecodeReplayRequest(t *testing.T) {
	d := NewDecoder("public")
	mustDecode(t, d, msgRelation(1, "outbox_events", outboxCols...))
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgInsert(1, outboxRow("before", "1")...))
	mustDecode(t, d, msgMessage(true, ReplayPrefix, `{"aggregates":[{"type":"order","id":"42"}]}`))
	mustDecode(t, d, msgMessage(true, "someone.else", `{"aggregates":[{"type":"x","id":"y"}]}`))
	mustDecode(t, d, msgMessage(true, ReplayPrefix, `not json`))
	mustDecode(t, d, msgInsert(1, outboxRow("after", "1")...))
	tx := mustDecode(t, d, msgCommit(10, 20))
	// The request travels beside the rows, at its place between them; the rows are only rows.
	if len(tx.Controls) != 1 || tx.Controls[0].At != 1 || tx.Controls[0].Replay == nil ||
		!reflect.DeepEqual(tx.Controls[0].Replay.Aggregates, []Aggregate{{"order", "42"}}) {
		t.Fatalf("controls = %+v", tx.Controls)
	}
	if len(tx.Events) != 2 || tx.Events[0].ID != "before" || tx.Events[1].ID != "after" ||
		tx.Events[1].Sequence != envelope.Sequence(10, 1) {
		t.Fatalf("events = %+v", tx.Events)
	}
	// A non-transactional message arrives outside any transaction and is ignored.
	if tx, err := d.Decode(msgMessage(false, ReplayPrefix, `{"aggregates":[{"type":"order","id":"1"}]}`)); tx != nil || err != nil {
		t.Fatalf("non-transactional message: %v %v", tx, err)
	}
}

// A replay --since request names its outbox_replays row and pipeline; a message naming neither
// aggregates nor a request is ignored.
func TestDecodeReplaySinceRequest(t *testing.T) {
	d := NewDecoder("public")
	mustDecode(t, d, msgRelation(1, "outbox_events", outboxCols...))
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgMessage(true, ReplayPrefix, `{"aggregates":[],"since_request":7,"pipeline":"billing"}`))
	mustDecode(t, d, msgMessage(true, ReplayPrefix, `{"aggregates":[],"pipeline":"billing"}`))
	tx := mustDecode(t, d, msgCommit(10, 20))
	if len(tx.Events) != 0 || len(tx.Controls) != 1 {
		t.Fatalf("events = %+v, controls = %+v", tx.Events, tx.Controls)
	}
	if r := tx.Controls[0].Replay; r == nil || r.SinceRequest != 7 || r.Pipeline != "billing" || r.Aggregates != nil {
		t.Fatalf("replay request = %+v", r)
	}
}

func TestTrackerGrowHoldsTheTransaction(t *testing.T) {
	tr := NewTracker(100, 1<<20)
	req := newTx(100, 0)
	req.Controls = []Control{{Replay: &ReplayRequest{SinceRequest: 1}}}
	tr.Add(req)
	if tr.Confirmable() != 0 {
		t.Fatal("confirmed a replay request before it was carried out")
	}
	more := []*envelope.Message{{ID: "a"}, {ID: "b"}}
	tr.Grow(req, more)
	tr.AckControl(req)
	if tr.Confirmable() != 0 {
		t.Fatal("confirmed a replay before its events were delivered")
	}
	tr.Ack(req, more[0])
	tr.Ack(req, more[1])
	if tr.Confirmable() != 100 {
		t.Fatalf("confirmable %s", tr.Confirmable())
	}
}

// A table of the outbox's name in another schema, added to the publication, yields no events.
func TestDecodeIgnoresOutboxTableOfAnotherSchema(t *testing.T) {
	d := NewDecoder("public")
	mustDecode(t, d, msgRelationIn(1, "shadow", "outbox_events", outboxCols...))
	mustDecode(t, d, msgRelation(2, "outbox_events", outboxCols...))
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgInsert(1, outboxRow("shadow1", "1")...))
	mustDecode(t, d, msgInsert(2, outboxRow("public1", "1")...))
	tx := mustDecode(t, d, msgCommit(10, 20))
	if len(tx.Events) != 1 || tx.Events[0].ID != "public1" {
		t.Fatalf("events = %+v, want only public1", tx.Events)
	}
}

// The decoder takes the outbox_events of the schema it is made for and no other: with the
// relay's tables in app, public.outbox_events is someone else's.
func TestDecodeTakesOnlyItsSchemasOutboxTable(t *testing.T) {
	d := NewDecoder("app")
	mustDecode(t, d, msgRelationIn(1, "app", "outbox_events", outboxCols...))
	mustDecode(t, d, msgRelation(2, "outbox_events", outboxCols...)) // public
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgInsert(2, outboxRow("public1", "1")...))
	mustDecode(t, d, msgInsert(1, outboxRow("app1", "1")...))
	tx := mustDecode(t, d, msgCommit(10, 20))
	if len(tx.Events) != 1 || tx.Events[0].ID != "app1" {
		t.Fatalf("events = %+v, want only app1", tx.Events)
	}
}

// emitted captures the statement ReplayRequest.Emit runs.
type emitted struct{ prefix, content string }

func (e *emitted) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if !strings.Contains(sql, "pg_logical_emit_message(true,") || len(args) != 2 {
		return pgconn.CommandTag{}, fmt.Errorf("unexpected statement %s %v", sql, args)
	}
	e.prefix, e.content = args[0].(string), args[1].(string)
	return pgconn.CommandTag{}, nil
}

// The encoder and the decoder of the replay message agree: what Emit writes decodes to the
// same request, for aggregates and for a --since request.
func TestEmittedReplayRequestDecodes(t *testing.T) {
	for _, want := range []ReplayRequest{
		{Aggregates: []Aggregate{{"order", "42"}, {"order", "7"}}, Pipeline: "billing"},
		{Aggregates: []Aggregate{{"order", "1"}}},
		{SinceRequest: 9, Pipeline: "orders"},
	} {
		var e emitted
		if err := want.Emit(context.Background(), &e); err != nil {
			t.Fatal(err)
		}
		d := NewDecoder("public")
		mustDecode(t, d, msgBegin(10, 1))
		mustDecode(t, d, msgMessage(true, e.prefix, e.content))
		tx := mustDecode(t, d, msgCommit(10, 20))
		if len(tx.Controls) != 1 || !reflect.DeepEqual(*tx.Controls[0].Replay, want) {
			t.Fatalf("emitted %q %s decodes to %+v, want %+v", e.prefix, e.content, tx.Controls, want)
		}
	}
}

// validEndpointChange reports whether e has what its operation needs.
func validEndpointChange(e *EndpointChange) bool {
	switch e.Op {
	case EndpointUpsert:
		return e.ID != "" && json.Valid(e.Row) && e.Row[0] == '{'
	case EndpointDelete:
		return e.ID != "" && e.Row == nil
	case EndpointTruncate:
		return e.ID == "" && e.Row == nil
	}
	return false
}

// The trigger's messages of the decoder's schema become endpoint changes at their place among
// the transaction's events; another schema's, a non-transactional one, and malformed ones (bad
// JSON, an unknown op, an upsert without a row, a delete without an id) are ignored without
// stopping the stream.
func TestDecodeEndpointChanges(t *testing.T) {
	d := NewDecoder("app")
	mustDecode(t, d, msgRelationIn(1, "app", "outbox_events", outboxCols...))
	mustDecode(t, d, msgBegin(10, 1))
	upsert := msgMessage(true, EndpointPrefix,
		`{"op": "upsert", "schema": "app", "id": "ep_1", "row": {"id": "ep_1", "url": "https://a.example/hook"}}`)
	for i, m := range [][]byte{
		upsert,
		msgInsert(1, outboxRow("e1", "1")...),
		msgMessage(true, EndpointPrefix, `{"op": "upsert", "schema": "public", "id": "ep_9", "row": {"id": "ep_9"}}`),
		msgMessage(true, EndpointPrefix, `{"op": "delete", "schema": "app", "id": "ep_2"}`),
		msgMessage(true, EndpointPrefix, `{"op": "upsert", "schema": "app", "id": "ep_3"}`),
		msgMessage(true, EndpointPrefix, `{"op": "upsert", "schema": "app", "id": "ep_3", "row": null}`),
		msgMessage(true, EndpointPrefix, `{"op": "upsert", "schema": "app", "id": "ep_3", "row": "x"}`),
		msgMessage(true, EndpointPrefix, `{"op": "delete", "schema": "app"}`),
		msgMessage(true, EndpointPrefix, `{"op": "rename", "schema": "app", "id": "ep_2"}`),
		msgMessage(true, EndpointPrefix, `{"op": "truncate", "schema": "app"`),
		msgMessage(true, "outbox-relay.endpoints", `{"op": "truncate", "schema": "app"}`),
		msgInsert(1, outboxRow("e2", "1")...),
		msgInsert(1, outboxRow("e3", "1")...),
		msgMessage(true, EndpointPrefix, `{"op": "truncate", "schema": "app"}`),
	} {
		if tx, err := d.Decode(m); tx != nil || err != nil {
			t.Fatalf("message %d: tx %v, err %v", i, tx, err)
		}
	}
	// The row is a copy: the read buffer is reused for the next message.
	for i := range upsert {
		upsert[i] = 'X'
	}
	tx := mustDecode(t, d, msgCommit(10, 20))
	want := []Control{
		{At: 0, Endpoint: &EndpointChange{Op: EndpointUpsert, ID: "ep_1",
			Row: json.RawMessage(`{"id": "ep_1", "url": "https://a.example/hook"}`)}},
		{At: 1, Endpoint: &EndpointChange{Op: EndpointDelete, ID: "ep_2"}},
		{At: 3, Endpoint: &EndpointChange{Op: EndpointTruncate}},
	}
	if !reflect.DeepEqual(tx.Controls, want) {
		t.Fatalf("controls:\n got %s\nwant %s", controlsString(tx.Controls), controlsString(want))
	}
	if len(tx.Events) != 3 || tx.Events[0].ID != "e1" || tx.Events[2].ID != "e3" {
		t.Fatalf("events = %+v", tx.Events)
	}
	// Outside a transaction (a non-transactional message) nothing is kept.
	if tx, err := d.Decode(msgMessage(false, EndpointPrefix, `{"op": "truncate", "schema": "app"}`)); tx != nil || err != nil {
		t.Fatalf("non-transactional message: %v %v", tx, err)
	}
}

func controlsString(cs []Control) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "{At %d", c.At)
		if e := c.Endpoint; e != nil {
			fmt.Fprintf(&b, " %s %q %s", e.Op, e.ID, e.Row)
		}
		if c.Replay != nil {
			fmt.Fprintf(&b, " replay %+v", *c.Replay)
		}
		b.WriteString("} ")
	}
	return b.String()
}

// An endpoint message whose content length runs past the message is malformed pgoutput, as for
// a replay message.
func TestDecodeEndpointMessageCutShort(t *testing.T) {
	d := NewDecoder("public")
	mustDecode(t, d, msgBegin(10, 1))
	m := msgMessage(true, EndpointPrefix, `{"op": "truncate", "schema": "public"}`)
	if _, err := d.Decode(m[:len(m)-3]); !errors.Is(err, ErrMalformed) {
		t.Fatalf("err = %v, want ErrMalformed", err)
	}
}

// tenant_id (migration 13) becomes the message's TenantID, "" for NULL; a relation without the
// column (a publication's column list, a table before 13) leaves it "".
func TestDecodeTenantID(t *testing.T) {
	d := NewDecoder("public")
	mustDecode(t, d, msgRelation(1, "outbox_events", append(slices.Clone(outboxCols), "headers", "tenant_id")...))
	mustDecode(t, d, msgRelation(2, "outbox_events", outboxCols...))
	mustDecode(t, d, msgBegin(10, 1))
	mustDecode(t, d, msgInsert(1, append(outboxRow("t1", "1"), nil, s("acme"))...))
	mustDecode(t, d, msgInsert(1, append(outboxRow("t2", "1"), nil, nil)...))
	mustDecode(t, d, msgInsert(2, outboxRow("t3", "1")...))
	tx := mustDecode(t, d, msgCommit(10, 20))
	var got []string
	for _, m := range tx.Events {
		got = append(got, m.ID+"="+m.TenantID)
	}
	if want := []string{"t1=acme", "t2=", "t3="}; !slices.Equal(got, want) {
		t.Fatalf("tenants %v, want %v", got, want)
	}
}
