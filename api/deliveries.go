package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// Delivery is one entry of the delivery log: a failed attempt, or a delivery (duplicates
// included: an event re-sent is delivered again).
type Delivery struct {
	EventID    string    `json:"event_id"`
	EndpointID string    `json:"endpoint_id"`
	Pipeline   string    `json:"pipeline"`
	Attempt    int       `json:"attempt"`
	At         time.Time `json:"at"`
	// Status is failed or delivered.
	Status string `json:"status"`
	// StatusCode is the HTTP status of a failed attempt; null when there was no answer (a
	// network error) and for a delivery (the log keeps only that it was a 2xx).
	StatusCode *int `json:"status_code"`
	LatencyMS  int  `json:"latency_ms"`
	// Error is why an attempt failed, with the first KB of the answer; null for a delivery.
	Error *string `json:"error"`
}

func wireDelivery(r state.DeliveryRecord) Delivery {
	d := Delivery{EventID: r.EventID, EndpointID: r.Endpoint, Pipeline: r.Pipeline, Attempt: r.Attempt, At: r.At.UTC(),
		Status: "failed", LatencyMS: r.LatencyMS, Error: optional(r.Error)}
	if r.Delivered {
		d.Status, d.Error = "delivered", nil
	}
	if r.Status != 0 {
		code := r.Status
		d.StatusCode = &code
	}
	return d
}

// logCursor is the position a page of an endpoint's log ends at.
type logCursor struct {
	At        time.Time `json:"t"`
	EventID   string    `json:"e"`
	Attempt   int       `json:"n"`
	Delivered bool      `json:"d"`
}

// clockSkew is how far ahead of the API's clock a relay's may be: entries it wrote up to this
// far in the future are listed.
const clockSkew = time.Minute

func (a *API) endpointDeliveries(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	if err := unknownParams(r, "status", "since", "until", "limit", "cursor"); err != nil {
		return err
	}
	q := state.LogPageQuery{Endpoint: id, Until: time.Now().Add(clockSkew)}
	switch s := r.URL.Query().Get("status"); s {
	case "":
	case "failed":
		q.Failed = true
	case "delivered":
		q.Delivered = true
	default:
		return problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: "status", Detail: "failed or delivered (leave it out for both)"})
	}
	var err error
	if q.Limit, err = queryLimit(r); err != nil {
		return err
	}
	if q.Since, err = queryTime(r, "since"); err != nil {
		return err
	}
	if until, err := queryTime(r, "until"); err != nil {
		return err
	} else if !until.IsZero() {
		q.Until = until
	}
	if !q.Until.After(q.Since) {
		return problem(http.StatusBadRequest, typeMalformed, "a query parameter is refused",
			FieldIssue{Field: "until", Detail: "until must be after since"})
	}
	var c logCursor
	if ok, err := decodeCursor(r, &c); err != nil {
		return err
	} else if ok {
		q.Cursor = state.LogCursor(c)
	}
	known, err := a.visible(r.Context(), p, id)
	if err != nil {
		return err
	}
	recs, err := state.EndpointLogPage(r.Context(), a.cfg.Pool, a.cfg.Schema, q)
	if err != nil {
		return err
	}
	if !known && len(recs) == 0 && q.Cursor.At.IsZero() {
		return notFound(id)
	}
	out := make([]Delivery, len(recs))
	for i, rec := range recs {
		out[i] = wireDelivery(rec)
	}
	next := ""
	if len(recs) == q.Limit {
		last := recs[len(recs)-1]
		next = encodeCursor(logCursor{At: last.At, EventID: last.EventID, Attempt: last.Attempt, Delivered: last.Delivered})
	}
	writeJSON(w, http.StatusOK, page(out, next))
	return nil
}

// visible reports whether endpoint id exists and p may see it; a tenant gets a 404 for
// anything else, an operator may read the log of an endpoint since removed.
func (a *API) visible(ctx context.Context, p principal, id string) (bool, error) {
	_, err := a.owned(ctx, a.cfg.Pool, p, id, false)
	var pr *Problem
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &pr) && pr.Status == http.StatusNotFound && p.operator:
		return false, nil
	}
	return false, err
}

// EventDeliveries is the answer of GET /api/v1/events/{event_id}/deliveries.
type EventDeliveries struct {
	EventID    string       `json:"event_id"`
	Deliveries []Delivery   `json:"deliveries"`
	Backlog    []Backlogged `json:"backlog"`
	// Truncated is true when more than MaxLimit entries exist: the first MaxLimit are listed.
	Truncated bool `json:"truncated"`
}

// Backlogged is an event waiting in an endpoint's backlog.
type Backlogged struct {
	EndpointID string    `json:"endpoint_id"`
	Pipeline   string    `json:"pipeline"`
	Attempts   int       `json:"attempts"`
	SpilledAt  time.Time `json:"spilled_at"`
}

func (a *API) eventDeliveries(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("event_id")
	if err := unknownParams(r); err != nil {
		return err
	}
	if _, err := uuid.Parse(id); err != nil {
		return problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("no event %q: an event id is a UUID", id))
	}
	recs, backlog, err := state.EventDeliveries(r.Context(), a.cfg.Pool, a.cfg.Schema, id)
	if err != nil {
		return err
	}
	tenants, err := a.tenantsOf(r.Context(), recs, backlog)
	if err != nil {
		return err
	}
	out := EventDeliveries{EventID: id, Deliveries: []Delivery{}, Backlog: []Backlogged{}}
	for _, rec := range recs {
		if t, ok := tenants[rec.Endpoint]; (ok || p.operator) && p.sees(t) {
			if len(out.Deliveries) == MaxLimit {
				out.Truncated = true
				break
			}
			out.Deliveries = append(out.Deliveries, wireDelivery(rec))
		}
	}
	for _, b := range backlog {
		if t, ok := tenants[b.Endpoint]; (ok || p.operator) && p.sees(t) {
			out.Backlog = append(out.Backlog, Backlogged{EndpointID: b.Endpoint, Pipeline: b.Pipeline, Attempts: b.Attempts,
				SpilledAt: b.SpilledAt.UTC()})
		}
	}
	if len(out.Deliveries) == 0 && len(out.Backlog) == 0 {
		return problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("the delivery log holds nothing of event %s for the "+
			"endpoints you can see: check the id, and that the event is younger than the log's retention (7 days by default)", id))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// tenantsOf returns the tenant ("" for none) of each existing endpoint the entries name.
func (a *API) tenantsOf(ctx context.Context, recs []state.DeliveryRecord, backlog []state.EventBacklog) (map[string]string, error) {
	var ids []string
	for _, r := range recs {
		ids = append(ids, r.Endpoint)
	}
	for _, b := range backlog {
		ids = append(ids, b.Endpoint)
	}
	out := map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := a.cfg.Pool.Query(ctx, schema.SQL(a.cfg.Schema, `SELECT id, coalesce(tenant_id, '') FROM {outbox_endpoints}
		WHERE id = ANY($1)`), ids)
	if err != nil {
		return nil, err
	}
	var id, tenant string
	_, err = pgx.ForEachRow(rows, []any{&id, &tenant}, func() error { out[id] = tenant; return nil })
	return out, err
}
