package webhook_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/outbox-relay/outbox-relay/destination/webhook"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"
)

// A Destination makes one signed POST per attempt and reports what came of it; the publisher
// retries what is not delivered. A consumer checks the signature over the timestamp and the
// exact body.
func ExampleNew() {
	const secret = "a-long-random-secret"
	consumer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		keys, _ := signature.Keys(signature.XSignature, []string{secret})
		valid := signature.VerifyX(keys, r.Header.Get("X-Timestamp"), body, r.Header.Get("X-Signature"))
		fmt.Println(r.Method, r.Header.Get("X-Event-Id"), r.Header.Get("X-Event-Type"), r.Header.Get("X-Attempt"), string(body), "signature valid:", valid)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer consumer.Close()

	dest, err := webhook.New(webhook.Config{URL: consumer.URL, Secrets: []string{secret}})
	if err != nil {
		log.Fatal(err)
	}
	defer dest.Close()
	msg := &envelope.Message{ID: "0193a5b2-7c4e-7d1a-9f00-000000000042", EventType: "order.created",
		AggregateType: "order", AggregateID: "42", Payload: []byte(`{"order_id":42}`),
		Sequence: envelope.Sequence(0x1538A30, 0)}
	res := dest.Send(context.Background(), msg, 1)
	fmt.Println("delivered:", res.Delivered, "status:", res.Status)
	// Output:
	// POST 0193a5b2-7c4e-7d1a-9f00-000000000042 order.created 1 {"order_id":42} signature valid: true
	// delivered: true status: 204
}
