package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/endpoints"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/signature"
)

// tx runs f in a transaction on the pool: a request's writes commit together or not at all.
func (a *API) tx(ctx context.Context, f func(tx pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, a.cfg.Pool, f)
}

func notFound(id string) *Problem {
	return problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("no endpoint %q: GET /api/v1/endpoints lists them", id))
}

// storeError turns an error of package endpoints into the API's answer.
func storeError(err error, id string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, endpoints.ErrNotFound):
		return notFound(id)
	case errors.Is(err, endpoints.ErrExists):
		return problem(http.StatusConflict, typeExists,
			fmt.Sprintf("endpoint %q exists: choose another id, or change it with PATCH /api/v1/endpoints/%s", id, id))
	case errors.Is(err, endpoints.ErrState):
		return problem(http.StatusConflict, typeState, reason(err))
	case errors.Is(err, endpoints.ErrInvalid):
		return invalid(err)
	}
	return err
}

// invalid is the 422 of a refusal of package endpoints, with its field when it names one.
func invalid(err error) *Problem {
	field, detail := endpoint.FieldOf(err), reason(err)
	var fe *endpoint.FieldError
	if errors.As(err, &fe) {
		detail = strings.TrimPrefix(fe.Err.Error(), endpoint.ErrInvalid.Error()+": ")
	}
	if field == "" {
		return problem(http.StatusUnprocessableEntity, typeInvalid, reason(err))
	}
	return problem(http.StatusUnprocessableEntity, typeInvalid, reason(err), FieldIssue{Field: field, Detail: detail})
}

// owned returns endpoint id's tenant, locking its row (FOR UPDATE when lock), or a 404 when
// it does not exist or p may not see it: another tenant's endpoint is not found, never
// forbidden.
func (a *API) owned(ctx context.Context, q endpoints.Querier, p principal, id string, lock bool) (string, error) {
	query := `SELECT coalesce(tenant_id, '') FROM {outbox_endpoints} WHERE id = $1`
	if lock {
		query += ` FOR UPDATE`
	}
	var tenant string
	err := q.QueryRow(ctx, schema.SQL(a.cfg.Schema, query), id).Scan(&tenant)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !p.sees(tenant)) {
		return "", notFound(id)
	}
	return tenant, err
}

// audit records a change made by p, in the change's transaction.
func (a *API) audit(ctx context.Context, tx pgx.Tx, p principal, action, tenant, endpointID string, detail map[string]any) error {
	b, err := json.Marshal(detail)
	if err != nil {
		return err
	}
	return state.InsertAudit(ctx, tx, a.cfg.Schema, state.AuditRecord{ActorKind: p.kind(), Actor: p.actor(), Action: action,
		TenantID: tenant, EndpointID: endpointID, Detail: b})
}

func (a *API) listEndpoints(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	if err := unknownParams(r, "tenant_id", "state", "limit", "cursor"); err != nil {
		return err
	}
	q := r.URL.Query()
	f := endpoints.Filter{TenantID: q.Get("tenant_id"), State: endpoints.State(q.Get("state"))}
	var err error
	if f.Limit, err = queryLimit(r); err != nil {
		return err
	}
	switch f.State {
	case "", endpoints.Enabled, endpoints.Paused, endpoints.Disabled:
	default:
		return problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: "state", Detail: "use enabled, paused or disabled"})
	}
	if !p.operator {
		if f.TenantID != "" && f.TenantID != p.tenant {
			return problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
				FieldIssue{Field: "tenant_id", Detail: "a tenant lists its own endpoints: leave tenant_id out"})
		}
		f.TenantID = p.tenant
	}
	var c struct {
		After string `json:"after"`
	}
	if _, err := decodeCursor(r, &c); err != nil {
		return err
	}
	f.After = c.After
	list, err := a.store.List(r.Context(), a.cfg.Pool, f)
	if err != nil {
		return storeError(err, "")
	}
	out := make([]Endpoint, len(list))
	for i, e := range list {
		out[i] = wireEndpoint(e)
	}
	next := ""
	if len(list) == f.Limit {
		next = encodeCursor(struct {
			After string `json:"after"`
		}{list[len(list)-1].ID})
	}
	writeJSON(w, http.StatusOK, page(out, next))
	return nil
}

func (a *API) getEndpoint(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	e, err := a.store.Get(r.Context(), a.cfg.Pool, id)
	if err != nil {
		return storeError(err, id)
	}
	if !p.sees(e.TenantID) {
		return notFound(id)
	}
	writeJSON(w, http.StatusOK, wireEndpoint(e))
	return nil
}

// tenantRules refuses what a tenant may not set, and sets what a tenant's endpoint must have:
// its tenant, and deny_private (its URL is the tenant's, so private addresses are refused,
// whatever allow_private_url says).
func tenantRules(p principal, b body, e *endpoints.Endpoint) error {
	if p.operator {
		return nil
	}
	var is issues
	var tenant string
	if ok, err := b.field("tenant_id", &tenant, "a string"); err != nil {
		return err
	} else if (ok && tenant != p.tenant) || b.null("tenant_id") {
		is.add("tenant_id", "a tenant's endpoints are its own: leave tenant_id out")
	}
	if v := b["allow_private_url"]; b.has("allow_private_url") && string(v) != "false" {
		is.add("allow_private_url", "a tenant cannot lift the URL guard: private, loopback and metadata addresses are refused "+
			"for its endpoints; an operator can allow an address range (--egress-allow)")
	}
	if b.has("egress_proxy") {
		is.add("egress_proxy", "an endpoint's outbound proxy is the operator's to set")
	}
	if b.has("deny_private") {
		is.add("deny_private", "set by the API on every endpoint a tenant writes")
	}
	if err := is.err(http.StatusUnprocessableEntity, typeInvalid, "a tenant token cannot set these fields"); err != nil {
		return err
	}
	e.TenantID, e.DenyPrivate, e.AllowPrivateURL = p.tenant, true, false
	return nil
}

// applyFields sets the writable fields the body gives on e (all but id and state): null
// clears a field to its default.
func applyFields(b body, e *endpoints.Endpoint) error {
	str := func(name string, v *string) error {
		if b.null(name) {
			*v = ""
			return nil
		}
		_, err := b.field(name, v, "a string")
		return err
	}
	num := func(name string, v *int) error {
		if b.null(name) {
			*v = 0
			return nil
		}
		_, err := b.field(name, v, "a whole number")
		return err
	}
	ms := func(name string, v *time.Duration) error {
		var n int
		if err := num(name, &n); err != nil || !b.has(name) {
			return err
		}
		*v = time.Duration(n) * time.Millisecond
		return nil
	}
	list := func(name string, v *[]string) error {
		if b.null(name) {
			*v = nil
			return nil
		}
		_, err := b.field(name, v, "an array of strings")
		return err
	}
	for _, f := range []func() error{
		func() error { return str("url", &e.URL) },
		func() error { return str("tenant_id", &e.TenantID) },
		func() error { return list("event_types", &e.EventTypes) },
		func() error { return list("aggregate_types", &e.AggregateTypes) },
		func() error { return str("secret", &e.Secret) },
		func() error { return str("format", &e.Format) },
		func() error { return num("batch_max_events", &e.BatchMaxEvents) },
		func() error { return num("batch_max_bytes", &e.BatchMaxBytes) },
		func() error { return ms("batch_linger_ms", &e.BatchLinger) },
		func() error { return num("rate_limit", &e.RateLimit) },
		func() error { return num("max_in_flight", &e.MaxInFlight) },
		func() error { return ms("spill_after_ms", &e.SpillAfter) },
		func() error { return str("description", &e.Description) },
		func() error { return str("egress_proxy", &e.EgressProxy) },
		func() error { return applyScheme(b, e) },
		func() error { return applyBools(b, e) },
		func() error { return applyMetadata(b, e) },
	} {
		if err := f(); err != nil {
			return err
		}
	}
	return nil
}

func applyScheme(b body, e *endpoints.Endpoint) error {
	var s string
	if ok, err := b.field("scheme", &s, "a string"); err != nil || !ok {
		if b.null("scheme") {
			e.Scheme = signature.XSignature
		}
		return err
	}
	scheme, err := signature.ParseScheme(s)
	if err != nil {
		return problem(http.StatusUnprocessableEntity, typeInvalid, "scheme "+s+": use x-signature or standard-webhooks",
			FieldIssue{Field: "scheme", Detail: "use x-signature or standard-webhooks"})
	}
	e.Scheme = scheme
	return nil
}

func applyBools(b body, e *endpoints.Endpoint) error {
	for name, v := range map[string]*bool{"allow_private_url": &e.AllowPrivateURL, "deny_private": &e.DenyPrivate} {
		if b.null(name) {
			*v = false
		} else if _, err := b.field(name, v, "true or false"); err != nil {
			return err
		}
	}
	return nil
}

func applyMetadata(b body, e *endpoints.Endpoint) error {
	if !b.has("metadata") {
		return nil
	}
	if b.null("metadata") {
		e.Metadata = nil
		return nil
	}
	var obj map[string]json.RawMessage
	if _, err := b.field("metadata", &obj, "a JSON object"); err != nil {
		return err
	}
	e.Metadata = b["metadata"]
	return nil
}

// fieldsOf lists the body's fields but the secret's value, for the audit record.
func fieldsOf(b body) []string {
	var out []string
	for k := range b {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func (a *API) createEndpoint(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	b, err := a.readBody(w, r, endpointFields, false)
	if err != nil {
		return err
	}
	var e endpoints.Endpoint
	if _, err := b.field("id", &e.ID, "a string"); err != nil {
		return err
	}
	var st string
	if _, err := b.field("state", &st, "a string"); err != nil {
		return err
	}
	e.State = endpoints.State(st)
	if err := applyFields(b, &e); err != nil {
		return err
	}
	if err := tenantRules(p, b, &e); err != nil {
		return err
	}
	key, err := idempotencyKey(r)
	if err != nil {
		return err
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		if key != "" {
			if done, err := a.replayAnswer(r.Context(), tx, w, r, p, key, b); done || err != nil {
				return err
			}
		}
		got, err := a.store.Add(r.Context(), tx, e)
		if err != nil {
			return storeError(err, e.ID)
		}
		if err := a.audit(r.Context(), tx, p, "endpoint.create", got.TenantID, got.ID, map[string]any{"fields": fieldsOf(b)}); err != nil {
			return err
		}
		out, err := json.Marshal(wireEndpoint(got))
		if err != nil {
			return err
		}
		if key != "" {
			if err := a.recordAnswer(r.Context(), tx, p, key, http.StatusCreated, out); err != nil {
				return err
			}
		}
		w.Header().Set("Location", "/api/v1/endpoints/"+got.ID)
		writeRaw(w, http.StatusCreated, out)
		return nil
	})
}

func (a *API) updateEndpoint(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	fields := slices.DeleteFunc(slices.Clone(endpointFields), func(f string) bool { return f == "id" || f == "state" })
	b, err := a.readBody(w, r, fields, false)
	if err != nil {
		return err
	}
	if len(b) == 0 {
		return problem(http.StatusBadRequest, typeMalformed, "nothing to change: send the fields to change, e.g. {\"url\": ...}")
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		tenant, err := a.owned(r.Context(), tx, p, id, true)
		if err != nil {
			return err
		}
		var refused error
		got, err := a.store.Update(r.Context(), tx, id, func(e *endpoints.Endpoint) error {
			if refused = applyFields(b, e); refused != nil {
				return refused
			}
			refused = tenantRules(p, b, e)
			return refused
		})
		if refused != nil {
			return refused
		}
		if err != nil {
			return storeError(err, id)
		}
		if err := a.audit(r.Context(), tx, p, "endpoint.update", or(got.TenantID, tenant), id, map[string]any{"fields": fieldsOf(b)}); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, wireEndpoint(got))
		return nil
	})
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// Removed is the answer of DELETE /api/v1/endpoints/{id}: what went with the endpoint.
type Removed struct {
	ID      string         `json:"id"`
	Removed bool           `json:"removed"`
	Dropped map[string]int `json:"dropped"`
}

func (a *API) deleteEndpoint(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	if err := unknownParams(r, "force"); err != nil {
		return err
	}
	force := r.URL.Query().Get("force")
	if force != "" && force != "true" && force != "false" {
		return problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused", FieldIssue{Field: "force", Detail: "true or false"})
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		tenant, err := a.owned(r.Context(), tx, p, id, true)
		if err != nil {
			return err
		}
		if err := a.store.Remove(r.Context(), tx, id); err != nil {
			return storeError(err, id)
		}
		held, err := state.CountEndpointHolds(r.Context(), tx, a.cfg.Schema, id)
		if err != nil {
			return err
		}
		if !held.Empty() {
			if force != "true" {
				return problem(http.StatusConflict, typeState, fmt.Sprintf("endpoint %s has %d events in its backlog, %d dead "+
					"letters and %d parked aggregates: DELETE with ?force=true drops them (resume or enable it first, or "+
					"recover, to deliver them)", id, held.Backlog, held.DeadLetters, held.Parked))
			}
			if err := state.DropEndpointHolds(r.Context(), tx, a.cfg.Schema, id); err != nil {
				return err
			}
		}
		dropped := map[string]int{"backlog": int(held.Backlog), "dead_letters": int(held.DeadLetters), "parked": int(held.Parked)}
		if err := a.audit(r.Context(), tx, p, "endpoint.delete", tenant, id, map[string]any{"dropped": dropped}); err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, Removed{ID: id, Removed: true, Dropped: dropped})
		return nil
	})
}
