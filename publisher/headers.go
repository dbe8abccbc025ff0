package publisher

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
)

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
