package inbox

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"
)

// Event is one delivered outbox event, as the relay describes it in its headers.
type Event struct {
	// ID is the outbox row's id (X-Event-Id, or webhook-id under Standard Webhooks): the same
	// on every retry, and the inbox's deduplication key.
	ID uuid.UUID
	// Type is X-Event-Type, e.g. "order.created".
	Type string
	// AggregateType and AggregateID are X-Aggregate-Type and X-Aggregate-Id, the ordering key.
	AggregateType string
	AggregateID   string
	// Attempt is X-Attempt, 1 for the first delivery; 0 if the header is absent.
	Attempt int
	// Sequence is X-Event-Sequence, an opaque string that rises per aggregate; empty if absent.
	Sequence string
	// Timestamp is when this attempt was signed (webhook-timestamp, else X-Timestamp); zero
	// if absent.
	Timestamp time.Time
	// Payload is the request body, exactly as received.
	Payload json.RawMessage
}

// ParseEvent reads an Event from a request's headers and body. It does not check the
// signature: call Verify first. The error wraps ErrMalformed when the event id is missing or
// not a uuid (or webhook-id and X-Event-Id disagree), the body is not JSON, or the timestamp
// or attempt is not a number.
func ParseEvent(h http.Header, body []byte) (Event, error) {
	id, err := parseID(h)
	if err != nil {
		return Event{}, err
	}
	if !json.Valid(body) {
		return Event{}, fmt.Errorf("%w: body is not JSON", ErrMalformed)
	}
	ts, err := parseTimestamp(h)
	if err != nil {
		return Event{}, err
	}
	attempt, err := parseAttempt(h.Get("X-Attempt"))
	if err != nil {
		return Event{}, err
	}
	return Event{
		ID:            id,
		Type:          h.Get("X-Event-Type"),
		AggregateType: h.Get("X-Aggregate-Type"),
		AggregateID:   h.Get("X-Aggregate-Id"),
		Attempt:       attempt,
		Sequence:      h.Get("X-Event-Sequence"),
		Timestamp:     ts,
		Payload:       json.RawMessage(body),
	}, nil
}

// parseID reads the event id. Under Standard Webhooks the signed webhook-id is the id; an
// X-Event-Id beside it must name the same event.
func parseID(h http.Header) (uuid.UUID, error) {
	wid, xid := h.Get(headerWebhookID), h.Get(headerXEventID)
	if wid == "" && xid == "" {
		return uuid.Nil, fmt.Errorf("%w: no %s header", ErrMalformed, headerXEventID)
	}
	var ids []uuid.UUID
	for _, s := range []string{wid, xid} {
		if s == "" {
			continue
		}
		id, err := uuid.Parse(s)
		if err != nil {
			return uuid.Nil, fmt.Errorf("%w: event id %q is not a uuid", ErrMalformed, clip(s))
		}
		ids = append(ids, id)
	}
	if len(ids) == 2 && ids[0] != ids[1] {
		return uuid.Nil, fmt.Errorf("%w: webhook-id %s and %s %s differ", ErrMalformed, ids[0], headerXEventID, ids[1])
	}
	return ids[0], nil
}

func parseTimestamp(h http.Header) (time.Time, error) {
	ts := h.Get(headerWebhookTS)
	if ts == "" {
		ts = h.Get(headerXTimestamp)
	}
	if ts == "" {
		return time.Time{}, nil
	}
	sec, err := parseUnix(ts)
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(sec, 0), nil
}

func parseAttempt(v string) (int, error) {
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%w: X-Attempt %q is not a positive integer", ErrMalformed, clip(v))
	}
	return n, nil
}
