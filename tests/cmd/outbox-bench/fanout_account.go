package main

import (
	"context"
	"fmt"

	"github.com/jackc/pglogrepl"
)

// failingAccount is where the events routed to the failing endpoints are once the relay has
// stopped: none was delivered, so each must be in the endpoint's backlog (spilled, written
// with its stream position), or committed after the slot's confirmed position (the slot sends
// it again when a relay next starts). One in neither is lost. It covers every event in the
// database, warm-up included.
type failingAccount struct {
	Routed      int // (failing endpoint, event) pairs, by tenant as the relay routes them
	InBacklog   int // of which in the endpoint's backlog (outbox_endpoint_backlog)
	Unconfirmed int // of which not in a backlog but after the slot's confirmed position
	Lost        []string
	Attempts    int64 // requests the receiver answered with 500
	Logged      int64 // rows of outbox_delivery_attempts for the failing endpoints
	// NoBacklog or NoLog: the table does not exist in this schema (counted as empty).
	NoBacklog, NoLog bool
}

func (a failingAccount) check() error {
	if len(a.Lost) == 0 {
		return nil
	}
	ex := a.Lost
	if len(ex) > 5 {
		ex = ex[:5]
	}
	return fmt.Errorf("%d of %d events routed to failing endpoints are neither in their backlogs nor after the slot's confirmed position (lost), e.g. %v",
		len(a.Lost), a.Routed, ex)
}

// accountFailing fills a failingAccount for the case's failing endpoints. The relay must have
// stopped: the slot is read with pg_logical_slot_peek_binary_changes, which an active slot
// refuses.
func (db *benchDB) accountFailing(ctx context.Context, c fanoutCase) (failingAccount, error) {
	var a failingAccount
	ids := c.failingIDs()
	if len(ids) == 0 {
		return a, nil
	}
	pairs, err := db.pairs(ctx, `SELECT e.id, ev.id::text FROM outbox_endpoints e
		JOIN outbox_events ev ON ev.tenant_id = e.tenant_id WHERE e.id = ANY($1)`, ids)
	if err != nil {
		return a, fmt.Errorf("events routed to the failing endpoints: %w", err)
	}
	a.Routed = len(pairs)
	var backlog map[[2]string]bool
	if a.NoBacklog, err = db.missing(ctx, "outbox_endpoint_backlog"); err == nil && !a.NoBacklog {
		backlog, err = db.pairSet(ctx, `SELECT endpoint_id, event_id::text FROM outbox_endpoint_backlog WHERE endpoint_id = ANY($1)`, ids)
	}
	if err != nil {
		return a, fmt.Errorf("the failing endpoints' backlogs: %w", err)
	}
	unconfirmed, err := db.unconfirmedEventIDs(ctx)
	if err != nil {
		return a, err
	}
	for _, p := range pairs {
		switch {
		case backlog[p]:
			a.InBacklog++
		case unconfirmed[p[1]]:
			a.Unconfirmed++
		default:
			a.Lost = append(a.Lost, p[0]+" "+p[1])
		}
	}
	if a.NoLog, err = db.missing(ctx, "outbox_delivery_attempts"); err == nil && !a.NoLog {
		err = db.conn.QueryRow(ctx, `SELECT count(*) FROM outbox_delivery_attempts WHERE endpoint_id = ANY($1)`, ids).Scan(&a.Logged)
	}
	if err != nil {
		return a, fmt.Errorf("the failing endpoints' delivery log: %w", err)
	}
	return a, nil
}

// missing reports whether the table does not exist.
func (db *benchDB) missing(ctx context.Context, table string) (bool, error) {
	var none bool
	err := db.conn.QueryRow(ctx, `SELECT to_regclass($1) IS NULL`, table).Scan(&none)
	return none, err
}

// pairs runs a query of two text columns.
func (db *benchDB) pairs(ctx context.Context, sql string, args ...any) ([][2]string, error) {
	rows, err := db.conn.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out [][2]string
	for rows.Next() {
		var p [2]string
		if err := rows.Scan(&p[0], &p[1]); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func (db *benchDB) pairSet(ctx context.Context, sql string, args ...any) (map[[2]string]bool, error) {
	ps, err := db.pairs(ctx, sql, args...)
	m := make(map[[2]string]bool, len(ps))
	for _, p := range ps {
		m[p] = true
	}
	return m, err
}

// peekSQL reads, without consuming, what the slot would send a relay that starts now: every
// transaction committed after its confirmed position, as pgoutput messages.
const peekSQL = `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
	'proto_version', '1', 'publication_names', $2)`

// unconfirmedEventIDs returns the ids of the outbox_events rows the relay's slot has not
// confirmed, decoded from the slot itself.
func (db *benchDB) unconfirmedEventIDs(ctx context.Context) (map[string]bool, error) {
	rows, err := db.conn.Query(ctx, peekSQL, relaySlot, benchPublication)
	if err != nil {
		return nil, fmt.Errorf("peek at slot %s: %w", relaySlot, err)
	}
	defer rows.Close()
	d := newIDDecoder()
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, err
		}
		if err := d.decode(data); err != nil {
			return nil, fmt.Errorf("peek at slot %s: %w", relaySlot, err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("peek at slot %s: %w", relaySlot, err)
	}
	return d.ids, nil
}

// idDecoder collects the id column of outbox_events inserts from pgoutput messages.
type idDecoder struct {
	idColumn map[uint32]int // relation → index of its id column (-1: not outbox_events)
	ids      map[string]bool
}

func newIDDecoder() *idDecoder {
	return &idDecoder{idColumn: map[uint32]int{}, ids: map[string]bool{}}
}

func (d *idDecoder) decode(data []byte) error {
	msg, err := pglogrepl.Parse(data)
	if err != nil {
		return err
	}
	switch m := msg.(type) {
	case *pglogrepl.RelationMessage:
		d.idColumn[m.RelationID] = -1
		if m.RelationName != "outbox_events" {
			return nil
		}
		for i, col := range m.Columns {
			if col.Name == "id" {
				d.idColumn[m.RelationID] = i
			}
		}
	case *pglogrepl.InsertMessage:
		i, ok := d.idColumn[m.RelationID]
		if !ok {
			return fmt.Errorf("insert into relation %d before its relation message", m.RelationID)
		}
		if i >= 0 && m.Tuple != nil && i < len(m.Tuple.Columns) {
			d.ids[string(m.Tuple.Columns[i].Data)] = true
		}
	}
	return nil
}
