package cloudevents_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/outbox-relay/outbox-relay/cloudevents"
)

func Example() {
	e := cloudevents.Event{
		ID:            "0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70",
		Source:        cloudevents.DefaultSource("default"),
		Type:          "order.created",
		AggregateType: "order",
		AggregateID:   "42",
		Time:          time.Date(2026, 11, 30, 19, 40, 0, 123456000, time.UTC),
		Sequence:      "0000000001538A30-00000003",
		Data:          []byte(`{"order_id":42}`),
	}
	// One event per request: binary mode.
	h := http.Header{}
	if err := cloudevents.BinaryHeaders(&e, h.Add); err != nil {
		panic(err)
	}
	fmt.Println(h.Get("Ce-Subject"), h.Get("Ce-Time"))

	// Several: batch mode, and the batch's webhook-id.
	body, err := cloudevents.AppendBatch(nil, []cloudevents.Event{e})
	if err != nil {
		panic(err)
	}
	fmt.Println(string(body))
	fmt.Println(cloudevents.BatchID([]string{e.ID}))
	// Output:
	// order/42 2026-11-30T19:40:00.123456Z
	// [{"specversion":"1.0","id":"0193a0c4-6c1e-7cc2-9f1a-2b3c4d5e6f70","source":"/outbox-relay/default","type":"order.created","subject":"order/42","time":"2026-11-30T19:40:00.123456Z","datacontenttype":"application/json","aggregatetype":"order","aggregateid":"42","sequence":"0000000001538A30-00000003","data":{"order_id":42}}]
	// a7d74d4a-4761-5cce-bb34-76cca8e4fa2c
}
