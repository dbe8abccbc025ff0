package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/outbox-relay/outbox-relay/internal/schema"
)

// Aggregate is an aggregate's type and id, as outbox_events and outbox_parked_aggregates hold them.
type Aggregate struct {
	Type, ID string
}

// Event is an outbox row as a replay or a backfill re-sends it: Sequence is the stream position
// recorded when it was delivered, dead-lettered or parked ("" when none was), Headers nil when
// the row has none.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	EventType     string
	Payload       []byte
	Headers       []byte
	Sequence      string
	CreatedAt     time.Time
	// TenantID is the row's tenant_id, "" when NULL.
	TenantID string
}

// setText sets the payload and headers read as text (a NULL headers read as "").
func (e *Event) setText(payload, headers string) {
	e.Payload = []byte(payload)
	if headers != "" {
		e.Headers = []byte(headers)
	}
}

// collectEvents reads rows of (id, event_type, payload, headers, sequence, created_at, tenant) of
// agg.
func collectEvents(rows pgx.Rows, agg Aggregate) ([]Event, error) {
	defer rows.Close()
	var evs []Event
	for rows.Next() {
		ev := Event{AggregateType: agg.Type, AggregateID: agg.ID}
		var payload, headers string
		if err := rows.Scan(&ev.ID, &ev.EventType, &payload, &headers, &ev.Sequence, &ev.CreatedAt, &ev.TenantID); err != nil {
			return nil, err
		}
		ev.setText(payload, headers)
		evs = append(evs, ev)
	}
	return evs, rows.Err()
}

// ErrNoEvent means outbox_events has no row of that id.
var ErrNoEvent = errors.New("no such event")

// ReadEvent reads the outbox row id of schema s, as a replay would send it.
func ReadEvent(ctx context.Context, db DB, s, id string) (Event, error) {
	var ev Event
	var payload, headers string
	err := db.QueryRow(ctx, schema.SQL(s, `SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text,
		coalesce(headers::text, ''), coalesce(event_sequence, ''), created_at, coalesce(tenant_id, '')
		FROM {outbox_events} WHERE id = $1::uuid`), id).Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.EventType,
		&payload, &headers, &ev.Sequence, &ev.CreatedAt, &ev.TenantID)
	if errors.Is(err, pgx.ErrNoRows) {
		return ev, ErrNoEvent
	}
	if err != nil {
		return ev, fmt.Errorf("read event %s: %w", id, err)
	}
	ev.setText(payload, headers)
	return ev, nil
}
