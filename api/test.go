package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/catalog"
	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/internal/endpoint"
	"github.com/outbox-relay/outbox-relay/internal/endpointdest"
	"github.com/outbox-relay/outbox-relay/internal/schema"
	"github.com/outbox-relay/outbox-relay/internal/state"
)

// PingType is the event type of a test event when no catalog type is asked for.
const PingType = "outbox-relay.ping"

// TestPipeline is the pipeline name the delivery log records test attempts under.
const TestPipeline = "test"

// TestResult is the answer of POST /api/v1/endpoints/{id}/test: the attempt's outcome.
type TestResult struct {
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	Delivered bool   `json:"delivered"`
	// StatusCode is the HTTP status answered; null when there was no answer.
	StatusCode *int `json:"status_code"`
	LatencyMS  int  `json:"latency_ms"`
	// Answer is the first KB of the answer's body, a 2xx answer's too (the delivery log keeps
	// only a failed one's); null when there was no answer or it had no body.
	Answer *string `json:"answer"`
	// Error says why the attempt failed; null when delivered.
	Error *string `json:"error"`
}

// testEndpoint serves POST /api/v1/endpoints/{id}/test {"event_type"?}: one event, signed with
// the endpoint's secrets as any other, sent by this process to that endpoint only through the
// URL guard, and recorded in the delivery log (pipeline "test"). The event is a catalog type's
// example when event_type names one, else a ping (PingType); it is not in outbox_events.
func (a *API) testEndpoint(w http.ResponseWriter, r *http.Request) error {
	p, id := principalOf(r.Context()), r.PathValue("id")
	b, err := a.readBody(w, r, []string{"event_type"}, true)
	if err != nil {
		return err
	}
	var typ string
	if _, err := b.field("event_type", &typ, "a string"); err != nil {
		return err
	}
	tenant, err := a.owned(r.Context(), a.cfg.Pool, p, id, false)
	if err != nil {
		return err
	}
	row, err := a.row(r.Context(), id)
	if err != nil {
		return err
	}
	m, err := a.testMessage(r.Context(), row, typ)
	if err != nil {
		return err
	}
	d, err := a.testDestination(row)
	if err != nil {
		return err
	}
	start := time.Now()
	res := d.Send(r.Context(), m, 1)
	elapsed := time.Since(start)
	d.Close()
	out := TestResult{EventID: m.ID, EventType: m.EventType, Delivered: res.Delivered, LatencyMS: int(elapsed.Milliseconds())}
	if res.Status != 0 {
		code := res.Status
		out.StatusCode = &code
	}
	var entries state.DeliveryEntries
	errText := ""
	if len(res.Answer) > 0 {
		answer := string(res.Answer)
		out.Answer = &answer
	}
	if !res.Delivered {
		errText = res.Reason()
		out.Error = &errText
		if out.Answer != nil {
			errText += ": " + *out.Answer
		}
	}
	entries.Add(TestPipeline, id, m.ID, 1, start, res.Status, elapsed, errText)
	err = a.tx(r.Context(), func(tx pgx.Tx) error {
		if res.Delivered {
			err = state.InsertDeliveries(r.Context(), tx, a.cfg.Schema, &entries)
		} else {
			err = state.InsertDeliveryAttempts(r.Context(), tx, a.cfg.Schema, &entries)
		}
		if err != nil {
			return err
		}
		return a.audit(r.Context(), tx, p, "endpoint.test", tenant, id, map[string]any{"event_id": m.ID,
			"delivered": res.Delivered})
	})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// row reads endpoint id's row as the relay does (its secrets as stored).
func (a *API) row(ctx context.Context, id string) (endpoint.Row, error) {
	var doc []byte
	err := a.cfg.Pool.QueryRow(ctx, schema.SQL(a.cfg.Schema, `SELECT to_jsonb(e) FROM {outbox_endpoints} e WHERE id = $1`), id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		return endpoint.Row{}, notFound(id)
	}
	if err != nil {
		return endpoint.Row{}, err
	}
	var row endpoint.Row
	return row, json.Unmarshal(doc, &row)
}

// testMessage builds the test event: the example of catalog type typ, or a ping.
func (a *API) testMessage(ctx context.Context, row endpoint.Row, typ string) (*envelope.Message, error) {
	now := time.Now()
	uid, err := uuid.NewV7()
	if err != nil {
		return nil, err
	}
	m := &envelope.Message{ID: uid.String(), EventType: PingType, AggregateType: "outbox-relay", AggregateID: row.ID,
		CommitTime: now, CreatedAt: now, TenantID: row.TenantID,
		Sequence: envelope.Sequence(uint64(now.UnixMicro()), 0)}
	if typ == "" {
		m.Payload, _ = json.Marshal(map[string]any{"type": "ping", "endpoint_id": row.ID,
			"message": "a test event from the outbox-relay API", "sent_at": now.UTC()})
		return m, nil
	}
	t, err := catalog.Catalog{Schema: a.cfg.Schema}.Get(ctx, a.cfg.Pool, typ)
	if errors.Is(err, catalog.ErrNotFound) {
		return nil, problem(http.StatusUnprocessableEntity, typeInvalid, "event type "+typ+" is not in the catalog",
			FieldIssue{Field: "event_type", Detail: "a type of GET /api/v1/event-types, or leave it out for a ping"})
	}
	if err != nil {
		return nil, err
	}
	if len(t.Example) == 0 {
		return nil, problem(http.StatusUnprocessableEntity, typeInvalid, "event type "+typ+" has no example payload",
			FieldIssue{Field: "event_type", Detail: "give the type an example in the catalog, or leave event_type out for a ping"})
	}
	m.EventType, m.Payload = t.Name, t.Example
	return m, nil
}

// testDestination builds the webhook the relay would deliver to row with (endpointdest, as the
// relay opens it): its secrets, its format, its egress (the guard at every connection, its proxy).
func (a *API) testDestination(row endpoint.Row) (*webhook.Destination, error) {
	d, _, err := endpointdest.Open(row, endpointdest.Options{Guard: a.guard, Ring: a.ring, Proxy: a.cfg.EgressProxy,
		Resolver: a.cfg.Resolver, Timeout: a.cfg.TestTimeout, MaxConns: 1, UserAgent: "outbox-relay/" + a.cfg.Version,
		Source: "/outbox-relay/" + TestPipeline, KeepAnswers: true})
	var oe *endpointdest.Error
	switch {
	case err == nil:
		return d, nil
	case errors.As(err, &oe) && oe.Field == "url":
		return nil, invalid(endpoint.Field("url", oe.Err))
	case errors.As(err, &oe) && oe.Field == "secrets":
		return nil, problem(http.StatusUnprocessableEntity, typeInvalid, "the endpoint cannot sign: "+oe.Err.Error())
	case errors.As(err, &oe):
		return nil, problem(http.StatusUnprocessableEntity, typeInvalid, err.Error(), FieldIssue{Field: oe.Field, Detail: err.Error()})
	}
	return nil, err
}

var _ destination.Destination = (*webhook.Destination)(nil)
