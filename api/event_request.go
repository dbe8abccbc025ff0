package api

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// EventRequest is the answer of GET /api/v1/endpoints/{id}/events/{event_id}: the request the
// endpoint receives for the event, as the relay makes it now: its headers (every signature's
// value left out) and its body. The partner portal shows it beside each attempt.
type EventRequest struct {
	EndpointID    string    `json:"endpoint_id"`
	EventID       string    `json:"event_id"`
	EventType     string    `json:"event_type"`
	AggregateType string    `json:"aggregate_type"`
	AggregateID   string    `json:"aggregate_id"`
	CreatedAt     time.Time `json:"created_at"`
	Method        string    `json:"method"`
	URL           string    `json:"url"`
	// Headers are the request's headers, each signature's value replaced by
	// SignatureHidden, sorted by name; the timestamps and X-Attempt are those of a first attempt
	// made now.
	Headers []Header `json:"headers"`
	// Body is the request's body (uncompressed), the event's payload.
	Body string `json:"body"`
}

// Header is a header of a request.
type Header struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// SignatureHidden replaces a signature's value in EventRequest.Headers.
const SignatureHidden = "(not shown)"

// eventRequest serves GET /api/v1/endpoints/{id}/events/{event_id}: an event of the endpoint's
// subscription as the endpoint receives it. Another tenant's endpoint or event is not found.
func (a *API) eventRequest(w http.ResponseWriter, r *http.Request) error {
	p, id, eventID := principalOf(r.Context()), r.PathValue("id"), r.PathValue("event_id")
	if err := unknownParams(r); err != nil {
		return err
	}
	if _, err := a.owned(r.Context(), a.cfg.Pool, p, id, false); err != nil {
		return err
	}
	ev, err := a.endpointEvent(r.Context(), a.cfg.Pool, p, id, eventID)
	if err != nil {
		return err
	}
	row, err := a.row(r.Context(), id)
	if err != nil {
		return err
	}
	keys, _, err := row.Keys(a.ring, time.Now())
	if err != nil || len(keys) == 0 {
		keys = [][]byte{[]byte("the signature is not shown")} // its value is masked anyway
	}
	d, err := webhook.New(webhook.Config{URL: row.URL, Keys: keys, Scheme: row.SignatureScheme(), Format: webhook.Format(row.Format),
		UserAgent: "outbox-relay/" + a.cfg.Version, DefaultSource: "/outbox-relay/" + TestPipeline})
	if err != nil {
		return problem(http.StatusUnprocessableEntity, typeInvalid, "the endpoint's request cannot be shown: "+err.Error())
	}
	defer d.Close()
	m := &envelope.Message{ID: ev.ID, AggregateType: ev.AggregateType, AggregateID: ev.AggregateID, EventType: ev.EventType,
		Payload: ev.Payload, Headers: ev.Headers, Sequence: ev.Sequence, CreatedAt: ev.CreatedAt, CommitTime: ev.CreatedAt,
		TenantID: ev.TenantID}
	h, body := d.Preview(m, 1, time.Now(), SignatureHidden)
	out := EventRequest{EndpointID: id, EventID: ev.ID, EventType: ev.EventType, AggregateType: ev.AggregateType,
		AggregateID: ev.AggregateID, CreatedAt: ev.CreatedAt.UTC(), Method: http.MethodPost, URL: row.URL, Body: string(body)}
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		out.Headers = append(out.Headers, Header{Name: name, Value: strings.Join(h[name], ", ")})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}
