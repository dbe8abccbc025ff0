package tracing

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// The decode span runs from the BEGIN to now, is a root of kind consumer, names the
// transaction, and what TraceTx returns is its traceparent.
func TestDecodeSpan(t *testing.T) {
	tr, rec := sdk(t)
	tx := &cdc.Tx{Xid: 731, CommitLSN: 0x1538A30, EndLSN: 0x1538A60, Resent: true,
		Events: []*envelope.Message{{ID: "a"}, {ID: "b"}}, Controls: []cdc.Control{{At: 1}}}
	began := time.Now().Add(-time.Millisecond)
	tp := Decode(tr, "orders_s0of2").TraceTx(tx, began)
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if tp != traceparent(s.SpanContext()) || s.Parent().IsValid() || s.SpanKind() != trace.SpanKindConsumer ||
		s.Name() != "decode transaction" || !s.StartTime().Equal(began) || s.EndTime().Before(began) {
		t.Fatalf("span %v returned %q: want a root consumer span from %v whose traceparent is returned", s, tp, began)
	}
	for key, want := range map[string]any{KeyPipeline: "orders_s0of2", KeyTxXid: int64(731), KeyTxCommitLSN: "0/1538A30",
		KeyTxEndLSN: "0/1538A60", KeyTxEvents: int64(2), KeyTxControls: int64(1), KeyTxResent: true} {
		if got := attr(s, key).AsInterface(); got != want {
			t.Errorf("%s = %v, want %v", key, got, want)
		}
	}
}
