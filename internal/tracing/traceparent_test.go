package tracing

import (
	"testing"

	"github.com/outbox-relay/outbox-relay/envelope"
)

func TestParseTraceparent(t *testing.T) {
	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tc := range []struct {
		name, in string
		ok       bool
		sampled  bool
	}{
		{"valid", valid, true, true},
		{"not sampled", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", true, false},
		{"other flags kept out", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-03", true, true},
		{"a later version with more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-comes", true, true},
		{"a later version, exactly four fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", true, true},
		{"empty", "", false, false},
		{"version 00 with more", valid + "-x", false, false},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", false, false},
		{"uppercase", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01", false, false},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", false, false},
		{"zero span id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", false, false},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", false, false},
		{"separators", "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01", false, false},
		{"a later version glued", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, ok := parseTraceparent(tc.in)
			if ok != tc.ok || (ok && (sc.IsSampled() != tc.sampled || !sc.IsRemote() || !sc.IsValid())) {
				t.Fatalf("parseTraceparent(%q) = %v (sampled %v), %v; want ok %v, sampled %v", tc.in, sc, sc.IsSampled(), ok, tc.ok, tc.sampled)
			}
		})
	}
	sc, _ := parseTraceparent(valid)
	if got := traceparent(sc); got != valid {
		t.Fatalf("traceparent(parse(%q)) = %q", valid, got)
	}
}

// Whatever a row holds, parsing never panics, and what parses writes back as the same ids.
func FuzzParseTraceparent(f *testing.F) {
	f.Add("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	f.Add("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-x")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		sc, ok := parseTraceparent(s)
		if !ok {
			return
		}
		back, ok2 := parseTraceparent(traceparent(sc))
		if !ok2 || back.TraceID() != sc.TraceID() || back.SpanID() != sc.SpanID() || back.IsSampled() != sc.IsSampled() {
			t.Fatalf("%q parsed to %v, which writes back as %q", s, sc, traceparent(sc))
		}
	})
}

// forwarded is what a destination forwards of a headers column.
func forwarded(raw []byte) map[string]string {
	out := map[string]string{}
	envelope.ForwardHeaders(raw, func(k, v string) { out[k] = v })
	return out
}

// The attempt's traceparent replaces the stored one, under whatever case it was stored, and
// every other entry a destination forwards is kept.
func TestHeadersCarryTheAttemptsTraceparent(t *testing.T) {
	const tp = "00-11111111111111111111111111111111-2222222222222222-01"
	for _, tc := range []struct {
		name, raw string
		parent    string
		want      map[string]string
	}{
		{"no column", "", "", map[string]string{"Traceparent": tp}},
		{"not an object", `[1,2]`, "", map[string]string{"Traceparent": tp}},
		{"other entries kept", `{"X-Request-Id":"r1","tracestate":"vendor=1","n":3}`, "",
			map[string]string{"Traceparent": tp, "Tracestate": "vendor=1", "X-Request-Id": "r1"}},
		{"stored one replaced", `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","x-a":"b"}`,
			"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", map[string]string{"Traceparent": tp, "X-A": "b"}},
		{"stored under another case", `{"TraceParent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
			"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", map[string]string{"Traceparent": tp}},
		{"not a string", `{"traceparent":42}`, "", map[string]string{"Traceparent": tp}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := readHeaders([]byte(tc.raw))
			if h.parent != tc.parent {
				t.Errorf("stored traceparent %q, want %q", h.parent, tc.parent)
			}
			got := forwarded(h.with(tp))
			if len(got) != len(tc.want) {
				t.Fatalf("forwarded %v, want %v", got, tc.want)
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Fatalf("forwarded %v, want %v", got, tc.want)
				}
			}
		})
	}
}
