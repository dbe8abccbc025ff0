package destination_test

import (
	"context"
	"fmt"

	"github.com/outbox-relay/outbox-relay/destination"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// printer is a Destination of a program's own: anything that can take one event and say
// whether it is safe. The engine calls Send from many goroutines, one event per aggregate
// at a time, and retries whatever is not delivered.
type printer struct{}

func (printer) Send(ctx context.Context, m *envelope.Message, attempt int) destination.Result {
	if err := ctx.Err(); err != nil {
		return destination.Result{Err: err, Label: destination.ResultTimeout}
	}
	fmt.Printf("attempt %d: %s %s/%s %s\n", attempt, m.EventType, m.AggregateType, m.AggregateID, m.Payload)
	// Delivered only once the event is durable where it went: the slot is confirmed on it.
	return destination.Result{Delivered: true, Label: destination.ResultSuccess}
}

// A Destination is the one interface a transport implements; destination/webhook,
// destination/natsdest and destination/kafkadest are three. It sees an envelope.Message and nothing
// of the stream behind it.
func ExampleDestination() {
	var dest destination.Destination = printer{}
	res := dest.Send(context.Background(), &envelope.Message{ID: "0193a5b2-7c4e-7d1a-9f00-000000000042",
		EventType: "order.created", AggregateType: "order", AggregateID: "42", Payload: []byte(`{"order_id":42}`)}, 1)
	fmt.Println("delivered:", res.Delivered)
	// Output:
	// attempt 1: order.created order/42 {"order_id":42}
	// delivered: true
}
