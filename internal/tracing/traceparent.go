package tracing

import (
	"encoding/json"
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
// column's traceparent (envelope.ForwardHeaders), so the attempt's request carries tp.
func (h rowHeaders) with(tp string) []byte {
	out := make(map[string]json.RawMessage, len(h.fields)+1)
	for k, v := range h.fields {
		if !strings.EqualFold(k, "traceparent") {
			out[k] = v
		}
	}
	out["traceparent"] = json.RawMessage(`"` + tp + `"`)
	b, err := json.Marshal(out)
	if err != nil {
		// Every value came out of a valid JSON object, so this cannot fail; if it did, the
		// attempt would go with its stored headers.
		return nil
	}
	return b
}
