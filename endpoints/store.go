package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The statements name the table {outbox_endpoints}, which schema.SQL qualifies with Store.Schema. Each
// returns the whole row as JSON (to_jsonb), which decodes into endpoint.Row by column name, so
// one decoder serves every statement and columns added later are ignored.
const (
	endpointColumns = `url, secrets, scheme, format, batch_max_events, batch_max_bytes, batch_linger_ms, tenant_id,
    event_types, aggregate_types, rate_limit, max_in_flight, state, paused_reason, paused_at, disabled_reason,
    disabled_at, allow_private_url, metadata, spill_after_ms, deny_private, egress_proxy, description`
	// endpointValues are the values of endpointColumns from $2 on ($1 is the id); a state's time
	// is kept when given ($15, $17) and is now() when the endpoint enters that state.
	endpointValues = `$2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10::text[], $11::text[], $12, $13, $14,
    CASE WHEN $14 = 'paused' THEN $15 END, CASE WHEN $14 = 'paused' THEN coalesce($16::timestamptz, now()) END,
    CASE WHEN $14 = 'disabled' THEN $17 END, CASE WHEN $14 = 'disabled' THEN coalesce($18::timestamptz, now()) END,
    $19, $20::jsonb, $21, $22, $23, $24`

	insertEndpointSQL = `
INSERT INTO {outbox_endpoints} AS e (id, ` + endpointColumns + `)
VALUES ($1, ` + endpointValues + `)
ON CONFLICT (id) DO NOTHING
RETURNING to_jsonb(e)`

	// updateEndpointSQL writes the row read with xmin $25, and nothing when another
	// transaction changed it since (the caller then reads it again).
	updateEndpointSQL = `
UPDATE {outbox_endpoints} AS e SET (` + endpointColumns + `, updated_at) = (` + endpointValues + `, now())
WHERE id = $1 AND xmin::text = $25
RETURNING to_jsonb(e)`

	getEndpointSQL       = `SELECT to_jsonb(e), e.xmin::text FROM {outbox_endpoints} e WHERE id = $1`
	getEndpointLockedSQL = getEndpointSQL + ` FOR UPDATE`
	deleteEndpointSQL    = `DELETE FROM {outbox_endpoints} WHERE id = $1 RETURNING id`

	// listEndpointsSQL returns a page as one JSON array, so that it needs only QueryRow (the
	// Querier of Enqueue). The primary key, or (tenant_id, id), serves it. json_agg, not
	// jsonb_agg of to_jsonb: the same document, built in a quarter of the time.
	listEndpointsSQL = `
SELECT coalesce(json_agg(e ORDER BY e.id), '[]'::json)::text FROM (
    SELECT * FROM {outbox_endpoints}
    WHERE id > $1 AND ($2::text IS NULL OR tenant_id = $2) AND ($3::text IS NULL OR state = $3)
    ORDER BY id LIMIT $4) e`
)

// Add stores a new endpoint in q's transaction and returns it, with Secret set to its secret in
// clear (the one given, or the one generated) for the caller to hand to the partner once. Bad
// input is refused with ErrInvalid and the reason, a taken id with ErrExists;
// either way nothing is written and the transaction stays usable.
func (e Store) Add(ctx context.Context, q Querier, ep Endpoint) (Endpoint, error) {
	r, clear, err := e.newRow(ep, time.Now())
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoints: add endpoint: %w", err)
	}
	warnings, err := e.checkCatalog(ctx, q, nil, r.EventTypes)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoints: add endpoint %s: %w", r.ID, err)
	}
	out, err := scanRow(q.QueryRow(ctx, schema.SQL(e.Schema, insertEndpointSQL), rowArgs(r)...))
	if isNoRows(err) {
		return Endpoint{}, fmt.Errorf("endpoints: add endpoint %s: %w: choose another id, or change it with Update", r.ID, ErrExists)
	}
	if err != nil {
		return Endpoint{}, e.dbError("add endpoint "+r.ID, err)
	}
	res := public(out)
	res.Secret, res.Warnings = clear, warnings
	return res, nil
}

// Validate checks ep as Add would, without the database (to answer a form before a
// transaction begins); it does not know whether the id is taken.
func (e Store) Validate(ep Endpoint) error {
	if _, _, err := e.newRow(ep, time.Now()); err != nil {
		return fmt.Errorf("endpoints: %w", err)
	}
	return nil
}

// Get returns the endpoint with this id, or ErrNotFound.
func (e Store) Get(ctx context.Context, q Querier, id string) (Endpoint, error) {
	r, _, err := e.read(ctx, q, id, false)
	if err != nil {
		return Endpoint{}, err
	}
	return public(r), nil
}

// List returns a page of endpoints sorted by id: pass the last id as f.After for the next page,
// until a page is shorter than its limit.
func (e Store) List(ctx context.Context, q Querier, f Filter) ([]Endpoint, error) {
	limit := f.Limit
	switch {
	case limit == 0:
		limit = 100
	case limit < 0 || limit > 1000:
		return nil, fmt.Errorf("endpoints: list endpoints: %w: limit %d: use 1 to 1000", ErrInvalid, limit)
	}
	var tenant, state *string
	if f.TenantID != "" {
		tenant = &f.TenantID
	}
	if f.State != "" {
		s := string(f.State)
		state = &s
	}
	var text string
	if err := q.QueryRow(ctx, schema.SQL(e.Schema, listEndpointsSQL), f.After, tenant, state, limit).Scan(&text); err != nil {
		return nil, e.dbError("list endpoints", err)
	}
	var rows []endpoint.Row
	if err := json.Unmarshal([]byte(text), &rows); err != nil {
		return nil, fmt.Errorf("endpoints: list endpoints: decode: %w", err)
	}
	out := make([]Endpoint, len(rows))
	for i, r := range rows {
		out[i] = public(r)
	}
	return out, nil
}

// Count returns how many endpoints the table holds, in every state (what a relay sizes its
// memory for: a lane and a client each).
func (e Store) Count(ctx context.Context, q Querier) (int, error) {
	var n int
	if err := q.QueryRow(ctx, schema.SQL(e.Schema, "SELECT count(*) FROM {outbox_endpoints}")).Scan(&n); err != nil {
		return 0, e.dbError("count endpoints", err)
	}
	return n, nil
}

// Remove deletes the endpoint: events committed after the removal are not routed to it.
func (e Store) Remove(ctx context.Context, q Querier, id string) error {
	var got string
	err := q.QueryRow(ctx, schema.SQL(e.Schema, deleteEndpointSQL), id).Scan(&got)
	if isNoRows(err) {
		return notFound("remove", id)
	}
	if err != nil {
		return e.dbError("remove endpoint "+id, err)
	}
	return nil
}

func notFound(what, id string) error {
	return fmt.Errorf("endpoints: %s endpoint %s: %w (`outbox-relay endpoint list` lists the ids)", what, id, ErrNotFound)
}

// read returns the row with this id and its xmin, locked FOR UPDATE when lock is set.
func (e Store) read(ctx context.Context, q Querier, id string, lock bool) (endpoint.Row, string, error) {
	query := getEndpointSQL
	if lock {
		query = getEndpointLockedSQL
	}
	var (
		doc  []byte
		xmin string
	)
	err := q.QueryRow(ctx, schema.SQL(e.Schema, query), id).Scan(&doc, &xmin)
	if isNoRows(err) {
		return endpoint.Row{}, "", notFound("read", id)
	}
	if err != nil {
		return endpoint.Row{}, "", e.dbError("read endpoint "+id, err)
	}
	var r endpoint.Row
	if err := json.Unmarshal(doc, &r); err != nil {
		return endpoint.Row{}, "", fmt.Errorf("endpoints: read endpoint %s: decode: %w", id, err)
	}
	return r, xmin, nil
}

// errChanged means another transaction changed the row between its read and its write.
var errChanged = errors.New("changed concurrently: try again")

// maxModifyAttempts bounds the reads of a row that keeps changing under a change made through
// a querier that cannot begin a transaction (a *sql.Tx is one already; *sql.DB is not).
const maxModifyAttempts = 10

// beginner is a querier that can begin a transaction: *pgx.Conn and *pgxpool.Pool begin one,
// a pgx.Tx a savepoint.
type beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// modify reads the row FOR UPDATE, lets change alter it, checks the result and writes it only
// when it changed. With a querier that can begin, it does so in a transaction (a savepoint
// inside the caller's), so the row stays locked from the read to the write and a failure leaves
// the caller's transaction usable. Otherwise the write checks that the row is the one read and
// starts over when another writer got in between. change reports whether it changed anything;
// it may run more than once.
func (e Store) modify(ctx context.Context, q Querier, what, id string, change func(r *endpoint.Row, now time.Time) (bool, error)) (endpoint.Row, error) {
	b, ok := q.(beginner)
	if !ok {
		return e.modifyIn(ctx, q, what, id, change)
	}
	var out endpoint.Row
	err := pgx.BeginFunc(ctx, b, func(tx pgx.Tx) error {
		var err error
		out, err = e.modifyIn(ctx, tx, what, id, change)
		return err
	})
	return out, err
}

func (e Store) modifyIn(ctx context.Context, q Querier, what, id string, change func(r *endpoint.Row, now time.Time) (bool, error)) (endpoint.Row, error) {
	for attempt := 1; ; attempt++ {
		r, xmin, err := e.read(ctx, q, id, true)
		if err != nil {
			return r, err
		}
		patterns := r.EventTypes
		now := time.Now()
		changed, err := change(&r, now)
		if err != nil {
			return r, fmt.Errorf("endpoints: %s endpoint %s: %w", what, id, err)
		}
		if !changed {
			return r, nil
		}
		dropExpired(&r, now)
		if err := e.validate(&r); err != nil {
			return r, fmt.Errorf("endpoints: %s endpoint %s: %w", what, id, err)
		}
		if _, err := e.checkCatalog(ctx, q, patterns, r.EventTypes); err != nil {
			return r, fmt.Errorf("endpoints: %s endpoint %s: %w", what, id, err)
		}
		out, err := scanRow(q.QueryRow(ctx, schema.SQL(e.Schema, updateEndpointSQL), append(rowArgs(r), xmin)...))
		if isNoRows(err) && attempt < maxModifyAttempts {
			continue
		}
		if isNoRows(err) {
			err = errChanged
		}
		if err != nil {
			return r, e.dbError(what+" endpoint "+id, err)
		}
		return out, nil
	}
}

// dropExpired removes the secrets that no longer sign.
func dropExpired(r *endpoint.Row, now time.Time) {
	kept := r.Secrets[:0]
	for _, s := range r.Secrets {
		if s.Active(now) {
			kept = append(kept, s)
		}
	}
	r.Secrets = kept
}

func scanRow(row interface{ Scan(...any) error }) (endpoint.Row, error) {
	var doc []byte
	if err := row.Scan(&doc); err != nil {
		return endpoint.Row{}, err
	}
	var r endpoint.Row
	if err := json.Unmarshal(doc, &r); err != nil {
		return endpoint.Row{}, fmt.Errorf("decode the row: %w", err)
	}
	return r, nil
}

// rowArgs are the arguments $1..$24 of the insert and the update (whose $25 is the xmin read).
func rowArgs(r endpoint.Row) []any {
	return []any{
		r.ID, r.URL, secretsJSON(r.Secrets), r.Scheme, r.Format, r.BatchMaxEvents, r.BatchMaxBytes, r.BatchLingerMS,
		nullString(r.TenantID), r.EventTypes, nullSlice(r.AggregateTypes), nullInt(r.RateLimit), nullInt(r.MaxInFlight),
		r.State, reason(r.PausedReason, "paused"), nullTime(r.PausedAt), reason(r.DisabledReason, "disabled"),
		nullTime(r.DisabledAt), r.AllowPrivateURL, string(r.Metadata), nullInt(r.SpillAfterMS),
		r.DenyPrivate, nullString(r.EgressProxy), nullString(r.Description),
	}
}

// reason is a state's reason; the table wants one with every paused_at and disabled_at.
func reason(r, fallback string) string {
	if r == "" {
		return fallback
	}
	return r
}

func nullString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullSlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

func nullInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// dbError names the fix for the errors a user can fix: a missing table, a CHECK the row fails
// (which Validate should have caught first: the table is older or newer than this code).
func (e Store) dbError(what string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case pgerrcode.UndefinedTable:
			if e.Schema != "" {
				return fmt.Errorf("endpoints: %s: table outbox_endpoints does not exist in schema %s: run `outbox-relay migrate` "+
					"for that schema (it needs migration 13), or name the schema the relay's tables are in: %w",
					what, schema.Quote(e.Schema), err)
			}
			return fmt.Errorf("endpoints: %s: table outbox_endpoints is not on the connection's search_path: run "+
				"`outbox-relay migrate` (it needs migration 13), or name the schema the relay's tables are in "+
				"(--schema, Store.Schema): %w", what, err)
		case pgerrcode.CheckViolation:
			return fmt.Errorf("endpoints: %s: %w: the table refuses it (constraint %s; docs/guides/endpoints.md)",
				what, ErrInvalid, pgErr.ConstraintName)
		}
	}
	return fmt.Errorf("endpoints: %s: %w", what, err)
}
