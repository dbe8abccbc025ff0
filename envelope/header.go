package envelope

import (
	"encoding/json"
	"net/textproto"
	"sort"
	"strings"
)

// EachHeader passes the headers of the webhook contract that a broker message carries to f: the
// event's (EventHeaders), then those forwarded from the row's headers column (ForwardHeaders).
// It leaves out what only HTTP needs: Content-Type, User-Agent, X-Attempt and the signature (a
// broker authenticates its clients itself). Values are made safe for a header line.
func EachHeader(m *Message, f func(k, v string)) {
	EventHeaders(m, f)
	if len(m.Headers) > 0 {
		ForwardHeaders(m.Headers, f)
	}
}

// EventHeaders passes the headers that describe the event itself to f: X-Event-Id,
// X-Event-Type, X-Aggregate-Type, X-Aggregate-Id and X-Event-Sequence. A webhook request and a
// broker message carry the same ones.
func EventHeaders(m *Message, f func(k, v string)) {
	f("X-Event-Id", HeaderValue(m.ID))
	f("X-Event-Type", HeaderValue(m.EventType))
	f("X-Aggregate-Type", HeaderValue(m.AggregateType))
	f("X-Aggregate-Id", HeaderValue(m.AggregateID))
	f("X-Event-Sequence", m.Sequence)
}

// ForwardHeaders passes on the entries of a row's headers column (a JSON object) that a
// request may carry, sorted by name: traceparent, tracestate and X-* names, except the
// contract's own headers, which a row cannot override. Values must be strings; they are made
// safe for a header line, and names canonical. These headers are not signed.
func ForwardHeaders(raw []byte, f func(k, v string)) {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil {
		return
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := m[k].(string)
		if !ok || !forwardable(k) {
			continue
		}
		f(textproto.CanonicalMIMEHeaderKey(k), HeaderValue(v))
	}
}

// reserved are the contract's headers, lowercased.
var reserved = map[string]bool{
	"x-event-id": true, "x-event-type": true, "x-aggregate-type": true, "x-aggregate-id": true,
	"x-attempt": true, "x-event-sequence": true, "x-timestamp": true, "x-signature": true,
}

func forwardable(name string) bool {
	if !validName(name) {
		return false
	}
	l := strings.ToLower(name)
	switch {
	case l == "traceparent", l == "tracestate":
		return true
	case strings.HasPrefix(l, "x-"):
		return !reserved[l]
	}
	return false
}

// validName reports whether name is an HTTP token.
func validName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// HeaderValue returns v as it is when it holds no control character, and otherwise with its
// control characters (other than tab) and '%' percent-encoded, so a value taken from a row can
// never end a header line or inject another header.
func HeaderValue(v string) string {
	clean := true
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		c := v[i]
		if (c < ' ' && c != '\t') || c == 0x7f || c == '%' {
			b.WriteString("%" + strings.ToUpper(string("0123456789abcdef"[c>>4])+string("0123456789abcdef"[c&15])))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
