package portal

import (
	"context"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/inspect"
)

// eventData is the search by event id: every endpoint the event went to, and what happened.
type eventData struct {
	ID     string
	Result *api.EventDeliveries
}

// searchEvent serves GET .../events?id=: the API's answer for the event, which for a tenant
// holds its own endpoints only.
func (p *Portal) searchEvent(w http.ResponseWriter, r *http.Request, q req) error {
	d := eventData{ID: strings.TrimSpace(r.URL.Query().Get("id"))}
	v := q.view("Find an event", d)
	if d.ID != "" {
		var res api.EventDeliveries
		err := p.call.call(r.Context(), q.who(), "GET", "/events/"+url.PathEscape(d.ID)+"/deliveries", nil, nil, &res)
		if ae, ok := err.(*apiError); ok && ae.Status < 500 {
			v.Error = ae
		} else if err != nil {
			return err
		} else {
			d.Result = &res
			v.Data = d
		}
	}
	p.render(w, http.StatusOK, "events", v)
	return nil
}

// auditData is a page of the audit records, newest first.
type auditData struct {
	Records  []api.AuditRecord
	Endpoint string
	Next     template.URL
	First    bool
}

func (p *Portal) audit(w http.ResponseWriter, r *http.Request, q req) error {
	in := r.URL.Query()
	d := auditData{Endpoint: strings.TrimSpace(in.Get("endpoint_id")), First: in.Get("cursor") == ""}
	query := url.Values{"limit": {itoa(PageSize)}}
	if d.Endpoint != "" {
		query.Set("endpoint_id", d.Endpoint)
	}
	if c := in.Get("cursor"); c != "" {
		query.Set("cursor", c)
	}
	var page api.Page[api.AuditRecord]
	if err := p.call.call(r.Context(), q.who(), "GET", "/audit", query, nil, &page); err != nil {
		return err
	}
	d.Records = page.Data
	if page.NextCursor != nil {
		next := url.Values{"cursor": {*page.NextCursor}}
		if d.Endpoint != "" {
			next.Set("endpoint_id", d.Endpoint)
		}
		d.Next = queryURL(next)
	}
	p.render(w, http.StatusOK, "audit", q.view("Audit log", d))
	return nil
}

// pipelineRow is a pipeline's slot as `outbox-relay status` reads it.
type pipelineRow struct {
	inspect.PipelineStatus
}

// pipelines serves the console's pipelines: each slot's positions, lag and health, read from
// the database as `outbox-relay status` reads them (internal/inspect).
func (p *Portal) pipelines(w http.ResponseWriter, r *http.Request, q req) error {
	pipes := p.cfg.Pipelines
	if len(pipes) == 0 {
		found, err := relaySlots(r.Context(), p)
		if err != nil {
			return err
		}
		pipes = found
	}
	var rows []pipelineRow
	for _, pl := range pipes {
		st, err := inspect.PipelineOf(r.Context(), p.cfg.Pool, p.cfg.Schema, pl.Name, pl.Slot, "")
		if err != nil {
			return fmt.Errorf("read pipeline %s: %w", pl.Name, err)
		}
		rows = append(rows, pipelineRow{st})
	}
	p.render(w, http.StatusOK, "pipelines", q.view("Pipelines", rows))
	return nil
}

// relaySlots lists the slots of this database whose name the relay gives, each as a pipeline
// of the same name: the console's view when it is not told the pipelines.
func relaySlots(ctx context.Context, p *Portal) ([]Pipeline, error) {
	rows, err := p.cfg.Pool.Query(ctx, `SELECT slot_name::text FROM pg_replication_slots
		WHERE database = current_database() AND (slot_name = 'outbox_relay' OR slot_name LIKE 'outbox\_relay\_%') ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("list the slots: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list the slots: %w", err)
	}
	out := make([]Pipeline, len(names))
	for i, n := range names {
		out[i] = Pipeline{Name: n, Slot: n}
	}
	return out, nil
}
