package api

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/internal/state"
)

// AuditRecord is one change made through the API: who (an operator token's name, or a
// tenant), what, when, and to which endpoint.
type AuditRecord struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	ActorKind  string          `json:"actor_kind"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TenantID   *string         `json:"tenant_id"`
	EndpointID *string         `json:"endpoint_id"`
	Detail     json.RawMessage `json:"detail"`
}

type auditCursor struct {
	Before int64 `json:"before"`
}

// listAudit serves GET /api/v1/audit?endpoint_id=&limit=&cursor=: newest first. A tenant sees
// the records of its own endpoints.
func (a *API) listAudit(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	if err := unknownParams(r, "endpoint_id", "limit", "cursor"); err != nil {
		return err
	}
	q := state.AuditQuery{EndpointID: r.URL.Query().Get("endpoint_id")}
	if !p.operator {
		q.TenantID = p.tenant
	}
	var err error
	if q.Limit, err = queryLimit(r); err != nil {
		return err
	}
	var c auditCursor
	if _, err := decodeCursor(r, &c); err != nil {
		return err
	}
	q.Before = c.Before
	recs, err := state.ListAudit(r.Context(), a.cfg.Pool, a.cfg.Schema, q)
	if err != nil {
		return err
	}
	out := make([]AuditRecord, len(recs))
	for i, rec := range recs {
		out[i] = AuditRecord{ID: rec.ID, At: rec.At.UTC(), ActorKind: rec.ActorKind, Actor: rec.Actor, Action: rec.Action,
			TenantID: optional(rec.TenantID), EndpointID: optional(rec.EndpointID), Detail: rec.Detail}
	}
	next := ""
	if len(recs) == q.Limit {
		next = encodeCursor(auditCursor{Before: recs[len(recs)-1].ID})
	}
	writeJSON(w, http.StatusOK, page(out, next))
	return nil
}
