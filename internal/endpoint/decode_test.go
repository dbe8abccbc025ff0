package endpoint

import (
	"testing"
	"time"
)

func TestSetColumnDecodesTheTextFormat(t *testing.T) {
	var r Row
	for name, text := range map[string]string{
		"id": "acme", "url": "https://acme.example/", "secrets": `[{"secret": "0123456789abcdeg"}, {"secret": "0123456789abcdef", "expires_at": "2030-01-01T00:00:00+00:00"}]`,
		"scheme": "x-signature", "format": "raw", "batch_max_events": "2", "batch_max_bytes": "2048", "batch_linger_ms": "7",
		"tenant_id": "acme", "event_types": `{order.*,"invoice.paid"}`, "aggregate_types": `{order}`, "rate_limit": "5",
		"state": "paused", "paused_reason": "x", "paused_at": "2026-01-02 03:04:05.123456+00", "allow_private_url": "t",
		"metadata": `{"a": 1}`, "created_at": "2026-01-01 00:00:00+00", "updated_at": "2026-01-01 00:00:00+00",
		"added_by_a_later_migration": "ignored",
	} {
		if err := r.SetColumn(name, []byte(text), false); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	want := time.Date(2026, 1, 2, 3, 4, 5, 123456000, time.UTC)
	if r.BatchLingerMS != 7 || len(r.EventTypes) != 2 || r.EventTypes[1] != "invoice.paid" || !r.PausedAt.Equal(want) ||
		!r.AllowPrivateURL || r.RateLimit != 5 || r.Secrets[1].ExpiresAt == nil {
		t.Fatalf("decoded %+v", r)
	}
	if err := r.Validate(nil); err != nil {
		t.Fatalf("the decoded row is not valid: %v", err)
	}
	if err := r.SetColumn("aggregate_types", nil, true); err != nil || r.AggregateTypes != nil {
		t.Fatalf("NULL aggregate_types: %v %v", r.AggregateTypes, err)
	}
	if err := r.SetColumn("url", nil, true); err == nil {
		t.Fatal("a NULL url was accepted")
	}
	if err := r.SetColumn("batch_max_events", []byte("many"), false); err == nil {
		t.Fatal("a malformed integer was accepted")
	}
}

// FuzzSetColumn feeds a streamed column's bytes, which come from outside, to the decoder and
// the checks: they may refuse, never panic.
func FuzzSetColumn(f *testing.F) {
	for _, s := range [][2]string{{"secrets", `[{"secret": "x"}]`}, {"event_types", `{a,"b c"}`}, {"paused_at", "2026-01-01 00:00:00+00"},
		{"metadata", `{"a": [1, {"b": null}]}`}, {"batch_max_events", "12"}, {"url", "http://[fe80::1%25x]/"}} {
		f.Add(s[0], []byte(s[1]))
	}
	f.Fuzz(func(t *testing.T, name string, text []byte) {
		r := Row{ID: "a", URL: "https://a.example/", Secrets: []Secret{{Value: "0123456789abcdef"}}, Scheme: "x-signature",
			Format: "raw", BatchMaxEvents: 1, BatchMaxBytes: 1 << 20, EventTypes: []string{"*"}, State: Enabled}
		if err := r.SetColumn(name, text, false); err != nil {
			return
		}
		_ = r.Validate(&Guard{})
		_, _, _ = r.Keys(nil, time.Now())
		_ = r.Subscribed("t", "order.created", "order")
	})
}
