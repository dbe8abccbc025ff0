package envelope

import (
	"reflect"
	"strings"
	"testing"
)

type header struct{ k, v string }

func collect(f func(func(k, v string))) []header {
	var hs []header
	f(func(k, v string) { hs = append(hs, header{k, v}) })
	return hs
}

// A broker message carries the event's headers, then the row's forwarded ones, sorted; nothing
// from the row overrides the contract's, and values cannot break a header line.
func TestEachHeaderKnownAnswer(t *testing.T) {
	m := &Message{ID: "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70", EventType: "order.created", AggregateType: "order",
		AggregateID: "4\r\nX-Evil: 1", Sequence: Sequence(0x1538A30, 3),
		Headers: []byte(`{"tracestate": "congo=t61rcWkgMzE", "x-tenant": "acme", "X-Event-Id": "forged",
			"authorization": "Bearer nope", "x-num": 5, "bad name": "x",
			"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)}
	got := collect(func(f func(k, v string)) { EachHeader(m, f) })
	want := []header{
		{"X-Event-Id", "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70"},
		{"X-Event-Type", "order.created"},
		{"X-Aggregate-Type", "order"},
		{"X-Aggregate-Id", "4%0D%0AX-Evil: 1"},
		{"X-Event-Sequence", "0000000001538A30-00000003"},
		{"Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		{"Tracestate", "congo=t61rcWkgMzE"},
		{"X-Tenant", "acme"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("headers\n%v\nwant\n%v", got, want)
	}
	plain := &Message{ID: "id", Sequence: Sequence(1, 0)}
	if got := collect(func(f func(k, v string)) { EachHeader(plain, f) }); len(got) != 5 {
		t.Fatalf("a row without headers: %v, want the five event headers", got)
	}
}

func TestHeaderValue(t *testing.T) {
	tests := map[string]string{
		"plain":             "plain",
		"100% tab\tkept":    "100% tab\tkept", // clean: '%' left alone
		"a\r\nb":            "a%0D%0Ab",
		"50%\x00":           "50%25%00",
		"del\x7f":           "del%7F",
		"ünïcode stays":     "ünïcode stays",
		"":                  "",
		"\nX-Injected: yes": "%0AX-Injected: yes",
	}
	for in, want := range tests {
		if got := HeaderValue(in); got != want {
			t.Errorf("HeaderValue(%q) = %q, want %q", in, got, want)
		}
	}
}

// Whatever a row's headers column holds, what is forwarded is a valid, non-reserved header
// name and a value without a line break.
func FuzzForwardHeaders(f *testing.F) {
	f.Add([]byte(`{"traceparent": "00-x", "x-a": "1\r\n", "X-Event-Id": "forged", "a b": "c"}`))
	f.Add([]byte(`{"x-\u0000": "v", "X-Ü": "v", "x-ok": "\u007f"}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		ForwardHeaders(raw, func(k, v string) {
			if !forwardable(k) || reserved[strings.ToLower(k)] {
				t.Fatalf("forwarded %q", k)
			}
			if strings.ContainsAny(v, "\r\n\x00") {
				t.Fatalf("value of %s can break the header line: %q", k, v)
			}
		})
	})
}
