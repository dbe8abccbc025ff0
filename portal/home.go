package portal

import (
	"encoding/base64"
	"encoding/json"
	"html/template"
	"net/http"
	"net/url"

	"github.com/outbox-relay/outbox-relay/api"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// listRow is an endpoint of the tenant's list with its figures.
type listRow struct {
	api.Endpoint
	Stats api.Stats
}

type listData struct {
	Rows  []listRow
	Next  template.URL // the next page's query; "" on the last page
	First bool
}

// home serves the first page: a tenant's endpoints with their figures, or the console's overview
// of every endpoint.
func (p *Portal) home(w http.ResponseWriter, r *http.Request, q req) error {
	if q.operator {
		return p.overview(w, r, q)
	}
	query := url.Values{"limit": {itoa(PageSize)}}
	cursor := r.URL.Query().Get("cursor")
	if cursor != "" {
		query.Set("cursor", cursor)
	}
	var list api.Page[api.Endpoint]
	if err := p.call.call(r.Context(), q.who(), "GET", "/endpoints", query, nil, &list); err != nil {
		return err
	}
	d := listData{First: cursor == ""}
	for _, e := range list.Data {
		row := listRow{Endpoint: e}
		if err := p.call.call(r.Context(), q.who(), "GET", "/endpoints/"+url.PathEscape(e.ID)+"/stats", nil, nil, &row.Stats); err != nil {
			return err
		}
		d.Rows = append(d.Rows, row)
	}
	if list.NextCursor != nil {
		d.Next = queryURL(url.Values{"cursor": {*list.NextCursor}})
	}
	v := q.view("Endpoints", d)
	v.Notice = notice(r)
	p.render(w, http.StatusOK, "endpoints", v)
	return nil
}

// overviewData is the console's list.
type overviewData struct {
	Rows         []state.OverviewRow
	Sort, Tenant string
	State        string
	Next         template.URL
	First        bool
	Sorts        []string
}

// overview serves the console's first page: every endpoint, sortable, by keyset pages.
func (p *Portal) overview(w http.ResponseWriter, r *http.Request, q req) error {
	in := r.URL.Query()
	d := overviewData{Sort: in.Get("sort"), Tenant: in.Get("tenant"), State: in.Get("state"), First: in.Get("after") == "",
		Sorts: []string{"state", "undelivered", "oldest", "id"}}
	sort := state.OverviewSort(d.Sort)
	switch sort {
	case state.SortState, state.SortUndelivered, state.SortOldest, state.SortID:
	default:
		sort, d.Sort = state.SortState, "state"
	}
	switch d.State {
	case "", "enabled", "paused", "disabled":
	default:
		d.State = ""
	}
	oq := state.OverviewQuery{Sort: sort, TenantID: d.Tenant, State: d.State, Limit: PageSize}
	if after := in.Get("after"); after != "" {
		var c state.OverviewCursor
		b, err := base64.RawURLEncoding.DecodeString(after)
		if err != nil || json.Unmarshal(b, &c) != nil {
			return &apiError{api.Problem{Status: http.StatusBadRequest, Title: "This page's address is damaged",
				Detail: "Go back to the first page of the list."}}
		}
		oq.Cursor = &c
	}
	rows, err := state.EndpointOverview(r.Context(), p.cfg.Pool, p.cfg.Schema, oq)
	if err != nil {
		return err
	}
	d.Rows = rows
	if len(rows) == PageSize {
		last := rows[len(rows)-1]
		b, _ := json.Marshal(state.OverviewCursor{Key: last.Key, ID: last.ID})
		next := url.Values{"sort": {d.Sort}, "after": {base64.RawURLEncoding.EncodeToString(b)}}
		if d.Tenant != "" {
			next.Set("tenant", d.Tenant)
		}
		if d.State != "" {
			next.Set("state", d.State)
		}
		d.Next = queryURL(next)
	}
	v := q.view("Endpoints", d)
	v.Notice = notice(r)
	p.render(w, http.StatusOK, "overview", v)
	return nil
}

// notices are what a redirect after a change says on the next page (?done=...): fixed words,
// so an address cannot make a page say anything else.
var notices = map[string]string{
	"paused":  "The endpoint is paused: events wait for it until you resume it.",
	"resumed": "The endpoint is resumed: what waited is delivered now, in order.",
	"enabled": "The endpoint is enabled again: what waited is delivered now, in order.",
	"deleted": "The endpoint is deleted.",
	"saved":   "The changes are saved.",
}

func notice(r *http.Request) string { return notices[r.URL.Query().Get("done")] }

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
