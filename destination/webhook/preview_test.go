package webhook

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/envelope"
	"github.com/outbox-relay/outbox-relay/signature"
)

// A preview is the request Send makes, header for header and byte for byte, but for the
// signature's value, which it masks.
func TestPreviewIsTheRequestWithoutItsSignature(t *testing.T) {
	for _, tt := range []struct {
		name   string
		format Format
		scheme signature.Scheme
		sig    string
	}{
		{"raw, x-signature", FormatRaw, signature.XSignature, "X-Signature"},
		{"cloudevents, standard webhooks", FormatCloudEvents, signature.StandardWebhooks, "Webhook-Signature"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan *http.Request, 1)
			bodies := make(chan []byte, 1)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				got <- r
				bodies <- b
			}))
			defer srv.Close()
			secret := "preview-secret-0123456789abcdef"
			if tt.scheme == signature.StandardWebhooks {
				secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
			}
			d, err := New(Config{URL: srv.URL, Secrets: []string{secret}, Scheme: tt.scheme, Format: tt.format,
				UserAgent: "outbox-relay/test", DefaultSource: "/outbox-relay/test"})
			if err != nil {
				t.Fatal(err)
			}
			defer d.Close()
			m := &envelope.Message{ID: "0190a6c4-0000-7000-8000-000000000001", EventType: "order.created", AggregateType: "order",
				AggregateID: "o-1", Payload: []byte(`{"id":1}`), Headers: []byte(`{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}`),
				CreatedAt: time.Now(), CommitTime: time.Now(), Sequence: "0000000001A2B3C4-00000001"}
			if res := d.Send(context.Background(), m, 2); !res.Delivered {
				t.Fatalf("send: %+v", res)
			}
			sent, body := <-got, <-bodies
			if sent.Header.Get(tt.sig) == "" || len(sent.Header) < 8 {
				t.Fatalf("the request sent has only %v: the comparison would prove little", sent.Header)
			}
			h, pbody := d.Preview(m, 2, time.Now(), "(not shown)")
			if string(pbody) != string(body) {
				t.Errorf("preview body %s, sent %s", pbody, body)
			}
			for name, vals := range sent.Header {
				switch name {
				case "Accept-Encoding", "Content-Length":
					continue // added by the transport
				case tt.sig:
					if h.Get(name) != "(not shown)" {
						t.Errorf("%s previewed as %q, want masked", name, h.Get(name))
					}
					continue
				case "Webhook-Timestamp", "X-Timestamp":
					if h.Get(name) == "" {
						t.Errorf("no %s in the preview", name)
					}
					continue
				}
				if p := strings.Join(h.Values(name), ","); p != strings.Join(vals, ",") {
					t.Errorf("header %s: previewed %q, sent %q", name, p, strings.Join(vals, ","))
				}
			}
			for name := range h {
				if _, ok := sent.Header[name]; !ok {
					t.Errorf("the preview has %s, which the request had not", name)
				}
			}
		})
	}
}
