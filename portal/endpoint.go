package portal

import (
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/api"
)

// endpointData is an endpoint's page: the endpoint, its figures, and a page of its deliveries.
type endpointData struct {
	E          api.Endpoint
	Stats      api.Stats
	Deliveries []api.Delivery
	Filter     deliveryFilter
	Next       template.URL // the next page's query; "" on the last
	First      bool
	LogError   *apiError // the filter refused, as the API says it
}

// deliveryFilter is the form above the deliveries: status, and a time range in UTC.
type deliveryFilter struct {
	Status, Since, Until string
}

// formTime is how a datetime-local input writes a time; the pages read it as UTC.
const formTime = "2006-01-02T15:04"

// apiTime turns a form's time (datetime-local, UTC; or RFC 3339) into the API's RFC 3339, or
// returns it as it is for the API to refuse in its words.
func apiTime(s string) string {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(formTime, s); err == nil {
		return t.UTC().Format(time.RFC3339)
	}
	if t, err := time.Parse("2006-01-02T15:04:05", s); err == nil {
		return t.UTC().Format(time.RFC3339)
	}
	return s
}

func endpointPath(id string) string { return "/endpoints/" + url.PathEscape(id) }

// getEndpoint reads endpoint id through the API: another tenant's is not found.
func (p *Portal) getEndpoint(r *http.Request, q req, id string) (api.Endpoint, error) {
	var e api.Endpoint
	err := p.call.call(r.Context(), q.who(), "GET", endpointPath(id), nil, nil, &e)
	return e, err
}

func (p *Portal) viewEndpoint(w http.ResponseWriter, r *http.Request, q req) error {
	id := r.PathValue("id")
	d := endpointData{}
	var err error
	if d.E, err = p.getEndpoint(r, q, id); err != nil {
		return err
	}
	if err := p.call.call(r.Context(), q.who(), "GET", endpointPath(id)+"/stats", nil, nil, &d.Stats); err != nil {
		return err
	}
	in := r.URL.Query()
	d.Filter = deliveryFilter{Status: in.Get("status"), Since: in.Get("since"), Until: in.Get("until")}
	query := url.Values{"limit": {itoa(PageSize)}}
	if d.Filter.Status != "" {
		query.Set("status", d.Filter.Status)
	}
	if d.Filter.Since != "" {
		query.Set("since", apiTime(d.Filter.Since))
	}
	if d.Filter.Until != "" {
		query.Set("until", apiTime(d.Filter.Until))
	}
	if c := in.Get("cursor"); c != "" {
		query.Set("cursor", c)
	}
	d.First = in.Get("cursor") == ""
	var log api.Page[api.Delivery]
	err = p.call.call(r.Context(), q.who(), "GET", endpointPath(id)+"/deliveries", query, nil, &log)
	if ae, ok := err.(*apiError); ok && ae.Status == http.StatusBadRequest {
		d.LogError = ae // the filter: shown beside its fields, the endpoint still shown
	} else if err != nil {
		return err
	}
	d.Deliveries = log.Data
	if log.NextCursor != nil {
		next := url.Values{"cursor": {*log.NextCursor}}
		for k, v := range map[string]string{"status": d.Filter.Status, "since": d.Filter.Since, "until": d.Filter.Until} {
			if v != "" {
				next.Set(k, v)
			}
		}
		d.Next = queryURL(next)
	}
	v := q.view(d.E.ID, d)
	v.Notice = notice(r)
	p.render(w, http.StatusOK, "endpoint", v)
	return nil
}

// eventPageData is an event's page for one endpoint: the request the endpoint receives for it, and
// every attempt and delivery of it there.
type eventPageData struct {
	E        api.Endpoint
	Request  api.EventRequest
	Attempts []api.Delivery
	Backlog  []api.Backlogged
}

// viewEvent serves GET .../endpoints/{id}/events/{event_id}: the request (headers, the
// signatures left out, and body) and the attempts, through the API.
func (p *Portal) viewEvent(w http.ResponseWriter, r *http.Request, q req) error {
	id, event := r.PathValue("id"), r.PathValue("event_id")
	d := eventPageData{}
	var err error
	if d.E, err = p.getEndpoint(r, q, id); err != nil {
		return err
	}
	if err := p.call.call(r.Context(), q.who(), "GET", endpointPath(id)+"/events/"+url.PathEscape(event), nil, nil, &d.Request); err != nil {
		return err
	}
	var all api.EventDeliveries
	if err := p.call.call(r.Context(), q.who(), "GET", "/events/"+url.PathEscape(event)+"/deliveries", nil, nil, &all); err != nil {
		if ae, ok := err.(*apiError); !ok || ae.Status != http.StatusNotFound { // not found: no attempt yet
			return err
		}
	}
	for _, a := range all.Deliveries {
		if a.EndpointID == id {
			d.Attempts = append(d.Attempts, a)
		}
	}
	for _, b := range all.Backlog {
		if b.EndpointID == id {
			d.Backlog = append(d.Backlog, b)
		}
	}
	p.render(w, http.StatusOK, "event", q.view("Event "+event, d))
	return nil
}
