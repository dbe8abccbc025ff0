package webhook

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/outbox-relay/outbox-relay/cloudevents"
	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"
)

// A gzip-compressed batch, over a real connection: the signature verifies over the exact bytes
// sent, they inflate to the CloudEvents batch, and a retry of the same batch carries the same
// webhook-id (derived from its events' ids).
func TestBatchGzipSignatureAndStableWebhookID(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	type req struct {
		h    http.Header
		body []byte
	}
	got := make(chan req, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- req{r.Header.Clone(), b}
	}))
	defer srv.Close()
	w, err := New(Config{URL: srv.URL, Secrets: []string{secret}, Scheme: signature.StandardWebhooks,
		Compression: CompressionGzip, DefaultSource: "/outbox-relay/p"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	evs := []*envelope.Message{
		{ID: "e1", AggregateType: "order", AggregateID: "1", EventType: "t", Payload: []byte(`{"a":1}`), Sequence: envelope.Sequence(0x10, 0)},
		{ID: "e2", AggregateType: "order", AggregateID: "1", EventType: "t", Payload: []byte(`{"a":2}`), Sequence: envelope.Sequence(0x10, 1)},
	}
	var ids []string
	for attempt := 1; attempt <= 2; attempt++ {
		if r := w.SendBatch(context.Background(), evs, attempt); !r.Delivered {
			t.Fatalf("attempt %d: %+v", attempt, r)
		}
		r := <-got
		if r.h.Get("Content-Encoding") != "gzip" || r.h.Get("Content-Type") != cloudevents.ContentTypeBatch {
			t.Fatalf("headers %v", r.h)
		}
		if !signature.VerifyStandard([][]byte{key}, r.h.Get("Webhook-Id"), r.h.Get("Webhook-Timestamp"), r.body,
			r.h.Values("Webhook-Signature")...) {
			t.Fatal("the signature does not verify over the bytes sent")
		}
		zr, err := gzip.NewReader(bytes.NewReader(r.body))
		if err != nil {
			t.Fatal(err)
		}
		plain, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := cloudevents.ParseBatch(plain)
		if err != nil || len(parsed) != 2 || parsed[0].ID != "e1" || parsed[1].ID != "e2" || parsed[0].Source != "/outbox-relay/p" {
			t.Fatalf("body %s: %+v %v", plain, parsed, err)
		}
		ids = append(ids, r.h.Get("Webhook-Id"))
	}
	if ids[0] != ids[1] || ids[0] != cloudevents.BatchID([]string{"e1", "e2"}) || strings.Contains(ids[0], "e1") {
		t.Fatalf("webhook-ids %v, want the same BatchID twice", ids)
	}
}
