package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// The management API's audit records (outbox_api_audit): every change made through package api,
// written in the transaction of the change, and listed newest first by id.

// AuditRecord is one change made through the API.
type AuditRecord struct {
	ID         int64
	At         time.Time
	ActorKind  string // operator or tenant
	Actor      string // the operator token's name, or the tenant's id
	Action     string // endpoint.create, endpoint.update, ...
	TenantID   string // the endpoint's tenant; "" for none
	EndpointID string // "" for none
	// Detail is a JSON object: what changed (field names), a request's id; never a secret.
	Detail json.RawMessage
}

// InsertAudit records r (its ID and At are the database's) in schema s.
func InsertAudit(ctx context.Context, db DB, s string, r AuditRecord) error {
	detail := r.Detail
	if len(detail) == 0 {
		detail = json.RawMessage(`{}`)
	}
	_, err := db.Exec(ctx, schema.SQL(s, `INSERT INTO {outbox_api_audit} (actor_kind, actor, action, tenant_id, endpoint_id, detail)
		VALUES ($1, $2, $3, nullif($4, ''), nullif($5, ''), $6::jsonb)`),
		r.ActorKind, r.Actor, r.Action, r.TenantID, r.EndpointID, string(detail))
	if err != nil {
		return fmt.Errorf("record the audit entry of %s: %w", r.Action, err)
	}
	return nil
}

// AuditQuery selects audit records: of one tenant and one endpoint when those are set, with an
// id below Before (0: from the newest), at most Limit, newest first.
type AuditQuery struct {
	TenantID, EndpointID string
	Before               int64
	Limit                int
}

// auditSQL has one shape per filter, so that each reads its index (tenant_id, id) or
// (endpoint_id, id) backwards from $1, or the primary key: an OR of optional filters would be
// planned for the general case. $2 is the limit, $3 and $4 the filters a shape has.
const auditColumns = `id, at, actor_kind, actor, action, coalesce(tenant_id, ''), coalesce(endpoint_id, ''), detail::text`

var auditSQL = map[[2]bool]string{
	{false, false}: `SELECT ` + auditColumns + ` FROM {outbox_api_audit} WHERE id < $1 ORDER BY id DESC LIMIT $2`,
	{true, false}:  `SELECT ` + auditColumns + ` FROM {outbox_api_audit} WHERE tenant_id = $3 AND id < $1 ORDER BY id DESC LIMIT $2`,
	{false, true}:  `SELECT ` + auditColumns + ` FROM {outbox_api_audit} WHERE endpoint_id = $3 AND id < $1 ORDER BY id DESC LIMIT $2`,
	{true, true}: `SELECT ` + auditColumns + ` FROM {outbox_api_audit} WHERE tenant_id = $3 AND endpoint_id = $4 AND id < $1
		ORDER BY id DESC LIMIT $2`,
}

// ListAudit returns the records q selects in schema s.
func ListAudit(ctx context.Context, db DB, s string, q AuditQuery) ([]AuditRecord, error) {
	before := q.Before
	if before <= 0 {
		before = 1<<63 - 1
	}
	query := auditSQL[[2]bool{q.TenantID != "", q.EndpointID != ""}]
	args := []any{before, q.Limit}
	for _, f := range []string{q.TenantID, q.EndpointID} {
		if f != "" {
			args = append(args, f)
		}
	}
	rows, err := db.Query(ctx, schema.SQL(s, query), args...)
	if err != nil {
		return nil, fmt.Errorf("read the audit records: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (AuditRecord, error) {
		var a AuditRecord
		var detail string
		err := r.Scan(&a.ID, &a.At, &a.ActorKind, &a.Actor, &a.Action, &a.TenantID, &a.EndpointID, &detail)
		a.Detail = json.RawMessage(detail)
		return a, err
	})
}
