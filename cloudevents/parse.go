package cloudevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// IsBinary reports whether h carries a binary-mode event: it has a ce-specversion header.
func IsBinary(h http.Header) bool { return h.Get(HeaderSpecVersion) != "" }

// IsBatch reports whether h's Content-Type is ContentTypeBatch (parameters such as charset
// and letter case aside).
func IsBatch(h http.Header) bool {
	ct := h.Get("Content-Type")
	if ct == "" {
		return false
	}
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == ContentTypeBatch
}

// ParseBinary reads a binary-mode event from its headers and body, decoding percent-encoded
// header values. Data is body itself, not a copy. The subject is not kept: it is derived from
// the aggregate extensions (Event.Subject). The error wraps ErrInvalid when ce-specversion is
// not 1.0, id, source or type is missing, or ce-time is not RFC 3339.
func ParseBinary(h http.Header, body []byte) (Event, error) {
	if v := h.Get(HeaderSpecVersion); v != SpecVersion {
		return Event{}, fmt.Errorf("%w: ce-specversion %q, want %q", ErrInvalid, clip(v), SpecVersion)
	}
	e := Event{
		ID:            headerDecode(h.Get(HeaderID)),
		Source:        headerDecode(h.Get(HeaderSource)),
		Type:          headerDecode(h.Get(HeaderType)),
		AggregateType: headerDecode(h.Get(HeaderAggregateType)),
		AggregateID:   headerDecode(h.Get(HeaderAggregateID)),
		Sequence:      headerDecode(h.Get(HeaderSequence)),
		TraceParent:   headerDecode(h.Get(HeaderTraceParent)),
		TraceState:    headerDecode(h.Get(HeaderTraceState)),
		Data:          body,
	}
	if err := e.checkRequired(); err != nil {
		return Event{}, err
	}
	if v := h.Get(HeaderTime); v != "" {
		t, err := parseTime(v)
		if err != nil {
			return Event{}, fmt.Errorf("%w: event %s: ce-time %q is not RFC 3339", ErrInvalid, clip(e.ID), clip(v))
		}
		e.Time = t
	}
	return e, nil
}

// ParseBatch reads a batch-mode body: a JSON array of structured-mode events, returned in the
// array's order. Each needs specversion "1.0", id, source and type; time, if present, must be
// RFC 3339; the extensions this package writes must be strings; datacontenttype, if present,
// must be JSON (application/json or a +json type); data is kept as its raw JSON (nil when
// absent), and data_base64 is refused, since the relay always sends JSON. Other attributes
// (subject included, which is derived) are ignored. The error wraps ErrInvalid and names the
// element.
func ParseBatch(body []byte) ([]Event, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%w: batch body is not a JSON array of objects: %v", ErrInvalid, err)
	}
	events := make([]Event, len(raw))
	for i, m := range raw {
		if err := parseStructured(m, &events[i]); err != nil {
			return nil, fmt.Errorf("batch element %d: %w", i, err)
		}
	}
	return events, nil
}

func parseStructured(m map[string]json.RawMessage, e *Event) error {
	if m == nil {
		return fmt.Errorf("%w: not an object", ErrInvalid)
	}
	str := func(k string, dst *string) error {
		v, ok := m[k]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(v, dst); err != nil {
			return fmt.Errorf("%w: %s is not a string", ErrInvalid, k)
		}
		return nil
	}
	var spec, tm, dct string
	for _, f := range [...]struct {
		k   string
		dst *string
	}{
		{"specversion", &spec}, {"id", &e.ID}, {"source", &e.Source}, {"type", &e.Type},
		{"time", &tm}, {"datacontenttype", &dct},
		{"aggregatetype", &e.AggregateType}, {"aggregateid", &e.AggregateID},
		{"sequence", &e.Sequence}, {"traceparent", &e.TraceParent}, {"tracestate", &e.TraceState},
	} {
		if err := str(f.k, f.dst); err != nil {
			return err
		}
	}
	if spec != SpecVersion {
		return fmt.Errorf("%w: specversion %q, want %q", ErrInvalid, clip(spec), SpecVersion)
	}
	if err := e.checkRequired(); err != nil {
		return err
	}
	if tm != "" {
		t, err := parseTime(tm)
		if err != nil {
			return fmt.Errorf("%w: event %s: time %q is not RFC 3339", ErrInvalid, clip(e.ID), clip(tm))
		}
		e.Time = t
	}
	if dct != "" && !jsonMediaType(dct) {
		return fmt.Errorf("%w: event %s: datacontenttype %q is not JSON", ErrInvalid, clip(e.ID), clip(dct))
	}
	if _, ok := m["data_base64"]; ok {
		return fmt.Errorf("%w: event %s: data_base64 is not supported, send JSON in data", ErrInvalid, clip(e.ID))
	}
	if d, ok := m["data"]; ok {
		e.Data = bytes.Clone(d)
	}
	return nil
}

func jsonMediaType(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && (mt == ContentTypeJSON || strings.HasSuffix(mt, "+json"))
}

func parseTime(v string) (time.Time, error) { return time.Parse(time.RFC3339Nano, v) }

// headerDecode undoes headerEncode: each %XX becomes its byte; a '%' not followed by two hex
// digits stays as it is.
func headerDecode(v string) string {
	if strings.IndexByte(v, '%') < 0 {
		return v
	}
	b := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '%' && i+2 < len(v) {
			hi, ok1 := unhex(v[i+1])
			lo, ok2 := unhex(v[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, v[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
