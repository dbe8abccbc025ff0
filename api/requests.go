package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/control"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/state"
	"github.com/outbox-relay/outbox-relay/publisher"
)

// Request is a recover or a resend: a replay request the relay leading the endpoint's
// pipeline executes at its place in the stream (GET /api/v1/requests/{id} follows it).
type Request struct {
	ID int64 `json:"id"`
	// Kind is recover (a time range), resend (one event) or replay (a pipeline's, made with
	// `outbox-relay replay --since`; operators only).
	Kind       string     `json:"kind"`
	EndpointID *string    `json:"endpoint_id"`
	Pipeline   string     `json:"pipeline"`
	EventID    *string    `json:"event_id"`
	Since      time.Time  `json:"since"`
	Until      *time.Time `json:"until"`
	// Status is pending (not started), running or done.
	Status string `json:"status"`
	// Events and Sent count the rows of the pipeline in the range and those sent so far, every
	// tenant's alike (the endpoint receives those of its subscription): given to operators
	// only, null for a tenant, whom they would tell other tenants' volume.
	Events      *int64     `json:"events"`
	Sent        *int64     `json:"sent"`
	RequestedAt time.Time  `json:"requested_at"`
	FinishedAt  *time.Time `json:"finished_at"`
}

func wireRequest(st state.Replay, operator bool) Request {
	pipeline, ep, _ := strings.Cut(st.Pipeline, "/")
	out := Request{ID: st.ID, Kind: "replay", Pipeline: pipeline, EndpointID: optional(ep), EventID: optional(st.EventID),
		Since: st.Since.UTC(), Until: optionalTime(st.Until), RequestedAt: st.RequestedAt.UTC(), Status: "running"}
	if operator {
		out.Events, out.Sent = &st.Total, &st.Sent
	}
	switch {
	case ep != "" && st.EventID != "":
		out.Kind = "resend"
	case ep != "":
		out.Kind = "recover"
	}
	switch {
	case st.Done:
		out.Status = "done"
	case st.Sent == 0:
		out.Status = "pending"
	}
	if st.FinishedAt != nil {
		out.FinishedAt = optionalTime(*st.FinishedAt)
	}
	return out
}

func (a *API) getRequest(w http.ResponseWriter, r *http.Request) error {
	p := principalOf(r.Context())
	raw := r.PathValue("id")
	id, err := strconv.ParseInt(raw, 10, 64)
	missing := problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("no request %q", raw))
	if err != nil || id <= 0 {
		return missing
	}
	st, err := state.ReadReplay(r.Context(), a.cfg.Pool, a.cfg.Schema, id)
	if errors.Is(err, state.ErrNoReplay) {
		return missing
	}
	if err != nil {
		return err
	}
	if !p.operator {
		_, ep, _ := strings.Cut(st.Pipeline, "/")
		if ep == "" {
			return missing
		}
		if _, err := a.owned(r.Context(), a.cfg.Pool, p, ep, false); err != nil {
			return missing
		}
	}
	writeJSON(w, http.StatusOK, wireRequest(st, p.operator))
	return nil
}

// lane returns the name of endpoint id's lane in the pipeline the body names, or in the only
// pipeline that runs with endpoints ("default" when none has run yet).
func (a *API) lane(ctx context.Context, tx pgx.Tx, b body, id string) (string, error) {
	var p string
	if _, err := b.field("pipeline", &p, "a string"); err != nil {
		return "", err
	}
	names, err := state.EndpointPipelines(ctx, tx, a.cfg.Schema)
	if err != nil {
		return "", err
	}
	switch {
	case p != "" && !slices.Contains(names, p) && len(names) > 0:
		return "", problem(http.StatusUnprocessableEntity, typeInvalid, "pipeline "+p+" does not run with endpoints",
			FieldIssue{Field: "pipeline", Detail: "one of " + strings.Join(names, ", ")})
	case p != "":
	case len(names) == 0:
		p = publisher.DefaultPipeline
	case len(names) == 1:
		p = names[0]
	default:
		return "", problem(http.StatusUnprocessableEntity, typeInvalid, "several pipelines run with endpoints: name one",
			FieldIssue{Field: "pipeline", Detail: "one of " + strings.Join(names, ", ")})
	}
	return p + "/" + id, nil
}

// request records req in tx and answers 202 with it, or a nothing-to-replay problem.
func (a *API) request(ctx context.Context, tx pgx.Tx, w http.ResponseWriter, p principal, action, tenant, id string,
	req control.SinceRequest) error {
	req.Schema = a.cfg.Schema
	plan, err := control.RequestReplaySince(ctx, tx, req, false)
	if err != nil {
		return err
	}
	if plan.ID == 0 {
		detail := "no event was created in that range"
		if plan.Pruned(req.Since) {
			detail += ": events before " + oldest(plan) + " were pruned (retention) and cannot be re-sent"
		}
		return problem(http.StatusUnprocessableEntity, typeNothing, detail)
	}
	if err := a.audit(ctx, tx, p, action, tenant, id, map[string]any{"request_id": plan.ID}); err != nil {
		return err
	}
	st, err := state.ReadReplay(ctx, tx, a.cfg.Schema, plan.ID)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/api/v1/requests/"+strconv.FormatInt(plan.ID, 10))
	writeJSON(w, http.StatusAccepted, wireRequest(st, p.operator))
	return nil
}

func oldest(plan control.SincePlan) string {
	if plan.OldestRow == nil {
		return "now (the table is empty)"
	}
	return plan.OldestRow.UTC().Format(time.RFC3339)
}

// recoverEndpoint serves POST /api/v1/endpoints/{id}/recover {"since", "until"?, "pipeline"?}:
// what `outbox-relay replay --since --endpoint` does. The endpoint receives, again, the events
// of its subscription created in the range, in order per aggregate, behind what it has not
// been delivered yet.
func (a *API) recoverEndpoint(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	b, err := a.readBody(w, r, []string{"since", "until", "pipeline", "dry_run"}, false)
	if err != nil {
		return err
	}
	var req control.SinceRequest
	var dryRun bool
	if _, err := b.field("dry_run", &dryRun, "true or false"); err != nil {
		return err
	}
	var is issues
	if ok, err := b.field("since", &req.Since, "an RFC 3339 time"); err != nil {
		return err
	} else if !ok {
		is.add("since", "required: the time to re-send from, e.g. 2026-03-03T10:00:00Z")
	}
	if _, err := b.field("until", &req.Until, "an RFC 3339 time"); err != nil {
		return err
	}
	now := time.Now()
	switch {
	case req.Since.After(now):
		is.add("since", "is in the future")
	case !req.Until.IsZero() && !req.Until.After(req.Since):
		is.add("until", "must be after since")
	}
	if err := is.err(http.StatusUnprocessableEntity, typeInvalid, "the range is refused"); err != nil {
		return err
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		tenant, err := a.owned(r.Context(), tx, p, id, false)
		if err != nil {
			return err
		}
		if req.Pipeline, err = a.lane(r.Context(), tx, b, id); err != nil {
			return err
		}
		preview, err := a.previewRecover(r.Context(), tx, id, req)
		if err != nil {
			return err
		}
		if dryRun {
			writeJSON(w, http.StatusOK, preview)
			return nil
		}
		if preview.Events == 0 {
			// Decided on the endpoint's own events, not the range's: whether another tenant
			// wrote in that range is none of this caller's business.
			return problem(http.StatusUnprocessableEntity, typeNothing, "no event of endpoint "+id+
				"'s subscription was created in that range: widen it, or check its event types with GET /api/v1/endpoints/"+id)
		}
		return a.request(r.Context(), tx, w, p, "endpoint.recover", tenant, id, req)
	})
}

// resendEvent serves POST /api/v1/endpoints/{id}/events/{event_id}/resend: that event again,
// to that endpoint only, behind the events of its aggregate the endpoint has not had yet.
func (a *API) resendEvent(w http.ResponseWriter, r *http.Request) error {
	p, id, eventID := principalOf(r.Context()), r.PathValue("id"), r.PathValue("event_id")
	b, err := a.readBody(w, r, []string{"pipeline"}, true)
	if err != nil {
		return err
	}
	return a.tx(r.Context(), func(tx pgx.Tx) error {
		tenant, err := a.owned(r.Context(), tx, p, id, false)
		if err != nil {
			return err
		}
		ev, err := a.endpointEvent(r.Context(), tx, p, id, eventID)
		if err != nil {
			return err
		}
		created := ev.CreatedAt
		lane, err := a.lane(r.Context(), tx, b, id)
		if err != nil {
			return err
		}
		req := control.SinceRequest{Pipeline: lane, Since: created, Until: created.Add(time.Microsecond), EventID: eventID}
		return a.request(r.Context(), tx, w, p, "endpoint.resend", tenant, id, req)
	})
}

// RecoverPreview is the answer of a recover with "dry_run": true: how many events of the range
// the endpoint subscribes to (its tenant, event types and aggregate types), which a recover
// would send it again; nothing is recorded. The operator console and the partner portal ask it
// before they confirm a recover.
type RecoverPreview struct {
	EndpointID string     `json:"endpoint_id"`
	Since      time.Time  `json:"since"`
	Until      *time.Time `json:"until"`
	Events     int64      `json:"events"`
}

func (a *API) previewRecover(ctx context.Context, tx pgx.Tx, id string, req control.SinceRequest) (RecoverPreview, error) {
	e, err := a.store.Get(ctx, tx, id)
	if err != nil {
		return RecoverPreview{}, storeError(err, id)
	}
	groups, err := state.CountRangeGroups(ctx, tx, a.cfg.Schema, req.Since, req.Until, e.TenantID)
	if err != nil {
		return RecoverPreview{}, err
	}
	row := endpoint.Row{TenantID: e.TenantID, EventTypes: e.EventTypes, AggregateTypes: e.AggregateTypes}
	out := RecoverPreview{EndpointID: id, Since: req.Since.UTC(), Until: optionalTime(req.Until)}
	for _, g := range groups {
		if row.Subscribed(g.TenantID, g.EventType, g.AggregateType) {
			out.Events += g.Events
		}
	}
	return out, nil
}

// endpointEvent reads event eventID as endpoint id receives it: a 404 when it does not exist,
// p may not see it or it is of another tenant than the endpoint's, a 422 when the endpoint does
// not subscribe to it (it would not receive it). The caller has checked that p sees the
// endpoint.
func (a *API) endpointEvent(ctx context.Context, q state.DB, p principal, id, eventID string) (state.Event, error) {
	noEvent := problem(http.StatusNotFound, typeNotFound, fmt.Sprintf("no event %q for endpoint %s: check the id; events "+
		"older than the retention are pruned", eventID, id))
	if _, err := uuid.Parse(eventID); err != nil {
		return state.Event{}, noEvent
	}
	e, err := a.store.Get(ctx, q, id)
	if err != nil {
		return state.Event{}, storeError(err, id)
	}
	ev, err := state.ReadEvent(ctx, q, a.cfg.Schema, eventID)
	if errors.Is(err, state.ErrNoEvent) || (err == nil && (!p.sees(ev.TenantID) || (e.TenantID != "" && e.TenantID != ev.TenantID))) {
		return state.Event{}, noEvent
	}
	if err != nil {
		return state.Event{}, err
	}
	row := endpoint.Row{TenantID: e.TenantID, EventTypes: e.EventTypes, AggregateTypes: e.AggregateTypes}
	if !row.Subscribed(ev.TenantID, ev.EventType, ev.AggregateType) {
		return state.Event{}, problem(http.StatusUnprocessableEntity, typeInvalid, fmt.Sprintf("endpoint %s does not subscribe "+
			"to events of type %s (aggregate type %s): it would not receive it; widen its event_types or aggregate_types first",
			id, ev.EventType, ev.AggregateType))
	}
	return ev, nil
}
