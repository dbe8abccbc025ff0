package tracing

import (
	"encoding/json"
	"slices"
	"strings"

	"go.opentelemetry.io/otel/trace"
)

// parseTraceparent reads a W3C traceparent (version-traceid-spanid-flags, lowercase hex) as a
// remote span context. A malformed one, version ff, or all-zero ids give ok false; a later
// version is read by its first four fields, as the specification asks.
func parseTraceparent(s string) (sc trace.SpanContext, ok bool) {
	if len(s) < 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' || (len(s) > 55 && s[55] != '-') {
		return sc, false
	}
	version, okV := hexByte(s[0:2])
	flags, okF := hexByte(s[53:55])
	if !okV || !okF || version == 0xff || (version == 0 && len(s) != 55) {
		return sc, false
	}
	tid, err := trace.TraceIDFromHex(s[3:35])
	if err != nil {
		return sc, false
	}
	sid, err := trace.SpanIDFromHex(s[36:52])
	if err != nil {
		return sc, false
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.TraceFlags(flags) & trace.FlagsSampled, Remote: true}), true
}

// hexByte decodes two lowercase hex digits.
func hexByte(s string) (byte, bool) {
	var v byte
	for i := 0; i < 2; i++ {
		c := s[i]
		switch {
		case '0' <= c && c <= '9':
			v = v<<4 | (c - '0')
		case 'a' <= c && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

// traceparent writes sc as a version 00 W3C traceparent.
func traceparent(sc trace.SpanContext) string {
	const digits = "0123456789abcdef"
	var b [55]byte
	b[0], b[1], b[2] = '0', '0', '-'
	tid, sid := sc.TraceID(), sc.SpanID()
	for i, v := range tid {
		b[3+2*i], b[4+2*i] = digits[v>>4], digits[v&15]
	}
	b[35] = '-'
	for i, v := range sid {
		b[36+2*i], b[37+2*i] = digits[v>>4], digits[v&15]
	}
	f := byte(sc.TraceFlags())
	b[52], b[53], b[54] = '-', digits[f>>4], digits[f&15]
	return string(b[:])
}

// rowHeaders is a row's headers column (a JSON object) as an attempt reads it.
type rowHeaders struct {
	fields map[string]json.RawMessage // nil: the column is absent, NULL or not an object
	parent string                     // its traceparent entry (any case of the name), if a string
	state  string                     // its tracestate entry, if a string
}

// readHeaders reads raw, a row's headers column.
func readHeaders(raw []byte) rowHeaders {
	var h rowHeaders
	if len(raw) == 0 || json.Unmarshal(raw, &h.fields) != nil {
		return rowHeaders{}
	}
	for k, v := range h.fields {
		var s string
		switch strings.ToLower(k) {
		case "traceparent":
			if json.Unmarshal(v, &s) == nil {
				h.parent = s
			}
		case "tracestate":
			if json.Unmarshal(v, &s) == nil {
				h.state = s
			}
		}
	}
	return h
}

// with returns the column with tp as its one traceparent entry: the stored one, under any
// case of its name, is replaced, and every other entry kept as it is. Destinations forward the
// column's traceparent (envelope.ForwardHeaders), so the attempt's request carries tp. It
// writes the object itself, keys sorted as encoding/json would: the values came out of a
// valid object, and re-encoding them is most of what json.Marshal would cost.
func (h rowHeaders) with(tp string) []byte {
	keys := make([]string, 0, len(h.fields)+1)
	size := len(`{"traceparent":""}`) + len(tp)
	for k, v := range h.fields {
		if !strings.EqualFold(k, "traceparent") {
			keys = append(keys, k)
			size += len(k) + len(v) + 4
		}
	}
	keys = append(keys, "traceparent")
	slices.Sort(keys)
	b := make([]byte, 0, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if k == "traceparent" {
			b = appendString(b, tp)
		} else {
			b = append(b, h.fields[k]...)
		}
	}
	return append(b, '}')
}

// appendString appends s as a JSON string.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := json.Marshal(s) // rare: a key that needs escaping
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}
