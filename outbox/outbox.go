// Package outbox is the producer side: it writes an event into outbox_events inside the
// caller's own transaction, so the event exists if and only if the business change commits.
//
// # Usage
//
// Call Enqueue with the transaction that writes the business rows (a pgx.Tx, anything with
// pgx's QueryRow method, or a *sql.Tx wrapped with SQL). The relay picks the row up from the
// replication stream after commit; nothing polls the table.
//
// # Deduplication
//
// An event may carry a dedup key. Enqueueing a key that already exists inserts nothing, returns
// the existing event's id with ErrDuplicate, and leaves the transaction usable (the insert uses
// ON CONFLICT DO NOTHING, so no error aborts it).
//
// # Endpoints
//
// A partner's webhook is a row of outbox_endpoints, which the application writes in the same
// transaction as the rest of its change, with package endpoints (endpoints.Store.Add and
// friends, taking the same querier as Enqueue). An Event's TenantID routes it to its tenant's
// endpoints. The endpoint names this package had (AddEndpoint, Endpoints, Sealer, ...) remain
// for one release as deprecated wrappers of package endpoints.
//
// # Validating payloads
//
// A producer opts in to checking each payload against the JSON Schema of its event type in the
// event-type catalog (outbox_event_types) with Producer{Validator: catalog.NewValidator(pool,
// catalog.ValidatorConfig{})}: its Enqueue refuses a payload the schema does not accept with
// ErrInvalid and the JSON pointer of the value at fault, writing nothing. Package catalog holds
// the JSON Schema library; a producer that does not opt in does not link it.
//
// # Schema
//
// Enqueue writes into outbox_events as the connection's search_path finds it. When the relay's
// tables live in a schema of their own (`outbox-relay migrate --schema app`, and the relay runs
// with --schema app), name it: Schema("app").Enqueue(ctx, tx, ev) writes into app.outbox_events
// whatever the search_path says. endpoints.Store{Schema: "app"} does the same for the endpoint
// functions, and PruneOptions.Schema for Prune.
package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/querier"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// ErrDuplicate is returned, with the existing event's id, when the dedup key already exists.
var ErrDuplicate = errors.New("outbox: duplicate dedup key")

// ErrInvalid is wrapped by every input error, detected before anything reaches the database.
var ErrInvalid = errors.New("outbox: invalid event")

// Event is one outbox row to write.
type Event struct {
	AggregateType string // required, e.g. "order"
	AggregateID   string // required, e.g. the order's id
	EventType     string // required, e.g. "order.created"
	// Payload is the webhook body: json.RawMessage or []byte holding JSON (sent as is), or any
	// value that encoding/json can marshal.
	Payload any
	// DedupKey, if not empty, makes the event unique: a second event with the same key is not
	// written.
	DedupKey string
	// TraceParent, if set, is a W3C traceparent (for example from the span of the business
	// transaction); the relay sends it as the webhook's traceparent header, linking the two.
	TraceParent string
	// Headers are extra request headers the relay forwards: tracestate and X-* names (the
	// contract's own headers cannot be overridden). They are not signed.
	Headers map[string]string
	// TenantID, if set, is the tenant the event belongs to: a pipeline with endpoints sends it
	// to the endpoints of this tenant and to those without one. Empty: no tenant (NULL); the
	// event goes only to endpoints without a tenant.
	TenantID string
}

// Querier is what Enqueue needs from a transaction. pgx.Tx, *pgx.Conn and *pgxpool.Pool satisfy
// it; wrap a *sql.Tx with SQL.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SQL adapts a database/sql transaction (or *sql.DB, *sql.Conn) to Querier.
func SQL(tx interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}) Querier {
	return querier.SQL{Tx: tx}
}

// insertSQL writes an event. The headers column (migration 3) and tenant_id (migration 13) are
// named only when the event has them, so producers on an older schema keep working.
func insertSQL(headers, tenant bool) string { return insertQueries[b2i(headers)][b2i(tenant)] }

var insertQueries = [2][2]string{{buildInsert(false, false), buildInsert(false, true)}, {buildInsert(true, false), buildInsert(true, true)}}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func buildInsert(headers, tenant bool) string {
	cols, vals := "id, aggregate_type, aggregate_id, event_type, payload, dedup_key", "$1, $2, $3, $4, $5::jsonb, $6"
	n := 6
	if headers {
		n++
		cols, vals = cols+", headers", vals+fmt.Sprintf(", $%d::jsonb", n)
	}
	if tenant {
		n++
		cols, vals = cols+", tenant_id", vals+fmt.Sprintf(", $%d", n)
	}
	return `
INSERT INTO {outbox_events} (` + cols + `)
VALUES (` + vals + `)
ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL DO NOTHING
RETURNING id::text`
}

const existingSQL = `SELECT id::text FROM {outbox_events} WHERE dedup_key = $1`

// Schema names the PostgreSQL schema of the relay's tables: Schema.Enqueue writes into its
// outbox_events, and endpoints.Store.Schema is the same name for outbox_endpoints. The zero
// value leaves the tables' names unqualified, for the connection's search_path to resolve: what
// Enqueue does.
type Schema string

// Enqueue writes ev in the caller's transaction and returns its id. The id is a UUIDv7, so ids
// sort by creation time. For an existing dedup key it returns the existing id and ErrDuplicate.
// It writes into outbox_events as the search_path resolves it; Schema.Enqueue names the schema.
func Enqueue(ctx context.Context, q Querier, ev Event) (uuid.UUID, error) {
	return Schema("").Enqueue(ctx, q, ev)
}

// Enqueue is the package's Enqueue, writing into outbox_events of schema s.
func (s Schema) Enqueue(ctx context.Context, q Querier, ev Event) (uuid.UUID, error) {
	return Producer{Schema: s}.Enqueue(ctx, q, ev)
}

// Validator checks an event's payload before Enqueue writes it. catalog.Validator is one: it
// checks the payload against the JSON Schema of its type in the event-type catalog.
type Validator interface {
	// ValidatePayload returns nil to let the event be written, or why not.
	ValidatePayload(ctx context.Context, eventType string, payload []byte) error
}

// Producer is Enqueue with options, for a producer that sets them once. The zero value is the
// package's Enqueue.
type Producer struct {
	// Schema is the schema of the relay's tables, as Schema.Enqueue. Empty: as the search_path
	// resolves outbox_events.
	Schema Schema
	// Validator, if set, checks every payload before it is written (opt-in validation against
	// the event-type catalog: catalog.NewValidator); a refusal is wrapped with ErrInvalid and
	// nothing is written. Nil: payloads are checked only for being JSON.
	Validator Validator
}

// Enqueue writes ev in the caller's transaction, as the package's Enqueue, after
// p.Validator's check when there is one.
func (p Producer) Enqueue(ctx context.Context, q Querier, ev Event) (uuid.UUID, error) {
	s := p.Schema
	payload, err := ev.validate()
	if err != nil {
		return uuid.Nil, err
	}
	if p.Validator != nil {
		if err := p.Validator.ValidatePayload(ctx, ev.EventType, payload); err != nil {
			return uuid.Nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: new id: %w", err)
	}
	var dedup *string
	if ev.DedupKey != "" {
		dedup = &ev.DedupKey
	}
	args := []any{id.String(), ev.AggregateType, ev.AggregateID, ev.EventType, string(payload), dedup}
	headers := ev.headers()
	if headers != nil {
		args = append(args, string(headers))
	}
	if ev.TenantID != "" {
		args = append(args, ev.TenantID)
	}
	query := insertSQL(headers != nil, ev.TenantID != "")
	var got string
	err = q.QueryRow(ctx, schema.SQL(string(s), query), args...).Scan(&got)
	if isNoRows(err) {
		return existing(ctx, q, schema.SQL(string(s), existingSQL), ev.DedupKey)
	}
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: insert: %w", err)
	}
	return id, nil
}

// existing looks up the event that holds key with query (existingSQL in the schema). It can be
// invisible (a concurrent transaction under REPEATABLE READ), in which case the id is uuid.Nil.
func existing(ctx context.Context, q Querier, query, key string) (uuid.UUID, error) {
	var got string
	if err := q.QueryRow(ctx, query, key).Scan(&got); err != nil {
		if isNoRows(err) {
			return uuid.Nil, ErrDuplicate
		}
		return uuid.Nil, fmt.Errorf("outbox: look up duplicate: %w", err)
	}
	id, err := uuid.Parse(got)
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: look up duplicate: %w", err)
	}
	return id, ErrDuplicate
}

// headers is the headers column's JSON, or nil when there are none.
func (ev Event) headers() []byte {
	if ev.TraceParent == "" && len(ev.Headers) == 0 {
		return nil
	}
	h := make(map[string]string, len(ev.Headers)+1)
	for k, v := range ev.Headers {
		h[k] = v
	}
	if ev.TraceParent != "" {
		h["traceparent"] = ev.TraceParent
	}
	b, _ := json.Marshal(h) // a map of strings always marshals
	return b
}

func isNoRows(err error) bool { return querier.IsNoRows(err) }

func (ev Event) validate() ([]byte, error) {
	for _, f := range []struct{ name, v string }{
		{"aggregate type", ev.AggregateType},
		{"aggregate id", ev.AggregateID},
		{"event type", ev.EventType},
	} {
		if strings.TrimSpace(f.v) == "" {
			return nil, fmt.Errorf("%w: %s is empty", ErrInvalid, f.name)
		}
	}
	if err := endpoint.CheckTenant(ev.TenantID); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if ev.TraceParent != "" && !validTraceParent(ev.TraceParent) {
		return nil, fmt.Errorf("%w: trace parent %q is not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)", ErrInvalid, ev.TraceParent)
	}
	return payloadJSON(ev.Payload)
}

// validTraceParent checks the W3C trace context shape: version-traceid-parentid-flags.
func validTraceParent(s string) bool {
	parts := strings.Split(s, "-")
	if len(parts) < 4 || len(parts[0]) != 2 || len(parts[1]) != 32 || len(parts[2]) != 16 || len(parts[3]) != 2 {
		return false
	}
	for _, p := range parts[:4] {
		for _, c := range p {
			if !strings.ContainsRune("0123456789abcdef", c) {
				return false
			}
		}
	}
	return true
}

func payloadJSON(p any) ([]byte, error) {
	var b []byte
	switch v := p.(type) {
	case nil:
		return nil, fmt.Errorf("%w: payload is nil; pass JSON or a value to marshal", ErrInvalid)
	case json.RawMessage:
		b = v
	case []byte:
		b = v
	default:
		m, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%w: payload does not marshal to JSON: %v", ErrInvalid, err)
		}
		return m, nil
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("%w: payload is not valid JSON", ErrInvalid)
	}
	return b, nil
}
