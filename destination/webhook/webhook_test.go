package webhook

import (
	"net/http"
	"testing"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"
)

// The public contract, with a fixed secret, timestamp and body. The expected signature was
// computed independently: printf '1700000000{"order_id":42}' | openssl dgst -sha256 -hmac topsecret
func TestHeadersKnownAnswer(t *testing.T) {
	w, err := New(Config{URL: "http://127.0.0.1:1/hook", Secrets: []string{"topsecret"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := &envelope.Message{ID: "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70", AggregateType: "order", AggregateID: "42",
		EventType: "order.created", Payload: []byte(`{"order_id":42}`), Sequence: envelope.Sequence(0x1538A30, 3)}
	h := http.Header{}
	w.eachHeader(ev, 2, 1700000000, ev.Payload, stdHead(h))
	want := map[string]string{
		"Content-Type":     "application/json",
		"X-Event-Id":       "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70",
		"X-Event-Type":     "order.created",
		"X-Aggregate-Type": "order",
		"X-Aggregate-Id":   "42",
		"X-Attempt":        "2",
		"X-Timestamp":      "1700000000",
		"X-Event-Sequence": "0000000001538A30-00000003",
		"X-Signature":      "sha256=625a14baf9101a938343dbbd360883050e7583216597fcbd0a04296f22e56cb8",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
}

func TestStandardWebhooksHeaders(t *testing.T) {
	secret := "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	w, err := New(Config{URL: "https://example.com/h", Secrets: []string{secret}, Scheme: signature.StandardWebhooks})
	if err != nil {
		t.Fatal(err)
	}
	ev := &envelope.Message{ID: "msg_p5jXN8AQM9LWM0D4loKWxJek", Payload: []byte(`{"test": 2432232314}`)}
	h := http.Header{}
	w.eachHeader(ev, 1, 1614265330, ev.Payload, stdHead(h))
	if got := h.Get("webhook-signature"); got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("webhook-signature = %q", got)
	}
	if h.Get("webhook-id") != ev.ID || h.Get("webhook-timestamp") != "1614265330" || h.Get("X-Signature") != "" {
		t.Fatalf("headers = %v", h)
	}
}

func TestParseURL(t *testing.T) {
	for _, bad := range []string{"", "localhost:8080/hook", "ftp://x/y", "http://", "://nope", "/relative"} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if _, err := ParseURL("https://consumer.example:8443/webhooks?x=1"); err != nil {
		t.Fatal(err)
	}
}

func TestForwardedHeaders(t *testing.T) {
	w, _ := New(Config{URL: "http://127.0.0.1:1/", Secrets: []string{"s"}})
	ev := &envelope.Message{ID: "id", AggregateType: "order", AggregateID: "4\r\nX-Evil: 1", EventType: "t", Payload: []byte("{}"),
		Sequence: envelope.Sequence(1, 0), Headers: []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			"tracestate": "congo=t61rcWkgMzE", "x-tenant": "acme", "X-Event-Id": "forged", "x-signature": "forged",
			"authorization": "Bearer nope", "x-num": 5, "bad name": "x"}`)}
	h := http.Header{}
	w.eachHeader(ev, 1, 1, ev.Payload, stdHead(h))
	if h.Get("Traceparent") != "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" || h.Get("Tracestate") == "" ||
		h.Get("X-Tenant") != "acme" {
		t.Fatalf("trace headers not forwarded: %v", h)
	}
	if len(h["X-Event-Id"]) != 1 || h.Get("X-Event-Id") != "id" || len(h["X-Signature"]) != 1 {
		t.Fatalf("a row overrode a contract header: %v", h)
	}
	if h.Get("Authorization") != "" || h.Get("X-Num") != "" {
		t.Fatalf("forwarded a header it should not: %v", h)
	}
	if got := h.Get("X-Aggregate-Id"); got != "4%0D%0AX-Evil: 1" {
		t.Fatalf("control characters not encoded: %q", got)
	}
}
