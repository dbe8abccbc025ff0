package inbox

import (
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/outbox-relay/outbox-relay/cloudevents"
)

// Event is one delivered outbox event, as the relay describes it in its headers (raw format,
// CloudEvents binary mode) or in a batch's array (CloudEvents batch mode). For the
// CloudEvents formats the fields named after an X- header come from the matching attribute:
// ID from id, Type from type, AggregateType and AggregateID from the extensions aggregatetype
// and aggregateid, Sequence from the extension sequence.
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
	// Payload is the event's JSON: the request body exactly as received (after any
	// Content-Encoding is undone), or under CloudEvents batch mode the event's "data" member.
	Payload json.RawMessage
	// Source is the CloudEvents source (ce-source, or "source" in a batch), e.g.
	// "/outbox-relay/default"; empty for a raw delivery.
	Source string
	// Time is the CloudEvents time, the outbox row's created_at; zero for a raw delivery.
	Time time.Time
}

// Format names the wire format a delivery came in; see ParseEvents.
type Format int

const (
	// FormatRaw is the raw contract: X-Event-* headers, the payload as the body.
	FormatRaw Format = iota
	// FormatBinary is CloudEvents binary mode: ce-* headers, the payload as the body.
	FormatBinary
	// FormatBatch is CloudEvents batch mode: a JSON array of structured-mode events, with
	// Content-Type application/cloudevents-batch+json.
	FormatBatch
)

func (f Format) String() string {
	switch f {
	case FormatBinary:
		return "cloudevents"
	case FormatBatch:
		return "cloudevents-batch"
	}
	return "raw"
}

// DetectFormat tells the format from the headers: a batch Content-Type means FormatBatch, a
// ce-specversion header FormatBinary, anything else FormatRaw. A structured-mode single event
// (Content-Type application/cloudevents+json) is refused with ErrUnsupported, which the relay
// never sends.
func DetectFormat(h http.Header) (Format, error) {
	switch {
	case cloudevents.IsBatch(h):
		return FormatBatch, nil
	case cloudevents.IsBinary(h):
		return FormatBinary, nil
	}
	if mt, _, err := mime.ParseMediaType(h.Get("Content-Type")); err == nil && mt == "application/cloudevents+json" {
		return FormatRaw, fmt.Errorf("%w: CloudEvents structured mode for a single event; send binary mode, or a batch (%s)",
			ErrUnsupported, cloudevents.ContentTypeBatch)
	}
	return FormatRaw, nil
}

// ParseEvents reads the events of one delivery in any of the three formats (see
// DetectFormat): one Event for raw and binary mode, the batch's events in their order for
// batch mode. It does not check the signature: call Verify first, over the same body. Every
// event id must be a uuid and every payload JSON. Attempt and Timestamp come from the request
// headers (X-Attempt, and webhook-timestamp or X-Timestamp), the same for every event of a
// batch. Under Standard Webhooks (a webhook-id header), a single event's webhook-id must be
// its id and a batch's must be cloudevents.BatchID of its ids. The error wraps ErrMalformed or
// ErrUnsupported.
func ParseEvents(h http.Header, body []byte) ([]Event, Format, error) {
	f, err := DetectFormat(h)
	if err != nil {
		return nil, f, err
	}
	if f != FormatBatch {
		ev, err := parseSingle(f, h, body)
		if err != nil {
			return nil, f, err
		}
		return []Event{ev}, f, nil
	}
	evs, err := parseBatch(h, body)
	return evs, f, err
}

// ParseEvent reads an Event from a request's headers and body: the raw contract, or
// CloudEvents binary mode when ce-specversion is present (a batch is refused; see
// ParseEvents). It does not check the signature: call Verify first. The error wraps
// ErrMalformed when the event id is missing or not a uuid (or webhook-id and the event id
// disagree), the body is not JSON, or the timestamp or attempt is not a number.
func ParseEvent(h http.Header, body []byte) (Event, error) {
	f, err := DetectFormat(h)
	if err != nil {
		return Event{}, err
	}
	if f == FormatBatch {
		return Event{}, fmt.Errorf("%w: a CloudEvents batch holds several events; read it with ParseEvents", ErrUnsupported)
	}
	return parseSingle(f, h, body)
}

func parseSingle(f Format, h http.Header, body []byte) (Event, error) {
	if f == FormatBinary {
		return parseBinary(h, body)
	}
	return parseRaw(h, body)
}

// parseBinary reads a CloudEvents binary-mode event. ce-id is the id; a webhook-id or
// X-Event-Id beside it must name the same event.
func parseBinary(h http.Header, body []byte) (Event, error) {
	ce, err := cloudevents.ParseBinary(h, body)
	if err != nil {
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	id, err := uuid.Parse(ce.ID)
	if err != nil {
		return Event{}, fmt.Errorf("%w: ce-id %q is not a uuid", ErrMalformed, clip(ce.ID))
	}
	for _, k := range []string{headerWebhookID, headerXEventID} {
		if v := h.Get(k); v != "" && v != ce.ID {
			if other, err := uuid.Parse(v); err != nil || other != id {
				return Event{}, fmt.Errorf("%w: %s %q and ce-id %s differ", ErrMalformed, k, clip(v), id)
			}
		}
	}
	if !json.Valid(body) {
		return Event{}, fmt.Errorf("%w: body is not JSON", ErrMalformed)
	}
	ev, err := common(h)
	if err != nil {
		return Event{}, err
	}
	fill(&ev, id, &ce)
	ev.Payload = json.RawMessage(body)
	return ev, nil
}

// parseBatch reads a CloudEvents batch, checking a Standard Webhooks webhook-id against the
// ids.
func parseBatch(h http.Header, body []byte) ([]Event, error) {
	ces, err := cloudevents.ParseBatch(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(ces) == 0 {
		return nil, fmt.Errorf("%w: empty batch", ErrMalformed)
	}
	base, err := common(h)
	if err != nil {
		return nil, err
	}
	evs := make([]Event, len(ces))
	ids := make([]string, len(ces))
	for i := range ces {
		ce := &ces[i]
		id, err := uuid.Parse(ce.ID)
		if err != nil {
			return nil, fmt.Errorf("%w: batch element %d: id %q is not a uuid", ErrMalformed, i, clip(ce.ID))
		}
		if len(ce.Data) == 0 {
			return nil, fmt.Errorf("%w: batch element %d (event %s) has no data", ErrMalformed, i, id)
		}
		evs[i] = base
		fill(&evs[i], id, ce)
		evs[i].Payload = json.RawMessage(ce.Data)
		ids[i] = ce.ID
	}
	if wid := h.Get(headerWebhookID); wid != "" {
		if want := cloudevents.BatchID(ids); wid != want {
			return nil, fmt.Errorf("%w: webhook-id %q of a batch must be %s, cloudevents.BatchID of its event ids",
				ErrMalformed, clip(wid), want)
		}
	}
	return evs, nil
}

func fill(ev *Event, id uuid.UUID, ce *cloudevents.Event) {
	ev.ID = id
	ev.Type = ce.Type
	ev.AggregateType = ce.AggregateType
	ev.AggregateID = ce.AggregateID
	ev.Sequence = ce.Sequence
	ev.Source = ce.Source
	ev.Time = ce.Time
}

// common reads the headers every format shares: the signed timestamp and X-Attempt.
func common(h http.Header) (Event, error) {
	ts, err := parseTimestamp(h)
	if err != nil {
		return Event{}, err
	}
	attempt, err := parseAttempt(h.Get("X-Attempt"))
	if err != nil {
		return Event{}, err
	}
	return Event{Attempt: attempt, Timestamp: ts}, nil
}

// parseRaw reads the raw contract: X-Event-* headers, the payload as the body.
func parseRaw(h http.Header, body []byte) (Event, error) {
	id, err := parseID(h)
	if err != nil {
		return Event{}, err
	}
	if !json.Valid(body) {
		return Event{}, fmt.Errorf("%w: body is not JSON", ErrMalformed)
	}
	ev, err := common(h)
	if err != nil {
		return Event{}, err
	}
	ev.ID = id
	ev.Type = h.Get("X-Event-Type")
	ev.AggregateType = h.Get("X-Aggregate-Type")
	ev.AggregateID = h.Get("X-Aggregate-Id")
	ev.Sequence = h.Get("X-Event-Sequence")
	ev.Payload = json.RawMessage(body)
	return ev, nil
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
