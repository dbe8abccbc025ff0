package publisher

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"

	"github.com/outbox-relay/outbox-relay/cdc"
)

// eventHeaders passes the headers that describe the event itself to h: X-Event-Id,
// X-Event-Type, X-Aggregate-Type, X-Aggregate-Id and X-Event-Sequence. A webhook request and a
// broker message carry the same ones.
func eventHeaders(ev *cdc.Event, h headerSink) {
	h.add("X-Event-Id", headerValue(ev.ID))
	h.add("X-Event-Type", headerValue(ev.EventType))
	h.add("X-Aggregate-Type", headerValue(ev.AggregateType))
	h.add("X-Aggregate-Id", headerValue(ev.AggregateID))
	var seq [25]byte
	h.addBytes("X-Event-Sequence", appendSequence(seq[:0], ev))
}

// EachHeader passes the headers of the webhook contract that a broker message carries to f: the
// event's (X-Event-Id, X-Event-Type, X-Aggregate-Type, X-Aggregate-Id, X-Event-Sequence), then
// those forwarded from the row's headers column (traceparent, tracestate, X-*). It leaves out
// what only HTTP needs: Content-Type, User-Agent, X-Attempt and the signature (a broker
// authenticates its clients itself). Values are made safe for a header line.
func EachHeader(ev *cdc.Event, f func(k, v string)) {
	eventHeaders(ev, funcHead(f))
	if len(ev.Headers) > 0 {
		forwardHeaders(ev.Headers, f)
	}
}

// funcHead passes headers to a function.
type funcHead func(k, v string)

func (h funcHead) add(k, v string)             { h(k, v) }
func (h funcHead) addBytes(k string, v []byte) { h(k, string(v)) }

// forwardHeaders passes on the entries of a row's headers column (a JSON object) that a
// request may carry: traceparent, tracestate and X-* names, except the contract's own headers,
// which a row cannot override. Values must be strings. These headers are not signed.
func forwardHeaders(raw []byte, f func(k, v string)) {
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
		f(http.CanonicalHeaderKey(k), headerValue(v))
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

// headerValue returns v with control characters (other than tab) percent-encoded, so a value
// taken from a row can never end a header line or inject another header.
func headerValue(v string) string {
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
