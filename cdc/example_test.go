package cdc_test

import (
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/outbox-relay/outbox-relay/cdc"
	"github.com/outbox-relay/outbox-relay/envelope"
)

// The Tracker is where "confirm only after delivery" is decided: the slot may move to the end
// of a transaction only once it and every earlier transaction are delivered, whatever order
// the deliveries finish in (different aggregates are delivered concurrently).
func ExampleTracker() {
	tracker := cdc.NewTracker(10_000, 64<<20) // the buffer: at most this many events or bytes
	first := &cdc.Tx{EndLSN: pglogrepl.LSN(0x100), CommitTime: time.Now(),
		Events: []*envelope.Message{{ID: "a", AggregateType: "order", AggregateID: "1"}}}
	second := &cdc.Tx{EndLSN: pglogrepl.LSN(0x200), CommitTime: time.Now(),
		Events: []*envelope.Message{{ID: "b", AggregateType: "order", AggregateID: "2"}}}
	tracker.Add(first) // in commit order, before any of its events is handed to delivery
	tracker.Add(second)

	tracker.Ack(second, second.Events[0]) // the later transaction's event is delivered first
	fmt.Println("confirmable after the second:", tracker.Confirmable())
	tracker.Ack(first, first.Events[0])
	fmt.Println("confirmable after both:", tracker.Confirmable())
	// Output:
	// confirmable after the second: 0/0
	// confirmable after both: 0/200
}
