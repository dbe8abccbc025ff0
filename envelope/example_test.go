package envelope_test

import (
	"fmt"

	"github.com/outbox-relay/outbox-relay/envelope"
)

// A destination of its own (a queue, a log) carries the contract's headers with
// EachHeader, so consumers read the same X-Event-* values as from a webhook.
func ExampleEachHeader() {
	m := &envelope.Message{ID: "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70", EventType: "order.created",
		AggregateType: "order", AggregateID: "42", Payload: []byte(`{"order_id":42}`),
		Headers:  []byte(`{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`),
		Sequence: envelope.Sequence(0x1538A30, 3)}
	envelope.EachHeader(m, func(k, v string) { fmt.Printf("%s: %s\n", k, v) })
	// Output:
	// X-Event-Id: 0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70
	// X-Event-Type: order.created
	// X-Aggregate-Type: order
	// X-Aggregate-Id: 42
	// X-Event-Sequence: 0000000001538A30-00000003
	// Traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
}
