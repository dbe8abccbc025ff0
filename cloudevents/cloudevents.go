package cloudevents

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// Wire constants of the two modes.
const (
	// SpecVersion is the CloudEvents version both modes speak.
	SpecVersion = "1.0"
	// ContentTypeJSON is the Content-Type of a binary-mode request, and the datacontenttype
	// of every event: the payload is JSON.
	ContentTypeJSON = "application/json"
	// ContentTypeBatch is the Content-Type of a batch-mode request.
	ContentTypeBatch = "application/cloudevents-batch+json"
)

// Binary-mode header names, in Go's canonical form (http.Header keys). Extensions are
// Ce-Aggregatetype, Ce-Aggregateid and Ce-Sequence; trace context travels in the W3C headers
// traceparent and tracestate, as in the raw format.
const (
	HeaderSpecVersion   = "Ce-Specversion"
	HeaderID            = "Ce-Id"
	HeaderSource        = "Ce-Source"
	HeaderType          = "Ce-Type"
	HeaderSubject       = "Ce-Subject"
	HeaderTime          = "Ce-Time"
	HeaderAggregateType = "Ce-Aggregatetype"
	HeaderAggregateID   = "Ce-Aggregateid"
	HeaderSequence      = "Ce-Sequence"
	HeaderTraceParent   = "Traceparent"
	HeaderTraceState    = "Tracestate"
)

// Event is one outbox event with the fields the CloudEvents attributes are made of. It is a
// plain struct so that both sides can fill it without importing each other.
type Event struct {
	// ID is the event id (the outbox row's id): CloudEvents id. Required.
	ID string
	// Source is the CloudEvents source, a URI-reference; the relay's default is
	// DefaultSource(pipeline). Required.
	Source string
	// Type is the event type (event_type): CloudEvents type. Required.
	Type string
	// AggregateType and AggregateID are the ordering key: the extensions aggregatetype and
	// aggregateid, and together the subject "<aggregate_type>/<aggregate_id>". When both are
	// empty there is no subject.
	AggregateType string
	AggregateID   string
	// Time is created_at: CloudEvents time, RFC 3339 in UTC with up to nanoseconds. Zero
	// means absent.
	Time time.Time
	// Sequence is the Sequence extension: the raw format's X-Event-Sequence, which sorts as a
	// string in commit order per aggregate. Empty means absent.
	Sequence string
	// TraceParent and TraceState are W3C Trace Context values. Empty means absent.
	TraceParent string
	TraceState  string
	// Data is the payload, JSON. In binary mode it is the request body, as it is; in batch
	// mode it is the "data" member, embedded as it is (so it must be valid JSON); empty Data
	// means no data member.
	Data []byte
}

// Subject is the CloudEvents subject: "<aggregate_type>/<aggregate_id>", or "" when both are
// empty.
func (e *Event) Subject() string {
	if e.AggregateType == "" && e.AggregateID == "" {
		return ""
	}
	return e.AggregateType + "/" + e.AggregateID
}

// DefaultSource is the source the relay uses for a pipeline that sets none:
// "/outbox-relay/<pipeline>".
func DefaultSource(pipeline string) string { return "/outbox-relay/" + pipeline }

// ErrInvalid is wrapped by every encoding and parsing error: the event or body does not have
// the shape this package writes and reads.
var ErrInvalid = errors.New("invalid CloudEvent")

func (e *Event) checkRequired() error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: empty id", ErrInvalid)
	case e.Source == "":
		return fmt.Errorf("%w: event %s has an empty source", ErrInvalid, clip(e.ID))
	case e.Type == "":
		return fmt.Errorf("%w: event %s has an empty type", ErrInvalid, clip(e.ID))
	}
	return nil
}

// timeText formats Time as RFC 3339 in UTC.
func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// BinaryHeaders passes each binary-mode header of e to add, names in canonical form, values
// percent-encoded where the CloudEvents HTTP binding asks (space, '"', '%', and bytes outside
// printable ASCII; ordinary ids, types and sequences pass unchanged): Content-Type, the
// ce- attributes, then traceparent and tracestate if set. The body is e.Data as it is. It
// adds no signature headers: those are the caller's, over the exact body. A caller that also
// forwards headers of its own must not forward traceparent or tracestate again.
//
// It fails (adding nothing) only if ID, Source or Type is empty.
func BinaryHeaders(e *Event, add func(name, value string)) error {
	if err := e.checkRequired(); err != nil {
		return err
	}
	add("Content-Type", ContentTypeJSON)
	add(HeaderSpecVersion, SpecVersion)
	add(HeaderID, headerEncode(e.ID))
	add(HeaderSource, headerEncode(e.Source))
	add(HeaderType, headerEncode(e.Type))
	if s := e.Subject(); s != "" {
		add(HeaderSubject, headerEncode(s))
	}
	if !e.Time.IsZero() {
		add(HeaderTime, timeText(e.Time))
	}
	if e.AggregateType != "" {
		add(HeaderAggregateType, headerEncode(e.AggregateType))
	}
	if e.AggregateID != "" {
		add(HeaderAggregateID, headerEncode(e.AggregateID))
	}
	if e.Sequence != "" {
		add(HeaderSequence, headerEncode(e.Sequence))
	}
	if e.TraceParent != "" {
		add(HeaderTraceParent, headerEncode(e.TraceParent))
	}
	if e.TraceState != "" {
		add(HeaderTraceState, headerEncode(e.TraceState))
	}
	return nil
}

// AppendBatch appends the batch-mode body for events to dst: a JSON array with one
// structured-mode object per event, in the order given, each with specversion, id, source,
// type, subject, time, datacontenttype "application/json", the extensions aggregatetype,
// aggregateid, sequence, traceparent and tracestate (each only if set), and "data" holding
// e.Data as it is (absent if e.Data is empty). The request's Content-Type is ContentTypeBatch.
//
// It fails, returning dst unchanged, if an event lacks ID, Source or Type, or its Data is not
// valid JSON; the error names the event.
func AppendBatch(dst []byte, events []Event) ([]byte, error) {
	start := len(dst)
	dst = append(dst, '[')
	for i := range events {
		e := &events[i]
		if err := e.checkRequired(); err != nil {
			return dst[:start], err
		}
		if len(e.Data) > 0 && !json.Valid(e.Data) {
			return dst[:start], fmt.Errorf("%w: event %s: data is not valid JSON", ErrInvalid, clip(e.ID))
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = appendMember(dst, '{', "specversion", SpecVersion)
		dst = appendMember(dst, ',', "id", e.ID)
		dst = appendMember(dst, ',', "source", e.Source)
		dst = appendMember(dst, ',', "type", e.Type)
		if s := e.Subject(); s != "" {
			dst = appendMember(dst, ',', "subject", s)
		}
		if !e.Time.IsZero() {
			dst = appendMember(dst, ',', "time", timeText(e.Time))
		}
		dst = appendMember(dst, ',', "datacontenttype", ContentTypeJSON)
		for _, m := range [...]struct{ k, v string }{
			{"aggregatetype", e.AggregateType}, {"aggregateid", e.AggregateID},
			{"sequence", e.Sequence}, {"traceparent", e.TraceParent}, {"tracestate", e.TraceState},
		} {
			if m.v != "" {
				dst = appendMember(dst, ',', m.k, m.v)
			}
		}
		if len(e.Data) > 0 {
			dst = append(append(dst, `,"data":`...), e.Data...)
		}
		dst = append(dst, '}')
	}
	return append(dst, ']'), nil
}

func appendMember(dst []byte, sep byte, k, v string) []byte {
	dst = append(dst, sep, '"')
	dst = append(dst, k...)
	dst = append(dst, '"', ':')
	return appendJSONString(dst, v)
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				dst = append(dst, '\\', c)
			case c < 0x20:
				dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&15])
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, `\ufffd`...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return append(dst, '"')
}

// batchNamespace is the UUID namespace of BatchID.
var batchNamespace = uuid.MustParse("6f757462-6f78-5265-a61c-792d62617463")

// BatchNamespace is the namespace UUID of BatchID, published so that anyone can recompute a
// batch's id: 6f757462-6f78-5265-a61c-792d62617463.
func BatchNamespace() uuid.UUID { return batchNamespace }

// BatchID is the webhook-id of a batch under Standard Webhooks: the name-based (version 5,
// SHA-1) UUID in BatchNamespace of the batch's event ids in batch order, each followed by
// "\n". It depends on nothing but the ids and their order, so a batch retried as formed
// carries the same webhook-id on every attempt, and it never equals one of its events' ids,
// so a batch of one is not mistaken for that event. Event ids are uuids; ids holding "\n"
// could make two different batches share an id.
func BatchID(ids []string) string {
	n := 0
	for _, id := range ids {
		n += len(id) + 1
	}
	name := make([]byte, 0, n)
	for _, id := range ids {
		name = append(append(name, id...), '\n')
	}
	return uuid.NewSHA1(batchNamespace, name).String()
}

// clip shortens a value quoted in an error, so a hostile body cannot fill the logs.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// headerEncode percent-encodes what the CloudEvents HTTP binding says a header value must not
// carry as it is: space, '"', '%', and every byte outside printable ASCII (so UTF-8 is
// encoded byte by byte).
func headerEncode(v string) string {
	n := 0
	for i := 0; i < len(v); i++ {
		if needsEncoding(v[i]) {
			n++
		}
	}
	if n == 0 {
		return v
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(v) + 2*n)
	for i := 0; i < len(v); i++ {
		c := v[i]
		if needsEncoding(c) {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func needsEncoding(c byte) bool { return c <= ' ' || c >= 0x7f || c == '"' || c == '%' }
