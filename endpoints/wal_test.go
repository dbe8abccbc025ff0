package endpoints_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
)

// change is one decoded pgoutput change of outbox_endpoints.
type change struct {
	kind     byte // 'I', 'U', 'D'
	old, new *pglogrepl.TupleData
	oldType  uint8
}

func endpointChanges(t *testing.T, conn *pgx.Conn) (cols []string, out []change) {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT data FROM pg_logical_slot_get_binary_changes('endpoints_slot', NULL, NULL,
		'proto_version', '1', 'publication_names', 'endpoints_pub')`)
	if err != nil {
		t.Fatal(err)
	}
	var data []byte
	_, err = pgx.ForEachRow(rows, []any{&data}, func() error {
		m, err := pglogrepl.Parse(data)
		if err != nil {
			return err
		}
		switch m := m.(type) {
		case *pglogrepl.RelationMessage:
			cols = nil
			for _, c := range m.Columns {
				cols = append(cols, c.Name)
			}
		case *pglogrepl.InsertMessage:
			out = append(out, change{kind: 'I', new: m.Tuple})
		case *pglogrepl.UpdateMessage:
			out = append(out, change{kind: 'U', old: m.OldTuple, new: m.NewTuple, oldType: m.OldTupleType})
		case *pglogrepl.DeleteMessage:
			out = append(out, change{kind: 'D', old: m.OldTuple, oldType: m.OldTupleType})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return cols, out
}

// decodeNew is what the data plane does with a change: the new tuple's columns, an unchanged
// TOASTed one ('u') taken from the old tuple, which REPLICA IDENTITY FULL always carries.
func decodeNew(t *testing.T, cols []string, c change) endpoint.Row {
	t.Helper()
	var r endpoint.Row
	tuple := c.new
	if tuple == nil {
		tuple = c.old
	}
	for i, col := range tuple.Columns {
		src := col
		if col.DataType == 'u' {
			if c.old == nil || c.old.Columns[i].DataType != 't' {
				t.Fatalf("column %s is unchanged-TOAST and the old tuple does not carry it", cols[i])
			}
			src = c.old.Columns[i]
		}
		if err := r.SetColumn(cols[i], src.Data, src.DataType == 'n'); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// sameRow compares rows as values: times as instants, JSON by content.
func sameRow(t *testing.T, what string, got, want endpoint.Row) {
	t.Helper()
	norm := func(r endpoint.Row) string {
		for _, p := range []*time.Time{&r.PausedAt, &r.DisabledAt, &r.CreatedAt, &r.UpdatedAt} {
			*p = p.UTC()
		}
		for i := range r.Secrets {
			if r.Secrets[i].CreatedAt != nil {
				u := r.Secrets[i].CreatedAt.UTC()
				r.Secrets[i].CreatedAt = &u
			}
		}
		var m bytes.Buffer
		if err := json.Compact(&m, r.Metadata); err != nil {
			t.Fatal(err)
		}
		var v any
		_ = json.Unmarshal(m.Bytes(), &v)
		r.Metadata, _ = json.Marshal(v)
		b, _ := json.Marshal(r)
		return string(b)
	}
	if g, w := norm(got), norm(want); g != w {
		t.Fatalf("%s: the row decoded from the slot differs from the table's:\n%s\n%s", what, g, w)
	}
}

// outbox_endpoints has REPLICA IDENTITY FULL: an UPDATE streams the whole old row, so a column
// the new tuple marks unchanged-TOAST (a large metadata left alone by plain SQL) is filled from
// it, and a DELETE streams the whole removed row. Rows decoded from the slot with SetColumn equal
// the table's.
func TestEndpointChangesStreamWholeRows(t *testing.T) {
	_, conn := migratedDB(t)
	ctx := context.Background()
	var identity string
	if err := conn.QueryRow(ctx, `SELECT relreplident::text FROM pg_class WHERE oid = 'outbox_endpoints'::regclass`).Scan(&identity); err != nil || identity != "f" {
		t.Fatalf("replica identity %q (%v), want f (FULL)", identity, err)
	}
	for _, stmt := range []string{
		`CREATE PUBLICATION endpoints_pub FOR TABLE outbox_endpoints`,
		`SELECT pg_create_logical_replication_slot('endpoints_slot', 'pgoutput')`,
	} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	blob := make([]byte, 9000) // random, so it does not compress below the TOAST threshold
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	meta, _ := json.Marshal(map[string]string{"blob": base64.StdEncoding.EncodeToString(blob)})
	ep := partner("acme")
	ep.Metadata, ep.AggregateTypes, ep.RateLimit = meta, []string{"order"}, 50
	if _, err := plain.Add(ctx, conn, ep); err != nil {
		t.Fatal(err)
	}
	added := storedRow(t, conn, "acme")
	if _, err := conn.Exec(ctx, `UPDATE outbox_endpoints SET state = 'paused', paused_at = now(), paused_reason = 'by SQL',
		updated_at = now() WHERE id = 'acme'`); err != nil {
		t.Fatal(err)
	}
	paused := storedRow(t, conn, "acme")
	if _, err := plain.Resume(ctx, conn, "acme"); err != nil {
		t.Fatal(err)
	}
	resumed := storedRow(t, conn, "acme")
	if err := plain.Remove(ctx, conn, "acme"); err != nil {
		t.Fatal(err)
	}
	cols, changes := endpointChanges(t, conn)
	if len(changes) != 4 || changes[0].kind != 'I' || changes[1].kind != 'U' || changes[2].kind != 'U' || changes[3].kind != 'D' {
		t.Fatalf("changes %v, want insert, update, update, delete", changes)
	}
	metaCol := -1
	for i, c := range cols {
		if c == "metadata" {
			metaCol = i
		}
	}
	if got := changes[1].new.Columns[metaCol].DataType; got != 'u' {
		t.Fatalf("control: the plain-SQL update sent metadata as %q, not unchanged-TOAST ('u'): the test does not cover it", got)
	}
	for i, c := range changes[1:] {
		if c.oldType != 'O' {
			t.Fatalf("change %d carries old tuple type %q, want O (the whole old row)", i+2, c.oldType)
		}
	}
	sameRow(t, "insert", decodeNew(t, cols, changes[0]), added)
	sameRow(t, "update by SQL", decodeNew(t, cols, changes[1]), paused)
	sameRow(t, "resume", decodeNew(t, cols, changes[2]), resumed)
	sameRow(t, "delete", decodeNew(t, cols, changes[3]), resumed)
	if r := decodeNew(t, cols, changes[3]); r.Validate(nil) != nil {
		t.Fatalf("the deleted row decoded from the slot is not valid: %v", r.Validate(nil))
	}
}
